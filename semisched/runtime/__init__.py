"""The async runtime: `Scheduler` and the shell that executes the core's actions."""
