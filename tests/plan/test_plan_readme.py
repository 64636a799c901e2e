"""The plan guide's ``semisched plan`` commands run as printed, on the trace the guide makes.

The trace is ``examples/capacity_plan.py --write-trace``'s; the profile file stands for
what ``semisched plan fit --profile default --out`` writes (the default's fields, W and H
refitted), so its context is the default's. ``plan fit`` itself needs a batch output
and is only parsed.
"""

from __future__ import annotations

import io
import re
import shlex
import subprocess
import sys
from pathlib import Path

from semisched.plan.cli import _parser, plan_main
from semisched.plan.fit import _parser as fit_parser
from semisched.plan.profile import named_profile

ROOT = Path(__file__).resolve().parents[2]


#: The page whose commands these are (``tests/docs/test_snippets.py`` leaves them to this test).
GUIDE = ROOT / "docs/guides/plan.md"


def readme_plan_commands() -> list[list[str]]:
    """Each ``semisched plan ...`` line of the plan guide's bash blocks, continuations joined."""
    text = GUIDE.read_text(encoding="utf-8")
    commands = []
    for block in re.findall(r"```bash\n(.*?)```", text, flags=re.DOTALL):
        for line in block.replace("\\\n", " ").splitlines():
            words = shlex.split(line, comments=True)
            if words[:2] == ["semisched", "plan"]:
                commands.append(words[2:])
    return commands


def test_the_readme_plan_commands_run_as_printed(tmp_path: Path) -> None:
    commands = readme_plan_commands()
    assert len(commands) >= 3
    subprocess.run([sys.executable, str(ROOT / "examples/capacity_plan.py"), "--write-trace",
                    str(tmp_path / "chat.jsonl")], check=True, capture_output=True)  # fmt: skip
    (tmp_path / "unit.json").write_text(named_profile("default").to_json(), encoding="utf-8")
    for words in commands:
        args = [word.replace("/tmp/", f"{tmp_path}/") for word in words]
        if args[0] == "fit":
            fit_parser().parse_args(args[1:])  # no batch output to fit here
            continue
        _parser().parse_args(args)
        out = io.StringIO()
        code = plan_main(args, out)
        assert code == 0, (words, out.getvalue())
