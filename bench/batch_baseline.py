"""The baseline that ``semisched batch`` is benchmarked against: fixed-rate throttling of a batch.

A faithful re-implementation of the OpenAI cookbook recipe
``examples/api_request_parallel_processor.py`` (openai/openai-cookbook, read at commits
``d2bb606c`` and ``04a30903``), driven through the ``openai.AsyncOpenAI`` client and a
`semisched.runtime.clock.Clock` so that it runs in compressed time against the mock provider.
It is a benchmark subject, not a scheduler to use: it knows nothing of output lengths, classes
or the provider's ``x-ratelimit-*`` headers.

What the recipe does, and this module with it:

1. Two buckets, requests and tokens, *start full* (capacity ``rpm`` and ``tpm``) and refill
   continuously at ``limit / 60`` per second, capped at the limit.
2. One request waits at the head (``next_request``); it is taken from the retry queue first,
   then from the input, in input order. It is sent when ``requests >= 1`` and
   ``tokens >= its consumption``; both buckets are then debited and one attempt is spent.
3. Token consumption (`token_consumption`) is the recipe's
   ``num_tokens_consumed_from_request``: chat, per message 4 plus the tokens of every value
   (minus 1 when a ``name`` is given), plus 2 per request; completions, the prompt's tokens.
   Either way plus ``n * max_tokens``, with 15 when ``max_tokens`` is absent (a list prompt
   counts the completion once per prompt).
4. Every failed attempt, of any kind, goes to the back of the retry queue while attempts are
   left (``max_attempts`` in total, 5 by default); then the request fails. The recipe retries
   every error the same way: 429, 5xx and connection errors, and also 4xx other than 429
   (its ``"error" in response`` test does not look at the status), so this module does too.
5. After each loop step the loop pauses until ``pause_after_rate_limit_s`` (15 s) have passed
   since the most recent rate-limit error. Requests in flight carry on; only sending stops.
6. There is no concurrency cap and no backoff beyond that pause.

Deviations, each for the sake of the benchmark rather than the recipe's behaviour:

- Time. The recipe's loop sleeps 1 ms (wall) per step. Here a step that just sent a request
  sleeps 1 ms of *virtual* time (the same bound, 1000 sends per virtual second); a step that
  cannot send sleeps until the moment it could (the head request's capacity deficit divided
  by the refill rate) or, with nothing to send, until an attempt ends. The recipe would reach
  the same decisions by polling each millisecond; these waits only save the CPU.
- A 429 is ``openai.RateLimitError`` (HTTP 429, whatever its code). The recipe matched the
  error message ("rate limit", older) or ``code == '429'`` (newer, which an OpenAI body never
  carries, so that version never pauses); we take the recipe's evident intent.
- Only ``openai.APIError`` (HTTP status, connection and timeout errors) counts as a failed
  attempt; the recipe caught every ``Exception``. Anything else is a bug and propagates.
- A request whose consumption exceeds ``tpm`` can never be sent; the recipe loops forever on
  it. Here it fails at once with error code ``token_limit_exceeded`` and no attempt spent.
  Likewise ``rpm < 1`` (a bucket that never holds one request) is refused with ``ValueError``.
- ``max_completion_tokens`` is read when ``max_tokens`` is absent (OpenAI's newer name for the
  same field, unknown to the recipe); otherwise the baseline would under-count and look worse.
- ``max_concurrency`` (default ``None``, the recipe's behaviour) optionally caps the attempts
  in flight, so both sides of a benchmark can be given the same cap.
- Results are OpenAI Batch API output lines keyed by ``custom_id`` instead of the recipe's
  ``[request, response]`` JSONL pairs.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

import anyio
import openai

from semisched.runtime.clock import Clock

__all__ = ["BaselineResult", "run_fixed_rate", "token_consumption"]

CHAT_URL: Final = "/v1/chat/completions"
COMPLETIONS_URL: Final = "/v1/completions"
_URLS: Final = (CHAT_URL, COMPLETIONS_URL)
#: The recipe's assumed completion length when a request gives no ``max_tokens``.
DEFAULT_MAX_TOKENS: Final = 15
#: Virtual seconds slept after a step that sent a request: the recipe's 1 ms loop sleep.
LOOP_SLEEP_S: Final = 0.001


@dataclass(frozen=True, kw_only=True)
class BaselineResult:
    """What one fixed-rate run produced.

    Attributes:
        makespan_s: Virtual seconds from the start to the last result.
        succeeded: Requests answered with a response.
        failed: Requests that gave up after ``max_attempts`` (or could never be sent).
        rate_limited: 429 responses received; every attempt counts.
        retries: Attempts beyond the first, summed over requests.
        latencies_s: Virtual seconds from send to response of each successful call.
        results: ``custom_id`` -> OpenAI Batch API output line (``id``, ``custom_id``,
            ``response`` with ``status_code``/``request_id``/``body``, ``error``). A failure
            with an HTTP status keeps the status and ``{"error": ...}`` body in ``response``
            and ``error=None``, as the Batch API's error file does; a failure without one
            (connection error, never sendable) has ``response=None`` and ``error`` set.
    """

    makespan_s: float
    succeeded: int
    failed: int
    rate_limited: int
    retries: int
    latencies_s: tuple[float, ...]
    results: dict[str, dict[str, Any]]


def token_consumption(url: str, body: Mapping[str, Any], count_tokens: Callable[[str], int]) -> int:
    """Tokens the recipe charges to its token bucket for one request.

    Args:
        url: ``/v1/chat/completions`` or ``/v1/completions``.
        body: The request body.
        count_tokens: Tokens of one string (the caller's tokenizer).

    Raises:
        ValueError: For another ``url``, or a prompt that is neither a string nor strings.
    """
    max_tokens = body.get("max_tokens")
    if max_tokens is None:
        max_tokens = body.get("max_completion_tokens", DEFAULT_MAX_TOKENS)
    completion_tokens = int(body.get("n") or 1) * int(max_tokens)
    if url == CHAT_URL:
        tokens = 0
        for message in body["messages"]:
            tokens += 4  # <im_start>{role/name}\n{content}<im_end>\n
            for key, value in message.items():
                if isinstance(value, str):
                    tokens += count_tokens(value)
                if key == "name":  # the role is then omitted
                    tokens -= 1
        return tokens + 2 + completion_tokens  # the reply is primed with <im_start>assistant
    if url == COMPLETIONS_URL:
        prompt = body["prompt"]
        if isinstance(prompt, str):
            return count_tokens(prompt) + completion_tokens
        if isinstance(prompt, list) and all(isinstance(p, str) for p in prompt):
            return sum(count_tokens(p) for p in prompt) + completion_tokens * len(prompt)
        raise ValueError(f"{prompt=} must be a string or a list of strings")
    raise ValueError(f"{url=} must be one of {_URLS}")


@dataclass(slots=True, kw_only=True)
class _Job:
    index: int
    custom_id: str
    url: str
    body: dict[str, Any]
    tokens: int
    attempts_left: int
    attempts: int = 0


class _FixedRateRun:
    """The recipe's main loop and its per-attempt task, sharing one set of counters."""

    def __init__(
        self,
        jobs: list[_Job],
        *,
        client: openai.AsyncOpenAI,
        rpm: float,
        tpm: float,
        clock: Clock,
        pause_after_rate_limit_s: float,
        max_concurrency: int | None,
    ) -> None:
        self._jobs = jobs
        self._client = client
        self._rpm = rpm
        self._tpm = tpm
        self._clock = clock
        self._pause_s = pause_after_rate_limit_s
        self._max_concurrency = max_concurrency
        self._retry_queue: deque[_Job] = deque()
        self._changed = anyio.Event()
        self._in_progress = 0  # read and not yet finished: the loop ends when this reaches 0
        self._in_flight = 0
        self._last_rate_limit = -math.inf
        self._start = 0.0
        self._last_result = 0.0
        self._succeeded = 0
        self._failed = 0
        self._rate_limited = 0
        self._latencies: list[float] = []
        self._results: dict[str, dict[str, Any]] = {}

    def __repr__(self) -> str:
        return (
            f"_FixedRateRun(in_progress={self._in_progress}, in_flight={self._in_flight}, "
            f"retry_queue={len(self._retry_queue)}, succeeded={self._succeeded}, "
            f"failed={self._failed}, rate_limited={self._rate_limited})"
        )

    async def run(self) -> BaselineResult:
        clock = self._clock
        self._start = self._last_result = clock.now()
        pending: Iterator[_Job] = iter(self._jobs)
        input_left = True
        head: _Job | None = None
        request_capacity, token_capacity = self._rpm, self._tpm
        last_update = self._start
        async with anyio.create_task_group() as tg:
            while True:
                if head is None:
                    if self._retry_queue:
                        head = self._retry_queue.popleft()
                    elif input_left:
                        head = next(pending, None)
                        if head is None:
                            input_left = False
                        else:
                            self._in_progress += 1
                if head is not None and head.tokens > self._tpm:
                    self._finish_unsendable(head)
                    head = None

                now = clock.now()
                elapsed = now - last_update
                request_capacity = min(request_capacity + self._rpm * elapsed / 60.0, self._rpm)
                token_capacity = min(token_capacity + self._tpm * elapsed / 60.0, self._tpm)
                last_update = now

                sent = False
                slot_free = self._max_concurrency is None or self._in_flight < self._max_concurrency
                if (
                    head is not None
                    and slot_free
                    and request_capacity >= 1
                    and token_capacity >= head.tokens
                ):
                    request_capacity -= 1
                    token_capacity -= head.tokens
                    head.attempts_left -= 1
                    head.attempts += 1
                    self._in_flight += 1
                    tg.start_soon(self._attempt, head)
                    head, sent = None, True

                if self._in_progress == 0:
                    break

                if sent or (head is None and (self._retry_queue or input_left)):
                    await clock.sleep(LOOP_SLEEP_S)
                elif head is not None and slot_free:
                    deficit_s = max(
                        (1.0 - request_capacity) * 60.0 / self._rpm,
                        (head.tokens - token_capacity) * 60.0 / self._tpm,
                    )
                    await clock.sleep(max(deficit_s, LOOP_SLEEP_S))
                else:  # nothing sendable until an attempt ends
                    self._changed = anyio.Event()
                    await self._changed.wait()

                since_rate_limit = clock.now() - self._last_rate_limit
                if since_rate_limit < self._pause_s:
                    await clock.sleep(self._pause_s - since_rate_limit)

        return BaselineResult(
            makespan_s=self._last_result - self._start,
            succeeded=self._succeeded,
            failed=self._failed,
            rate_limited=self._rate_limited,
            retries=sum(max(0, job.attempts - 1) for job in self._jobs),
            latencies_s=tuple(self._latencies),
            results=self._results,
        )

    async def _attempt(self, job: _Job) -> None:
        clock = self._clock
        sent_at = clock.now()
        try:
            if job.url == CHAT_URL:
                response: Any = await self._client.chat.completions.create(**job.body)
            else:
                response = await self._client.completions.create(**job.body)
        except openai.APIError as exc:
            if isinstance(exc, openai.RateLimitError):
                self._rate_limited += 1
                self._last_rate_limit = clock.now()
            if job.attempts_left > 0:
                self._retry_queue.append(job)
            else:
                self._finish(job, _failure_line(job, exc), succeeded=False)
        else:
            self._latencies.append(clock.now() - sent_at)
            line = _output_line(
                job,
                response={
                    "status_code": 200,
                    "request_id": getattr(response, "_request_id", None),
                    "body": response.model_dump(),
                },
                error=None,
            )
            self._finish(job, line, succeeded=True)
        finally:
            self._in_flight -= 1
            self._changed.set()

    def _finish_unsendable(self, job: _Job) -> None:
        error = {
            "code": "token_limit_exceeded",
            "message": f"request needs {job.tokens} tokens; the budget is {self._tpm:g} per minute",
        }
        self._finish(job, _output_line(job, response=None, error=error), succeeded=False)

    def _finish(self, job: _Job, line: dict[str, Any], *, succeeded: bool) -> None:
        self._results[job.custom_id] = line
        if succeeded:
            self._succeeded += 1
        else:
            self._failed += 1
        self._in_progress -= 1
        self._last_result = self._clock.now()


def _output_line(
    job: _Job, *, response: dict[str, Any] | None, error: dict[str, Any] | None
) -> dict[str, Any]:
    return {
        "id": f"batch_req_{job.index:06d}",
        "custom_id": job.custom_id,
        "response": response,
        "error": error,
    }


def _failure_line(job: _Job, exc: openai.APIError) -> dict[str, Any]:
    if isinstance(exc, openai.APIStatusError):
        body = exc.body if isinstance(exc.body, dict) else {"message": exc.message}
        response = {
            "status_code": exc.status_code,
            "request_id": exc.request_id,
            "body": {"error": body},
        }
        return _output_line(job, response=response, error=None)
    error = {"code": type(exc).__name__, "message": str(exc)}
    return _output_line(job, response=None, error=error)


def _jobs(
    lines: Sequence[Mapping[str, Any]], count_tokens: Callable[[str], int], max_attempts: int
) -> list[_Job]:
    jobs: list[_Job] = []
    seen: set[str] = set()
    for index, line in enumerate(lines):
        custom_id, url, body = line.get("custom_id"), line.get("url"), line.get("body")
        if not isinstance(custom_id, str) or custom_id in seen:
            raise ValueError(f"line {index}: {custom_id=} must be a string unique in the batch")
        if url not in _URLS:
            raise ValueError(f"line {index}: {url=} must be one of {_URLS}")
        if not isinstance(body, Mapping):
            raise ValueError(f"line {index}: body must be an object, got {type(body).__name__}")
        seen.add(custom_id)
        jobs.append(
            _Job(
                index=index,
                custom_id=custom_id,
                url=url,
                body=dict(body),
                tokens=token_consumption(url, body, count_tokens),
                attempts_left=max_attempts,
            )
        )
    return jobs


async def run_fixed_rate(
    lines: Sequence[Mapping[str, Any]],
    *,
    client: openai.AsyncOpenAI,
    rpm: float,
    tpm: float,
    clock: Clock,
    count_tokens: Callable[[str], int],
    max_attempts: int = 5,
    pause_after_rate_limit_s: float = 15.0,
    max_concurrency: int | None = None,
) -> BaselineResult:
    """Send a batch the way the cookbook recipe does, and report what happened.

    Args:
        lines: Parsed OpenAI Batch API input lines (``custom_id``, ``method``, ``url``,
            ``body``); ``url`` is ``/v1/chat/completions`` or ``/v1/completions``.
        client: The client to call through; give it ``max_retries=0`` so that the recipe's
            retries are the only ones.
        rpm: Request budget per (virtual) minute; the request bucket's size and refill.
        tpm: Token budget per (virtual) minute, in `token_consumption` units.
        clock: Every wait goes through it; budgets and the pause are in its seconds.
        count_tokens: Tokens of one string (the caller's tokenizer).
        max_attempts: Attempts per request in total, the first included (recipe: 5).
        pause_after_rate_limit_s: Sending stops until this long after the last 429 (recipe: 15).
        max_concurrency: Attempts in flight at most, or ``None`` for no cap (the recipe).

    Raises:
        ValueError: A bad argument or input line (named in the message); nothing is sent.
    """
    # Below 1 request per minute the request bucket never holds a whole request.
    if not (math.isfinite(rpm) and rpm >= 1):
        raise ValueError(f"{rpm=} must be a finite number >= 1")
    if not (math.isfinite(tpm) and tpm > 0):
        raise ValueError(f"{tpm=} must be a finite number > 0")
    if max_attempts < 1:
        raise ValueError(f"{max_attempts=} must be >= 1")
    if not (math.isfinite(pause_after_rate_limit_s) and pause_after_rate_limit_s >= 0):
        raise ValueError(f"{pause_after_rate_limit_s=} must be a finite number >= 0")
    if max_concurrency is not None and max_concurrency < 1:
        raise ValueError(f"{max_concurrency=} must be None or >= 1")
    jobs = _jobs(lines, count_tokens, max_attempts)
    run = _FixedRateRun(
        jobs,
        client=client,
        rpm=rpm,
        tpm=tpm,
        clock=clock,
        pause_after_rate_limit_s=pause_after_rate_limit_s,
        max_concurrency=max_concurrency,
    )
    return await run.run()
