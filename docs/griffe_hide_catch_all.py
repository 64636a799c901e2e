"""A griffe extension for the API reference: hide the ``**removed`` catch-all.

``Scheduler(**removed)`` only exists to turn a keyword the constructor no longer
takes into a ``TypeError`` that says where it went; it is no parameter to pass,
so the rendered signature leaves it out (mkdocs.yml loads this file).
"""

from __future__ import annotations

from typing import Any

import griffe


class HideCatchAll(griffe.Extension):
    """Drop a ``**removed`` parameter from every function's rendered signature."""

    def on_function_instance(self, *, func: griffe.Function, **kwargs: Any) -> None:
        kept = [
            p for p in func.parameters
            if not (p.kind is griffe.ParameterKind.var_keyword and p.name == "removed")
        ]  # fmt: skip
        func.parameters = griffe.Parameters(*kept)
