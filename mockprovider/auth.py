"""The mock's API-key check: ``Authorization: Bearer <key>``, or OpenAI's 401 bodies.

What it is: the one check every route of an app runs first when ``MockConfig.api_key`` is
set (the four ``POST`` APIs, ``/v1/models``, ``/v1/mock/stats``, the Files and Batch APIs).
A missing header and a wrong key get OpenAI's two 401 bodies; each refusal is counted
(``unauthorized``) through the callback the app gives. Without a key every request passes.
"""

from __future__ import annotations

import hmac
from collections.abc import Callable, Mapping

from starlette.responses import JSONResponse

from mockprovider.errors import error_body

__all__ = ["BearerAuth"]


class BearerAuth:
    """The API-key check of one app (see the module docstring).

    Args:
        api_key: The key requests must carry, or ``None`` for none.
        refused: Called once per refused request (the app counts ``unauthorized``).
    """

    __slots__ = ("_key", "_refused")

    def __init__(self, api_key: str | None, refused: Callable[[], None]) -> None:
        self._key = None if api_key is None else api_key.encode()
        self._refused = refused

    def __repr__(self) -> str:
        return f"<BearerAuth {'on' if self._key is not None else 'off'}>"

    def check(self, headers: Mapping[str, str]) -> JSONResponse | None:
        """``None`` when the request may pass, else the 401 to answer."""
        if self._key is None:
            return None
        header = headers.get("authorization", "").strip()
        scheme, _, token = header.partition(" ")
        if not header:
            self._refused()
            message = (
                "You didn't provide an API key. Provide it in an Authorization header "
                "(Authorization: Bearer YOUR_KEY)."
            )
            return JSONResponse(error_body(message, "invalid_request_error", None, None), 401)
        if scheme.lower() != "bearer" or not hmac.compare_digest(token.strip().encode(), self._key):
            self._refused()
            body = error_body(
                "Incorrect API key provided.", "invalid_request_error", None, "invalid_api_key"
            )
            return JSONResponse(body, 401)
        return None
