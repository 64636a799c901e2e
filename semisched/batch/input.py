"""Reading and validating an OpenAI Batch API input file (the ``semisched batch`` input).

Every line must be a Batch API input object: a non-empty, unique
``custom_id``, ``method: POST``, a supported ``url`` and a ``body`` that the
SDK would accept for that endpoint. `read_input` checks all of them
before anything is sent and returns where each valid line is (offset and
size, not its body); `load_body` reads a body again when its line is
sent, so a job of 100,000 prompts holds a few numbers per line in memory.
Problems carry their line number (`InvalidLine`). A body's
``metadata.tenant`` names the line's tenant (`semisched.batch.tenants`):
it is checked against the job's tenants here and never reaches the provider;
``metadata.deadline_s`` says when its answer is due (`semisched.batch.deadlines`),
and never reaches the provider either.

This module is not the output (`semisched.batch.output`) and sends
nothing (`semisched.batch.run`). It holds `BatchError`, the one
exception a batch job raises when it cannot start.
"""

from __future__ import annotations

import functools
import json
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any, BinaryIO

from semisched.batch.deadlines import read_deadline, take_deadline
from semisched.batch.tenants import line_tenant_problem, take_tenant
from semisched.core.errors import SemischedError
from semisched.core.tenants.config import TenantConfig
from semisched.runtime.apis import APIS
from semisched.runtime.callargs import SCHEDULER_ARGS
from semisched.runtime.calls import accepted_params, prepare_call

__all__ = [
    "SUPPORTED_URLS",
    "BatchError",
    "BatchLine",
    "InvalidInput",
    "InvalidLine",
    "load_body",
    "open_input",
    "read_input",
]

#: Batch ``url`` -> the scheduled API it calls (every API of
#: `APIS`, at its path).
SUPPORTED_URLS: Mapping[str, str] = MappingProxyType(
    {spec.path: name for name, spec in APIS.items()}
)


class BatchError(SemischedError):
    """A batch job cannot start (unreadable input, unwritable output, no API key)."""


@dataclass(frozen=True, slots=True)
class BatchLine:
    """One valid input line: where it is, not its body.

    Attributes:
        line: Line number in the input file (from 1).
        custom_id: The line's ``custom_id``.
        url: The line's ``url`` (a key of `SUPPORTED_URLS`).
        offset: Byte offset of the line in the file.
        size: Length of the line in bytes, newline included.
        deadline_s: Its ``metadata.deadline_s``: seconds from the job's start
            (``None``: none).
    """

    line: int
    custom_id: str
    url: str
    offset: int
    size: int
    deadline_s: float | None = None


@dataclass(frozen=True, slots=True)
class InvalidLine:
    """One input line that cannot be sent, and why.

    Attributes:
        line: Line number in the input file (from 1).
        custom_id: The line's ``custom_id`` when it has a usable one (``None`` for a
            duplicate: that id belongs to its first line, whose record is the id's one).
        message: What is wrong with it.
    """

    line: int
    custom_id: str | None
    message: str

    def __str__(self) -> str:
        return f"line {self.line}: {self.message}"


class InvalidInput(BatchError):
    """The input has invalid lines (listed in ``problems``); nothing was sent."""

    def __init__(self, problems: Sequence[InvalidLine]) -> None:
        self.problems = list(problems)
        shown = "\n".join(f"  {p}" for p in self.problems[:20])
        more = len(self.problems) - 20
        tail = f"\n  ... and {more} more" if more > 0 else ""
        super().__init__(
            f"{len(self.problems)} invalid line(s) in the input; nothing was sent "
            f"(--skip-invalid records them as errors and sends the rest):\n{shown}{tail}"
        )


