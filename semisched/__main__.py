"""``python -m semisched ...``: the same as the ``semisched`` command."""

from semisched.command import main

raise SystemExit(main())
