"""The upstream of ``python -m bench gateway-priority``: a few slots, a fixed service time.

``python -m bench.gateway_priority_upstream --port P --service-ms 200 --slots 4`` serves
``POST /v1/chat/completions`` (and ``/v1/completions``) in a raw ASGI app on uvicorn, as
`bench.gateway_upstream` does, with what that one lacks for a priority test: at most
``--slots`` requests in service at once, the rest waiting first come first served (an
`asyncio.Semaphore`, whose waiters queue in order), each held ``--service-ms`` (0:
answered at once), so a request's cost has the fixed part a real provider's has (a slot,
the round trip) whatever its length. The answer has ``min(max_tokens, --cap)`` completion
tokens, ``finish_reason`` ``length`` when ``max_tokens`` cut it and ``stop`` otherwise, and
real ``usage`` (prompt tokens: the messages' words). ``GET /v1/models`` lists ``mock-1``;
``GET /stats`` gives what it received and the most requests it held in service at once.

What this module is not: no physics (the service time does not grow with the tokens or the
batch; that is `mockprovider`'s), no faults (`bench.gateway_faults_upstream`).
"""

from __future__ import annotations

import argparse
import asyncio
import json
from dataclasses import dataclass, field
from typing import Any

from bench.gateway_upstream import MODELS, read_body, send_body

__all__ = ["SlotUpstream", "answer", "main"]


def answer(body: dict[str, Any], cap: int) -> dict[str, Any]:
    """The chat completion for a parsed request ``body`` (module docstring)."""
    asked = body.get("max_tokens") or body.get("max_completion_tokens")
    tokens = cap if not isinstance(asked, int) or asked < 1 else min(asked, cap)
    cut = isinstance(asked, int) and asked < cap  # the natural answer is `cap` long
    messages = body.get("messages") or [{"content": body.get("prompt", "")}]
    prompt = sum(len(str(m.get("content", "")).split()) for m in messages if isinstance(m, dict))
    return {"id": "chatcmpl-slots", "object": "chat.completion", "created": 0,
            "model": body.get("model", "mock-1"),
            "choices": [{"index": 0, "finish_reason": "length" if cut else "stop",
                         "message": {"role": "assistant", "content": " ".join(["ok"] * tokens)}}],
            "usage": {"prompt_tokens": prompt, "completion_tokens": tokens,
                      "total_tokens": prompt + tokens}}  # fmt: skip


@dataclass(kw_only=True)
class SlotUpstream:
    """The ASGI app (module docstring); counters are plain ints."""

    slots: int = 4
    service_s: float = 0.2
    cap: int = 40
    received: int = 0
    in_service: int = 0
    peak: int = 0
    _slots: asyncio.Semaphore | None = field(default=None, repr=False)

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        raw = await read_body(receive)
        if scope["method"] == "GET":
            stats = {"received": self.received, "in_service": self.in_service, "peak": self.peak}
            await send_body(send, 200, MODELS if scope["path"].endswith("/models")
                        else json.dumps(stats).encode())  # fmt: skip
            return
        self.received += 1
        if self._slots is None:
            self._slots = asyncio.Semaphore(self.slots)
        async with self._slots:
            self.in_service += 1
            self.peak = max(self.peak, self.in_service)
            try:
                if self.service_s > 0:
                    await asyncio.sleep(self.service_s)
            finally:
                self.in_service -= 1
        try:
            body = json.loads(raw or b"{}")
        except ValueError:
            await send_body(send, 400, b'{"error": {"message": "not JSON", "type": '
                        b'"invalid_request_error", "param": null, "code": null}}')  # fmt: skip
            return
        await send_body(send, 200, json.dumps(answer(body, self.cap)).encode())


def main() -> None:
    import uvicorn

    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--service-ms", type=float, default=200.0)
    parser.add_argument("--slots", type=int, default=4)
    parser.add_argument("--cap", type=int, default=40, help="completion tokens at most (40)")
    args = parser.parse_args()
    app = SlotUpstream(slots=args.slots, service_s=args.service_ms / 1000, cap=args.cap)
    uvicorn.run(app, host="127.0.0.1", port=args.port, log_level="warning", access_log=False)


if __name__ == "__main__":
    main()