def check_body(endpoint: str, body: Mapping[str, Any]) -> None:
    """Validate ``body`` for ``endpoint`` exactly as the scheduler's ``submit`` would.

    The check is `semisched.runtime.calls.prepare_call` (pure: no scheduler, no
    client, no event loop) against the argument names of the ``openai``
    package's own ``create`` methods. The scheduler's own arguments
    (``klass``, ``deadline``, ``prior``, ``tenant``) are not API parameters and
    are refused (a line's tenant goes in ``metadata.tenant``).

    Raises:
        TypeError, ValueError: The body is not a valid request for ``endpoint``.
    """
    params = dict(body)
    own = sorted(SCHEDULER_ARGS & params.keys())
    if own:
        hint = " (a line's tenant goes in metadata.tenant)" if "tenant" in own else ""
        if "deadline" in own:
            hint += " (a line's deadline goes in metadata.deadline_s)"
        raise TypeError(f"{own} are scheduler arguments, not API parameters{hint}")
    spec = APIS[endpoint]
    if spec.prompt_field not in params:
        raise ValueError(f"this url needs {spec.prompt_field!r} in the body")
    prompt = {spec.prompt_field: params.pop(spec.prompt_field)}
    for other in ("messages", "prompt", "input"):  # the other APIs' prompt fields: refused
        if other in params:
            raise ValueError(f"this url takes {spec.prompt_field!r}, not {other!r}")
    prepare_call(model=params.pop("model", None), api=endpoint, params=params,
                 allowed_params=_openai_params(), **prompt)  # fmt: skip


@functools.cache
def _openai_params() -> Mapping[str, frozenset[str] | None]:
    """Argument names of ``openai``'s ``create`` per scheduled API (read off an unused
    client; an API the installed ``openai`` lacks is left out)."""
    import openai

    signatures = openai.AsyncOpenAI(api_key="signatures-only", base_url="http://127.0.0.1:9")
    targets = {name: spec.target(signatures) for name, spec in APIS.items()}
    return {name: accepted_params(t) for name, t in targets.items() if t is not None}


def _check_envelope(number: int, obj: Any, first_seen: dict[str, int]) -> InvalidLine | None:
    """The Batch API fields around the body: ``custom_id``, ``method``, ``url``."""
    if not isinstance(obj, dict):
        return InvalidLine(number, None, "must be a JSON object")
    custom_id = obj.get("custom_id")
    if not isinstance(custom_id, str) or not custom_id:
        return InvalidLine(number, None, "'custom_id' must be a non-empty string")
    if custom_id in first_seen:  # the id is the first line's: its record must stay the only one
        return InvalidLine(
            number,
            None,
            f"duplicate custom_id {custom_id!r} (first on line {first_seen[custom_id]})",
        )
    first_seen[custom_id] = number
    method = obj.get("method", "POST")
    if method != "POST":
        return InvalidLine(number, custom_id, f"'method' must be 'POST', got {method!r}")
    url = obj.get("url")
    if not isinstance(url, str) or url not in SUPPORTED_URLS:
        return InvalidLine(
            number,
            custom_id,
            f"'url' {url!r} is not supported (supported: {', '.join(SUPPORTED_URLS)})",
        )
    return None


#: Whether some endpoint serves a model, and what the fleet serves (for the message).
ModelCheck = tuple[Callable[[str], bool], str]


def _check_line_body(
    number: int,
    custom_id: str,
    url: str,
    body: Any,
    default_model: str | None,
    models: ModelCheck | None,
    tenants: TenantConfig | None,
) -> InvalidLine | None:
    """The ``body``: a JSON object the SDK accepts for the line's endpoint, naming
    a declared tenant (or none when a default applies)."""
    if not isinstance(body, dict):
        return InvalidLine(number, custom_id, "'body' must be a JSON object")
    body = dict(body)
    try:
        tenant = take_tenant(body)  # validated without it: the provider never sees it
        take_deadline(body)  # the same
    except ValueError as exc:
        return InvalidLine(number, custom_id, str(exc))
    if default_model is not None:
        body.setdefault("model", default_model)
    if not isinstance(body.get("model"), str) or not body["model"]:
        return InvalidLine(number, custom_id, "'body.model' is missing (or pass --model)")
    if body.get("stream"):
        return InvalidLine(number, custom_id, "'body.stream' is not supported in batch files")
    try:
        check_body(SUPPORTED_URLS[url], body)
    except (TypeError, ValueError) as exc:
        return InvalidLine(number, custom_id, f"'body' is not a valid request: {exc}")
    if models is not None and not models[0](body["model"]):
        model = body["model"]
        return InvalidLine(
            number, custom_id, f"'body.model' {model!r} is served by no endpoint ({models[1]})"
        )
    problem = line_tenant_problem(tenant, tenants)
    return None if problem is None else InvalidLine(number, custom_id, problem)


