"""Prompt compression: the extractive compressor (used by the planner and the runtime),
and the runtime's opt-in compress-and-route."""
