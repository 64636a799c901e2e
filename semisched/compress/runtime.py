"""Compress-and-route in the async runtime: a borderline prompt, compressed once, sent short.

FleetOpt §5: with a short pool configured for ``B_short`` tokens and a long pool for the
full context, a request whose estimated total (prompt plus reserved output) lies in
``(B_short, γ B_short]`` can still be served by the short pool if its prompt is cut to
``B_short - reserved output`` tokens. `PromptCompression` is the runtime's half of
that: it prepares the compressed prompt at submit (with
`ExtractiveCompressor`) and marks the request with
``Request.compressed_tokens``, which the core's routing reads
(`TokenBudgetRouting`, the fleet's context check); at each
send `sends_compressed` says which prompt goes.

Rules:

1. Off unless ``RoutingConfig.compress_band`` (γ) is above 1: then nothing here runs,
   the compressor is not even imported, and every body is forwarded verbatim.
2. Only chat calls whose estimated total (`request_total`:
   the prompt estimate plus ``max_tokens``, else the prior's p90) is in
   ``(B_short, γ B_short]`` are compressed, once, at submit. The budget is
   ``B_short`` minus that reserved output.
3. One unit: tokens are the runtime's own estimate, ``ceil(bytes / ratio)`` of
   `TokenEstimator` for the call's model and content kind, at
   the ratio ``input_tokens`` was estimated with. The compressor counts UTF-8 bytes
   against the budget in bytes (``floor(budget * ratio)``, less the line breaks the
   estimate counts between texts), and the compressed prompt's tokens are that estimate
   of its bytes (`prompt_bytes`), so the original and the
   compressed estimate compare exactly.
4. A prompt that cannot be cut to the budget (mostly code, or system text) is left as it
   was (counted in ``not_fitting``): it goes to the long pool, uncompressed.
5. A prompt of `OFFLOAD_BYTES` or more is compressed in a worker thread (tens of
   milliseconds for tens of kilobytes); a smaller one (a few milliseconds) on the loop.
6. The core decides which prompt each attempt sends
   (`sends_compressed`): the compressed one only to an
   endpoint whose ``context_tokens`` cannot hold the original, so short endpoints must
   declare their context. A request spilled to the long pool goes whole. Each attempt
   decides anew (a retry failed over to the long pool goes whole) and is counted. The
   estimator learns from a compressed answer with the compressed prompt's bytes.
7. Prompt contents are never logged; only counts leave this module.

What it is not: no routing decision (the core's), no scoring of sentences (the
compressor's), no I/O.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields, replace
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

import anyio

from semisched.core.config import RoutingConfig
from semisched.core.fleet.endpoint import EndpointSpec
from semisched.core.fleet.routing import request_total, sends_compressed
from semisched.core.request import Request
from semisched.runtime.callargs import PreparedCall
from semisched.runtime.estimate import TokenEstimator, prompt_bytes

if TYPE_CHECKING:
    from semisched.compress.compressor import ExtractiveCompressor
    from semisched.runtime.pending import Pending

__all__ = ["OFFLOAD_BYTES", "CompressedPrompt", "CompressionStats", "PromptCompression"]

#: Prompts of at least this many UTF-8 bytes are compressed in a worker thread (rule 5):
#: ~5 ms of work here for 10 kB, 35 ms for 37 kB.
OFFLOAD_BYTES = 8192


@dataclass(frozen=True, slots=True)
class CompressedPrompt:
    """A request's compressed prompt, prepared at submit.

    Attributes:
        params: The provider arguments to send with it: the call's, with the
            compressed ``messages`` (read-only).
        nbytes: UTF-8 bytes of its text (what the estimator learns from, rule 6).
        tokens: Its estimated prompt tokens (``Request.compressed_tokens``).
        removed: Estimated prompt tokens it leaves out.
    """

    params: Mapping[str, Any]
    nbytes: int
    tokens: int
    removed: int


@dataclass(frozen=True, slots=True, kw_only=True)
class CompressionStats:
    """What compress-and-route did (`Scheduler.statistics().compression`).

    Attributes:
        prepared: Requests in the band whose prompt was compressed to fit ``B_short``.
        not_fitting: Requests in the band whose prompt could not be cut enough (rule 4).
        sent_compressed: Attempts sent with the compressed prompt.
        spilled: Attempts of prepared requests sent with the original prompt (to an
            endpoint that holds it: the long pool, when the short one was full or down).
        tokens_removed: Estimated prompt tokens the compressed attempts left out.
    """

    prepared: int = 0
    not_fitting: int = 0
    sent_compressed: int = 0
    spilled: int = 0
    tokens_removed: int = 0


class PromptCompression:
    """The runtime's compress-and-route (module docstring).

    Args:
        routing: The scheduler's routing config (``compress_band``, ``short_pool_tokens``).
        estimator: The scheduler's prompt-token estimator (rule 3).
        compressor: The compressor; default ``ExtractiveCompressor()`` (its counter is
            replaced by a byte count, rule 3).
        offload_bytes: Rule 5's threshold (``None``: `OFFLOAD_BYTES`).
    """

    def __init__(
        self,
        routing: RoutingConfig,
        estimator: TokenEstimator,
        compressor: ExtractiveCompressor | None = None,
        *,
        offload_bytes: int | None = None,
    ) -> None:
        self.routing = routing
        self.estimator = estimator
        self.offload_bytes = offload_bytes
        self._compressor: ExtractiveCompressor | None = None
        if routing.compress_band > 1.0:
            from semisched.compress.compressor import ExtractiveCompressor

            keep = compressor or ExtractiveCompressor()
            self._compressor = ExtractiveCompressor(
                _utf8_bytes, keep_first=keep.keep_first, keep_last=keep.keep_last
            )
        self._counts = dict.fromkeys((f.name for f in fields(CompressionStats)), 0)

    def __repr__(self) -> str:
        if self._compressor is None:
            return "<PromptCompression off>"
        counts = " ".join(f"{k}={v}" for k, v in self._counts.items())
        return f"<PromptCompression γ={self.routing.compress_band:g} {counts}>"

    @property
    def enabled(self) -> bool:
        """Whether compress-and-route is on (rule 1)."""
        return self._compressor is not None

    async def prepare(
        self, request: Request, call: PreparedCall
    ) -> tuple[Request, CompressedPrompt | None]:
        """``request`` with ``compressed_tokens`` set and its compressed prompt, when it is
        in the band and its prompt fits (rules 2-5); else ``request`` and ``None``."""
        cfg = self.routing
        if self._compressor is None or call.spec.prompt_field != "messages":  # rewrites messages
            return request, None
        total = request_total(request)
        if not cfg.short_pool_tokens < total <= cfg.compress_band * cfg.short_pool_tokens:
            return request, None
        budget = math.floor(cfg.short_pool_tokens - (total - request.input_tokens))
        # The ratio ``input_tokens`` was just estimated with, read on the loop (rule 3).
        ratio = self.estimator.ratio(call.model, call.prompt_kind)
        offload = OFFLOAD_BYTES if self.offload_bytes is None else self.offload_bytes
        if call.prompt_nbytes >= offload:
            prompt = await anyio.to_thread.run_sync(self._compress, call, budget, ratio)
        else:
            prompt = self._compress(call, budget, ratio)
        if prompt is None or prompt.tokens > min(budget, request.input_tokens):
            self._counts["not_fitting"] += 1
            return request, None
        self._counts["prepared"] += 1
        prompt = replace(prompt, removed=round(request.input_tokens) - prompt.tokens)
        return replace(request, compressed_tokens=float(prompt.tokens)), prompt

    def on_send(self, pending: Pending, endpoint: EndpointSpec) -> None:
        """Choose the prompt of ``pending``'s attempt to ``endpoint`` (rule 6) and count it."""
        compressed = pending.compressed
        if compressed is None:
            return
        pending.sent_compressed = sends_compressed(pending.request, endpoint)
        if pending.sent_compressed:
            self._counts["sent_compressed"] += 1
            self._counts["tokens_removed"] += compressed.removed
        else:
            self._counts["spilled"] += 1

    def statistics(self) -> CompressionStats | None:
        """The counts, frozen; ``None`` when compress-and-route is off."""
        return None if self._compressor is None else CompressionStats(**self._counts)

    def _compress(
        self, call: PreparedCall, budget_tokens: int, ratio: float
    ) -> CompressedPrompt | None:
        """Cut the call's messages to ``budget_tokens`` estimated tokens at ``ratio`` bytes a
        token (rule 3), or ``None`` when they cannot be cut so far. Runs in a worker thread
        for a large prompt: it reads nothing that the loop changes."""
        assert self._compressor is not None
        messages: Sequence[Mapping[str, Any]] = call.params["messages"]
        limit = math.floor(budget_tokens * ratio)  # the most bytes whose estimate fits
        # What the estimate counts beyond the compressible texts (line breaks between
        # texts, non-text content): a guess first, exact once the compressor has counted.
        overhead = max(0, len(messages) - 1)
        try:
            for _ in range(2):
                if limit - overhead < 1:
                    return None
                result = self._compressor.compress(messages, limit - overhead)
                exact = call.prompt_nbytes - result.original_tokens
                if exact == overhead:
                    break
                overhead = exact
        except (TypeError, ValueError):  # content the compressor cannot read: leave it whole
            return None
        if not result.fits:
            return None
        nbytes = prompt_bytes(messages=result.messages)[0]
        tokens = max(1, math.ceil(nbytes / ratio))  # TokenEstimator.estimate at ``ratio``
        params = MappingProxyType({**call.params, "messages": result.messages})
        return CompressedPrompt(params, nbytes, tokens, removed=0)


def _utf8_bytes(text: str) -> int:
    """The compressor's count (rule 3): UTF-8 bytes."""
    return len(text.encode("utf-8"))
