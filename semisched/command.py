"""The ``semisched`` command's entry point: hands each subcommand to its module.

``semisched plan ...`` goes to `semisched.plan.cli` without importing the
SDK (no anyio, no openai: the planner starts in a fraction of a second);
``semisched serve ...`` to `semisched.gateway.cli` (the ``gateway`` extra);
``--version`` is answered here; everything else goes to `semisched.batch.cli`.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from importlib.metadata import PackageNotFoundError
from importlib.metadata import version as dist_version

__all__ = ["main", "version"]


def version() -> str:
    """The installed distribution's version (``semisched.__version__`` in a bare checkout)."""
    try:
        return dist_version("semisched")
    except PackageNotFoundError:  # a source tree that was never installed
        from semisched import __version__

        return __version__


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``semisched`` command with ``argv`` (default ``sys.argv[1:]``)."""
    args = list(sys.argv[1:] if argv is None else argv)
    if args == ["--version"]:  # at once: no SDK import
        print(f"semisched {version()}")
        return 0
    if args[:1] == ["plan"]:
        from semisched.plan.cli import plan_main

        return plan_main(args[1:], sys.stdout)
    if args[:1] == ["serve"]:  # the gateway: its extra (starlette, uvicorn) loaded only here
        from semisched.gateway.cli import main as serve_main

        return serve_main(args[1:])
    from semisched.batch.cli import main as sdk_main

    return sdk_main(args)
