"""Tests of semisched against the oldest and the newest supported openai (see conftest.py).

A package, so that its conftest is imported as ``compat.conftest`` and never takes
the place of another folder's top-level ``conftest`` module.
"""
