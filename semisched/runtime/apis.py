"""The scheduled APIs: one entry each, the only place that knows an API by its name.

Every OpenAI API that spends a key's tokens and that semisched schedules is one
`ApiSpec` in `APIS`: chat completions, completions, the Responses
API and embeddings. An entry says

- where it lives: its HTTP ``path`` (the gateway's route, a batch line's
  ``url``) and the ``resource`` on an ``openai`` client whose ``create`` it calls;
- how its request is read: the field that carries its prompt, the fields that
  cap its output (the first one given wins), and whether it generates at all;
- how usage comes back: on an answer (`ApiSpec.usage`) and on a stream's
  chunks or events (`ApiSpec.read_chunk`), with the stream's first content
  (the time to first token);
- whether it streams, and whether semisched must ask a stream for its usage
  (``stream_options.include_usage``: chat and completions; the Responses API
  always ends its stream with the usage).

Failures are classified the same way for every API (`semisched.runtime.failures`:
an HTTP status and an exception type, not an API). Adding an API is adding an
entry here; nothing else branches on its name.

What this module is not: it calls nothing and validates no argument (that is
`semisched.runtime.calls`); it only describes.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from semisched.runtime.estimate import prompt_bytes

__all__ = ["APIS", "ApiSpec", "ApiUsage", "ChunkRead", "api_for_path", "prompt_token_ids"]


@dataclass(frozen=True, slots=True)
class ApiUsage:
    """The ``usage`` block of an answer, as plain ints (0 when not reported).

    Attributes:
        known: The answer carried a ``usage`` block.
        prompt_tokens: Prompt (input) tokens.
        output_tokens: Generated tokens, reasoning tokens included.
        cached_tokens: Prompt tokens the provider served from its cache.
        reasoning_tokens: Output tokens spent on reasoning (not shown).
    """

    known: bool
    prompt_tokens: int
    output_tokens: int
    cached_tokens: int = 0
    reasoning_tokens: int = 0


#: What a stream's chunk says: its usage block (``None``: none) and whether it
#: carries content (the first one is the time to first token).
ChunkRead = tuple[Any, bool]


def _int(value: object) -> int:
    return int(value) if isinstance(value, int | float) and not isinstance(value, bool) else 0


def _get(obj: Any, name: str) -> Any:
    """``obj.name``, or ``obj[name]`` for a mapping (a raw JSON answer)."""
    if isinstance(obj, Mapping):
        return obj.get(name)
    return getattr(obj, name, None)


def _usage(usage: Any, prompt: str, output: str) -> ApiUsage:
    if usage is None:
        return ApiUsage(False, 0, 0)
    prompt_details = _get(usage, f"{prompt}_details")
    output_details = _get(usage, f"{output}_details")
    return ApiUsage(
        True,
        _int(_get(usage, prompt)),
        _int(_get(usage, output)),
        _int(_get(prompt_details, "cached_tokens")) if prompt_details is not None else 0,
        _int(_get(output_details, "reasoning_tokens")) if output_details is not None else 0,
    )


def _completion_usage(usage: Any) -> ApiUsage:
    return _usage(usage, "prompt_tokens", "completion_tokens")


def _responses_usage(usage: Any) -> ApiUsage:
    return _usage(usage, "input_tokens", "output_tokens")


def _embedding_usage(usage: Any) -> ApiUsage:
    return ApiUsage(usage is not None, _int(_get(usage, "prompt_tokens")), 0)


def _completion_chunk(chunk: Any) -> ChunkRead:
    return _get(chunk, "usage"), bool(_get(chunk, "choices"))


def _responses_event(event: Any) -> ChunkRead:
    kind = _get(event, "type")
    if kind == "response.completed" or kind == "response.incomplete":
        return _get(_get(event, "response"), "usage"), False
    return None, isinstance(kind, str) and kind.endswith(".delta")


def _chat_prompt(params: Mapping[str, Any]) -> tuple[int, str]:
    return prompt_bytes(messages=params.get("messages"))


def _completion_prompt(params: Mapping[str, Any]) -> tuple[int, str]:
    return prompt_bytes(prompt=params.get("prompt"))


def _input_prompt(params: Mapping[str, Any]) -> tuple[int, str]:
    parts = list(_text_of(params.get("input")))
    instructions = params.get("instructions")
    if isinstance(instructions, str):
        parts.insert(0, instructions)
    return prompt_bytes(prompt="\n".join(parts))


def _no_stream(chunk: Any) -> ChunkRead:
    return None, False


@dataclass(frozen=True, slots=True)
class ApiSpec:
    """One scheduled API (module docstring).

    Attributes:
        name: Its name (``PreparedCall.api``; ``Scheduler.submit(api=...)``).
        path: Its HTTP path under the base URL's host (``/v1/...``).
        resource: The attribute path of its resource on an ``openai`` client
            (``("chat", "completions")``: ``client.chat.completions.create``).
        prompt_field: The request field that carries the prompt.
        cap_fields: The request fields that cap the output, in the order they win.
        generates: Whether it generates output tokens (embeddings do not).
        streams: Whether ``stream=True`` is accepted.
        asks_usage: Whether a stream must be asked for its usage
            (``stream_options={"include_usage": True}``).
        typed_events: Whether its stream is typed events, each named by an ``event:``
            line, that end with the last event and no ``data: [DONE]`` (the Responses
            API); else ``data:`` chunks ending with ``data: [DONE]``.
        read_usage: The answer's ``usage`` block as `ApiUsage`.
        read_chunk: A stream chunk's usage block and whether it carries content.
        read_prompt: The request's prompt as UTF-8 bytes and content kind (the
            token estimate's input).
    """

    name: str
    path: str
    resource: tuple[str, ...]
    prompt_field: str
    cap_fields: tuple[str, ...]
    generates: bool
    streams: bool
    asks_usage: bool
    typed_events: bool
    read_usage: Callable[[Any], ApiUsage]
    read_chunk: Callable[[Any], ChunkRead]
    read_prompt: Callable[[Mapping[str, Any]], tuple[int, str]]

    @property
    def call_name(self) -> str:
        """How a caller writes it: ``chat.completions.create``."""
        return ".".join(self.resource) + ".create"

    def usage(self, answer: Any) -> ApiUsage:
        """The usage an answer (a parsed response, or its JSON) reports."""
        return self.read_usage(_get(answer, "usage"))

    def target(self, client: Any) -> Any:
        """The resource on ``client`` whose ``create`` this API calls (``None``: the
        client has none, e.g. an ``openai`` too old for the Responses API)."""
        found = client
        for name in self.resource:
            found = getattr(found, name, None)
            if found is None:
                return None
        return found


class _Apis(Mapping[str, ApiSpec]):
    """The scheduled APIs by name, in the order they are listed."""

    def __init__(self, *specs: ApiSpec) -> None:
        self._by_name = {spec.name: spec for spec in specs}

    def __getitem__(self, name: str) -> ApiSpec:
        return self._by_name[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._by_name)

    def __len__(self) -> int:
        return len(self._by_name)

    def __repr__(self) -> str:
        return f"<APIS {list(self._by_name)}>"


#: Every scheduled API, by name.
APIS = _Apis(
    ApiSpec(
        name="chat",
        path="/v1/chat/completions",
        resource=("chat", "completions"),
        prompt_field="messages",
        cap_fields=("max_completion_tokens", "max_tokens"),
        generates=True,
        streams=True,
        asks_usage=True,
        typed_events=False,
        read_usage=_completion_usage,
        read_chunk=_completion_chunk,
        read_prompt=_chat_prompt,
    ),
    ApiSpec(
        name="completions",
        path="/v1/completions",
        resource=("completions",),
        prompt_field="prompt",
        cap_fields=("max_tokens",),
        generates=True,
        streams=True,
        asks_usage=True,
        typed_events=False,
        read_usage=_completion_usage,
        read_chunk=_completion_chunk,
        read_prompt=_completion_prompt,
    ),
    ApiSpec(
        name="responses",
        path="/v1/responses",
        resource=("responses",),
        prompt_field="input",
        cap_fields=("max_output_tokens",),
        generates=True,
        streams=True,
        asks_usage=False,
        typed_events=True,
        read_usage=_responses_usage,
        read_chunk=_responses_event,
        read_prompt=_input_prompt,
    ),
    ApiSpec(
        name="embeddings",
        path="/v1/embeddings",
        resource=("embeddings",),
        prompt_field="input",
        cap_fields=(),
        generates=False,
        streams=False,
        asks_usage=False,
        typed_events=False,
        read_usage=_embedding_usage,
        read_chunk=_no_stream,
        read_prompt=_input_prompt,
    ),
)

_BY_PATH = {spec.path: spec for spec in APIS.values()}


def api_for_path(path: str) -> ApiSpec | None:
    """The scheduled API served at ``path`` (``/v1/...``; a trailing ``/`` ignored)."""
    return _BY_PATH.get(path.rstrip("/") or "/")


def _text_of(value: Any) -> Iterator[str]:
    """Every text in a prompt value: strings, message contents and their parts."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, Mapping):
        text = value.get("text")
        if isinstance(text, str):
            yield text
        content = value.get("content")
        if content is not None:
            yield from _text_of(content)
        elif text is None and value.get("type") not in ("input_image", "image_url"):
            yield json.dumps(value, default=str)
    elif isinstance(value, list | tuple):
        for item in value:
            if isinstance(item, int) and not isinstance(item, bool):
                continue  # token ids: counted by prompt_token_ids
            yield from _text_of(item)


def prompt_token_ids(api: ApiSpec, params: Mapping[str, Any]) -> int | None:
    """The prompt's tokens when it is given as token ids (a list of ints, or of such
    lists), counted exactly; ``None`` when it is text."""
    value = params.get(api.prompt_field)
    if not isinstance(value, list) or not value:
        return None
    if all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        return len(value)
    if all(isinstance(v, list) and v and all(isinstance(t, int) for t in v) for v in value):
        return sum(len(v) for v in value)
    return None
