"""``python -m semisched ...``: the same as the ``semisched`` command."""

from semisched.cli import main

raise SystemExit(main())
