"""The I/O seam: calling the wrapped OpenAI-compatible client (httpx's transport idea).

Everything the runtime sends goes through `Provider.create`, one call
per attempt. The wrapped client's own retries are turned off
(``with_options(max_retries=0)`` on an ``openai`` client): the scheduler owns
retries, so the core sees every attempt. The response headers are read when
the client offers ``with_raw_response`` (rate-limit signals ride on them).

What this module is not: it neither classifies failures (that is
`semisched.runtime.failures`) nor retries, waits or validates arguments.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from semisched.runtime.apis import APIS
from semisched.runtime.apis import ApiUsage as Usage
from semisched.runtime.callargs import Api
from semisched.runtime.calls import accepted_params

__all__ = ["Provider", "Usage", "usage_of"]


class Provider:
    """The wrapped client's resource of each scheduled API it has
    (`APIS`: ``chat.completions``, ``completions``,
    ``responses``, ``embeddings``).

    Attributes:
        allowed_params: Per available endpoint, the argument names its
            ``create`` accepts (``None``: any); the shape
            `semisched.runtime.calls.prepare_call` takes.
    """

    def __init__(self, client: Any) -> None:
        with_options = getattr(client, "with_options", None)
        self.client = with_options(max_retries=0) if callable(with_options) else client
        targets = {name: spec.target(self.client) for name, spec in APIS.items()}
        self._targets = {name: t for name, t in targets.items() if t is not None}
        self.allowed_params: Mapping[str, frozenset[str] | None] = {
            name: accepted_params(t) for name, t in self._targets.items()
        }

    def __repr__(self) -> str:
        return f"<Provider {type(self.client).__name__} endpoints={sorted(self._targets)}>"

    async def create(self, api: Api, params: Mapping[str, Any]) -> tuple[Any, Mapping[str, str]]:
        """One attempt: the parsed response and its headers (empty when unknown).

        Raises:
            Exception: Whatever the wrapped client raises (classified by the caller).
        """
        target = self._targets[api]
        raw_api = getattr(target, "with_raw_response", None)
        if raw_api is None:
            return await target.create(**params), {}
        raw = await raw_api.create(**params)
        return raw.parse(), raw.headers


def usage_of(response: Any, api: Api = "chat") -> Usage:
    """The ``usage`` an answer of ``api`` reports (`ApiSpec.usage`)."""
    return APIS[api].usage(response)
