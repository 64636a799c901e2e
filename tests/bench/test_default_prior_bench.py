"""``python -m bench default-prior``: issue 12's overload run through the SDK, in virtual time."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from bench.__main__ import main
from bench.default_prior import default_prior


def test_one_cell_writes_its_runs_summary_and_table_and_reports_each_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("bench.default_prior.REQUESTS", 500)  # half a run still overloads
    table = default_prior(
        tmp_path, seeds=2, workloads=("exact",), conditions=("heuristic",), workers=1
    )
    with (tmp_path / "runs.csv").open() as fh:
        runs = list(csv.DictReader(fh))
    assert len(runs) == 2  # one per seed
    for run in runs:
        outcomes = int(run["completed"]) + int(run["rejected"]) + int(run["deadline_exceeded"])
        assert outcomes == 500
        assert int(run["rejected"]) > 0 and int(run["deadline_exceeded"]) == 0
    assert "| exact | heuristic |" in table.read_text()
    assert (tmp_path / "summary.csv").stat().st_size > 0
    # Off a terminal, a line per tenth of the runs (here each of the two).
    err = capsys.readouterr().err
    assert [line.split()[:3] for line in err.splitlines() if "overload runs" in line] == [
        ["overload", "runs", "1/2"],
        ["overload", "runs", "2/2"],
    ]


def test_unknown_workloads_are_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["default-prior", "--out", str(tmp_path), "--workloads", "exact,nope"])
    assert exc.value.code == 2
    assert "--workloads: workload 'nope' must be one of exact, bounded, sharegpt" in (
        capsys.readouterr().err
    )
