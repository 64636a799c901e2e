"""The I/O seam: calling the wrapped OpenAI-compatible client (httpx's transport idea).

Everything the runtime sends goes through :meth:`Provider.create`, one call
per attempt. The wrapped client's own retries are turned off
(``with_options(max_retries=0)`` on an ``openai`` client): the scheduler owns
retries, so the core sees every attempt. The response headers are read when
the client offers ``with_raw_response`` (rate-limit signals ride on them).

What this module is not: it neither classifies failures (that is
:mod:`semisched.runtime.failures`) nor retries, waits or validates arguments.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from semisched.runtime.calls import Api, accepted_params

__all__ = ["Provider", "Usage", "usage_of"]


class Provider:
    """The wrapped client's ``chat.completions`` and ``completions`` endpoints.

    Attributes:
        allowed_params: Per available endpoint, the argument names its
            ``create`` accepts (``None``: any); the shape
            :func:`semisched.runtime.calls.prepare_call` takes.
    """

    def __init__(self, client: Any) -> None:
        with_options = getattr(client, "with_options", None)
        self.client = with_options(max_retries=0) if callable(with_options) else client
        targets = {
            "chat": self.client.chat.completions,
            "completions": getattr(self.client, "completions", None),
        }
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


@dataclass(frozen=True, slots=True)
class Usage:
    """The ``usage`` block of a response, as plain ints.

    Attributes:
        known: The response carried a ``usage`` block (else the counts are 0).
        prompt_tokens: ``usage.prompt_tokens``.
        output_tokens: ``usage.completion_tokens``.
    """

    known: bool
    prompt_tokens: int
    output_tokens: int


def usage_of(response: Any) -> Usage:
    """Read ``response.usage`` (``prompt_tokens``, ``completion_tokens``) if it has one."""
    usage = getattr(response, "usage", None)
    return Usage(
        usage is not None,
        int(getattr(usage, "prompt_tokens", 0) or 0),
        int(getattr(usage, "completion_tokens", 0) or 0),
    )
