"""Output-length priors: the protocol, the default chooser, batching off the loop, calibration."""
