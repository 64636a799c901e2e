"""The mock's ``llama-cpp`` profile is what ``python -m bench real-engine fit`` measured on
llama-server (docs/results/real-engine/fit.json), so ``python -m mockprovider --profile
llama-cpp`` answers with the engine's speed."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

from mockprovider.__main__ import build_parser, config_from_args
from mockprovider.physics import PROFILES, PhysicsParams

FIT = Path(__file__).resolve().parents[2] / "docs" / "results" / "real-engine" / "fit.json"


def test_the_profile_is_the_committed_fit() -> None:
    fitted = json.loads(FIT.read_text(encoding="utf-8"))["profile"]
    assert asdict(PROFILES["llama-cpp"]) == asdict(PhysicsParams(**fitted))


def test_the_mock_serves_the_profile_from_its_command_line() -> None:
    parser = build_parser()
    config = config_from_args(parser.parse_args(["--profile", "llama-cpp"]), parser)
    assert config.physics == PROFILES["llama-cpp"]
    assert config.physics.prefill_ms_per_token > 0 and config.physics.slots == 8
