"""The async runtime: :class:`Scheduler` and the shell that executes the core's actions."""
