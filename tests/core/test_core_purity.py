"""The core is sans-I/O: importing it loads no event loop, clock, socket or HTTP client."""

from __future__ import annotations

import json
import subprocess
import sys

FORBIDDEN = ("asyncio", "time", "httpx", "httpx2", "openai", "socket")

# ``time`` is already loaded by the interpreter's own bootstrap (zipimport), so the
# probe first forgets every forbidden module, then imports the core, then reports
# which forbidden modules came back. The last step imports asyncio on purpose so
# the probe proves it can see a forbidden import when one happens.
PROBE = f"""
import json, sys
forbidden = {FORBIDDEN!r}
for name in forbidden:
    sys.modules.pop(name, None)
import semisched.core
after_core = sorted(m for m in forbidden if m in sys.modules)
import asyncio
after_asyncio = sorted(m for m in forbidden if m in sys.modules)
print(json.dumps({{"core": after_core, "control": after_asyncio}}))
"""


def test_importing_the_core_loads_no_io_clock_or_http_module() -> None:
    out = subprocess.run(
        [sys.executable, "-c", PROBE], capture_output=True, text=True, check=True, timeout=60
    )
    result = json.loads(out.stdout)
    assert result["core"] == []
    # The control import shows the probe would have noticed a forbidden module.
    assert "asyncio" in result["control"]
