"""An upstream that answers at once: the baseline of ``python -m bench gateway``'s overhead.

``python -m bench.gateway_upstream --port P`` serves ``POST /v1/chat/completions`` with a
fixed chat completion (usage included) and ``GET /v1/models``, in a raw ASGI app on uvicorn:
no physics, no parsing beyond draining the body, so what a request costs through the
gateway minus what it costs here is the gateway's own overhead.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

ANSWER = json.dumps({
    "id": "chatcmpl-instant", "object": "chat.completion", "created": 0, "model": "mock-1",
    "choices": [{"index": 0, "finish_reason": "stop",
                 "message": {"role": "assistant", "content": "ok"}}],
    "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
}).encode()  # fmt: skip
MODELS = json.dumps({"object": "list", "data": [{"id": "mock-1", "object": "model"}]}).encode()


async def read_body(receive: Any) -> bytes:
    """An ASGI request's whole body (the bench's fake upstreams share it)."""
    body = bytearray()
    more = True
    while more:
        message = await receive()
        body += message.get("body", b"")
        more = message.get("more_body", False)
    return bytes(body)


async def send_body(
    send: Any,
    status: int,
    body: bytes,
    extra: list[tuple[bytes, bytes]] | None = None,
    *,
    content_type: bytes = b"application/json",
) -> None:
    """An ASGI answer: ``status`` and ``body`` with its type and length, and ``extra`` headers."""
    headers = [(b"content-type", content_type), (b"content-length", str(len(body)).encode()),
               *(extra or [])]  # fmt: skip
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] != "http":
        return
    await read_body(receive)
    await send_body(send, 200, MODELS if scope["method"] == "GET" else ANSWER)


def main() -> None:
    import uvicorn

    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args()
    uvicorn.run(app, host="127.0.0.1", port=args.port, log_level="warning", access_log=False)


if __name__ == "__main__":
    main()
