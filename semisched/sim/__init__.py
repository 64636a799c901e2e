"""The discrete-event simulator: the same core in virtual time against the mock's physics."""