def _check_line(
    number: int,
    offset: int,
    text: bytes,
    first_seen: dict[str, int],
    default_model: str | None,
    models: ModelCheck | None,
    tenants: TenantConfig | None,
) -> BatchLine | InvalidLine:
    try:
        obj = json.loads(text)
    except ValueError as exc:
        return InvalidLine(number, None, f"not valid JSON ({exc})")
    problem = _check_envelope(number, obj, first_seen)
    if problem is None:
        problem = _check_line_body(
            number, obj["custom_id"], obj["url"], obj.get("body"), default_model, models, tenants
        )
    if problem is not None:
        return problem
    deadline = read_deadline(obj["body"])
    return BatchLine(number, obj["custom_id"], obj["url"], offset, len(text), deadline)


def read_input(
    path: str | os.PathLike[str],
    *,
    default_model: str | None = None,
    models: ModelCheck | None = None,
    tenants: TenantConfig | None = None,
) -> tuple[list[BatchLine], list[InvalidLine]]:
    """Parse and validate a Batch API input file (blank lines are ignored).

    A line that is not UTF-8 is an invalid line like any other.

    Args:
        path: The input file.
        default_model: The ``model`` of bodies that name none (``--model``).
        models: Whether a fleet serves a model, and a description of what it
            serves: a line whose model no endpoint serves is invalid.
        tenants: The job's tenants (``--tenant``; ``None``: none declared). A
            line naming another tenant in ``metadata.tenant``, or none when
            no default applies, is invalid (`semisched.batch.tenants`).

    Returns:
        The valid lines and the invalid ones, each in file order.

    Raises:
        BatchError: The file cannot be read.
    """
    lines: list[BatchLine] = []
    invalid: list[InvalidLine] = []
    first_seen: dict[str, int] = {}
    try:
        with open(path, "rb") as handle:
            offset = 0
            for number, text in enumerate(handle, start=1):
                start, offset = offset, offset + len(text)
                if not text.strip():
                    continue
                checked = _check_line(
                    number, start, text, first_seen, default_model, models, tenants
                )
                if isinstance(checked, BatchLine):
                    lines.append(checked)
                else:
                    invalid.append(checked)
    except OSError as exc:
        raise BatchError(f"cannot read input {os.fspath(path)!r}: {exc.strerror or exc}") from None
    return lines, invalid


def open_input(path: Path) -> BinaryIO:
    """The input, unbuffered, for `load_body`: each body is read from the file as it
    is now, so a line changed since validation is seen (a buffer could serve the old bytes).

    Raises:
        BatchError: It cannot be opened.
    """
    try:
        return open(path, "rb", buffering=0)
    except OSError as exc:
        raise BatchError(f"cannot read input {os.fspath(path)!r}: {exc}") from None


def load_body(handle: BinaryIO, line: BatchLine, default_model: str | None) -> dict[str, Any]:
    """Read ``line``'s body again from the open (binary) input file.

    Returns:
        The keyword arguments of ``Scheduler.submit``: the body, with its
        ``metadata.tenant`` moved out of ``metadata`` to ``tenant``, its
        ``metadata.deadline_s`` removed, and ``api`` the API its ``url`` names.

    Raises:
        BatchError: The input changed since it was validated.
    """
    handle.seek(line.offset)
    raw = handle.read(line.size)
    try:
        obj = json.loads(raw)
        body = dict(obj["body"])
        tenant = take_tenant(body)
        take_deadline(body)
        if obj["custom_id"] != line.custom_id:
            raise ValueError
    except (ValueError, KeyError, TypeError):
        raise BatchError(
            f"input line {line.line} changed since it was validated; start the run again"
        ) from None
    if default_model is not None:
        body.setdefault("model", default_model)
    if tenant is not None:
        body["tenant"] = tenant
    body["api"] = SUPPORTED_URLS[line.url]  # the API its url names
    return body
