"""Fleets in the runtime: endpoints (deployments) and fleet files."""
