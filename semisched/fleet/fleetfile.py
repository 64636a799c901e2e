"""Fleet files: the endpoints a scheduler sends to, described once for the batch CLI and the SDK.

A fleet file is TOML (read with `tomllib`):

```toml
routing = "anticipated_load"        # optional: a RoutingConfig.policy name

[routing_options]                   # optional: other RoutingConfig fields, by name
short_pool_tokens = 4096

[[endpoint]]
name = "east"                       # required, unique
base_url = "http://127.0.0.1:8000/east/v1"   # required: http(s)://host[:port][/path]
key_env = "EAST_KEY"                # optional: the variable holding its API key
model_map = { "gpt-4o-mini" = "east-deployment" }   # optional: logical -> deployed
rpm = 500                           # optional: also tpm, max_concurrency, weight,
                                    # pool ("short"/"long"), context_tokens,
                                    # learn_limits (true: adopt x-ratelimit-* headers)
price = { input = 0.15, output = 0.60, cached_input = 0.075 }  # optional: US dollars
                                    # per million tokens (also batch_discount, 0.5 by
                                    # default); or a table of model -> such a table
```

`load_fleet` reads and validates it into a `FleetFile` (a tuple
of `EndpointDef` and an optional
[`RoutingConfig`][semisched.core.config.RoutingConfig]); `parse_endpoint_option`
reads the CLI's short form ``NAME=URL[,key-env=VAR][,rpm=N]...``; and
`build_endpoints` turns definitions into
`semisched.fleet.endpoints.Endpoint` objects, reading each API key from the
environment:

```python
fleet = load_fleet("fleet.toml")
scheduler = Scheduler(endpoints=build_endpoints(fleet.endpoints), routing=fleet.routing)
```

Rules:

1. Bad input is one exception type, `FleetFileError` (a ``ValueError``),
   raised before anything is sent, naming the culprit: the file, the endpoint
   and the field (``fleet.toml: endpoint 'east': rpm=0 must be an int >= 1``).
   Unknown fields are errors at every level: a typo never silently means the
   default.
2. Values are checked by the same rules as the SDK's own objects
   (`EndpointSpec`,
   [`BudgetConfig`][semisched.core.config.BudgetConfig],
   [`RoutingConfig`][semisched.core.config.RoutingConfig]): one mistake, one message.
3. Keys never sit in a file or on a command line: only the *name* of the
   variable that holds one. Only `build_endpoints` reads the
   environment, and no message ever contains a key's value.

What this module is not: it sends nothing and chooses no endpoint (the
core's routing layer does). The mock provider's own fleet file
(``python -m mockprovider --fleet``, `mockprovider.fleet`) describes
servers, not clients, and has its own schema.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, fields, replace
from types import MappingProxyType
from typing import Any, Final
from urllib.parse import urlsplit

from semisched.core.checks import check_str
from semisched.core.config import ROUTING_POLICY_NAMES, RoutingConfig
from semisched.core.errors import SemischedError
from semisched.core.fleet.endpoint import EndpointSpec
from semisched.fleet.endpoints import (
    ENDPOINT_OPTIONS,
    Endpoint,
    endpoint_option_types,
    endpoint_spec,
)

__all__ = [
    "ENDPOINT_FIELDS",
    "FLEET_FIELDS",
    "ROUTING_OPTION_FIELDS",
    "EndpointDef",
    "FleetFile",
    "FleetFileError",
    "build_endpoints",
    "check_unique",
    "fleet_from_dict",
    "load_fleet",
    "openai_client",
    "parse_endpoint_option",
]

#: Keys of an ``[[endpoint]]`` table: its name, URL and key variable, then
#: [`Endpoint`][semisched.Endpoint]'s options (`semisched.fleet.endpoints.ENDPOINT_OPTIONS`).
ENDPOINT_FIELDS: Final = ("name", "base_url", "key_env", *ENDPOINT_OPTIONS)
#: Top-level keys of a fleet file.
FLEET_FIELDS: Final = ("routing", "routing_options", "endpoint")
#: Keys of ``[routing_options]``: every `RoutingConfig` field but ``policy``.
ROUTING_OPTION_FIELDS: Final = tuple(f.name for f in fields(RoutingConfig) if f.name != "policy")

#: ``parse_endpoint_option`` keys after ``NAME=URL``, and the field and type each sets:
#: ``key-env`` and every scalar endpoint option (``max_concurrency`` as ``max-concurrency``).
_OPTION_KEYS: Final[Mapping[str, tuple[str, type]]] = MappingProxyType(
    {
        "key-env": ("key_env", str),
        **{n.replace("_", "-"): (n, kind) for n, kind in endpoint_option_types().items()},
    }
)


class FleetFileError(SemischedError, ValueError):
    """A fleet description (file, ``--endpoint`` option or definitions) is not usable.

    The message names the culprit: the file, the endpoint and the field.
    """


def _known(what: str, keys: Iterable[str], allowed: Sequence[str]) -> None:
    """Raise for the first key of ``keys`` not in ``allowed``."""
    for key in keys:
        if key not in allowed:
            raise FleetFileError(f"{what}: unknown field {key!r} (known: {', '.join(allowed)})")


class EndpointDef:
    """One endpoint as a fleet file or ``--endpoint`` describes it: everything but its client.

    Args:
        name: Unique in the fleet; statistics and routing decisions use it.
        base_url: The OpenAI-compatible base URL (``http(s)://host[:port]/.../v1``).
        key_env: The environment variable holding its API key; ``None``: the
            caller's default (the batch CLI's ``--api-key-env``).
        **options: [`Endpoint`][semisched.Endpoint]'s options
            (`ENDPOINT_OPTIONS`: ``model_map``,
            ``rpm``, ``tpm``, ``max_concurrency``, ``weight``, ``pool``,
            ``context_tokens``), each readable as an attribute (``None`` or its
            default when not given).

    Raises:
        ValueError: A bad value, naming the field (the same checks as
            [`Endpoint`][semisched.Endpoint]).
        TypeError: An unknown option.
    """

    __slots__ = ("base_url", "key_env", "name", "options")

    name: str
    base_url: str
    key_env: str | None
    options: Mapping[str, Any]

    def __init__(
        self, *, name: str, base_url: str, key_env: str | None = None, **options: Any
    ) -> None:
        check_str("name", name)
        check_str("base_url", base_url)
        parts = urlsplit(base_url)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ValueError(
                f"base_url={base_url!r} must be an http:// or https:// URL with a host"
            )
        check_str("key_env", key_env, optional=True)
        if key_env is not None and ("=" in key_env or "\0" in key_env):
            raise ValueError(f"key_env={key_env!r} must be an environment variable name")
        spec = endpoint_spec(name, in_file=True, **options)  # the SDK's own checks (rule 2)
        if options.get("price") is not None:
            options["price"] = spec.price  # a table read once, hashable
        if options.get("model_map") is not None:
            options["model_map"] = MappingProxyType(dict(options["model_map"]))
        for attr, value in (("name", name), ("base_url", base_url), ("key_env", key_env)):
            object.__setattr__(self, attr, value)
        object.__setattr__(self, "options", MappingProxyType(options))

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"EndpointDef is frozen: cannot set {name!r}")

    def __getattr__(self, name: str) -> Any:
        if name in ENDPOINT_OPTIONS:
            return self.options.get(name, _DEFAULTS.get(name))
        raise AttributeError(name)

    def _key(self) -> tuple[Any, ...]:
        return (self.name, self.base_url, self.key_env, tuple(getattr(self, n) for n in _SCALARS))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, EndpointDef):
            return NotImplemented
        return self._key() == other._key() and self.model_map == other.model_map

    def __hash__(self) -> int:
        return hash(self._key())

    def __repr__(self) -> str:
        given = ", ".join(f"{k}={v!r}" for k, v in self.options.items())
        return f"EndpointDef(name={self.name!r}, base_url={self.base_url!r}, " + (
            f"key_env={self.key_env!r}" + (f", {given})" if given else ")")
        )

    def spec(self) -> EndpointSpec:
        """What the core will know of this endpoint (as [`Endpoint`][semisched.Endpoint]
        builds it: a budget that also adopts the limits its headers advertise)."""
        return endpoint_spec(self.name, **self.options)

    def endpoint(self, client: Any) -> Endpoint:
        """The [`Endpoint`][semisched.Endpoint] this describes, sending through ``client``."""
        return Endpoint(self.name, client, **self.options)


#: Options with a default other than ``None``, and the scalar ones (all but ``model_map``).
_DEFAULTS: Final = {"weight": 1.0, "learn_limits": True}
_SCALARS: Final = ENDPOINT_OPTIONS[1:]


def check_unique(defs: Iterable[EndpointDef], where: str = "fleet") -> None:
    """Raise `FleetFileError` on two endpoints with one name (``where`` prefixes it)."""
    seen: set[str] = set()
    for d in defs:
        if d.name in seen:
            raise FleetFileError(
                f"{where}: duplicate endpoint name {d.name!r}: names must be unique"
            )
        seen.add(d.name)


@dataclass(frozen=True, kw_only=True)
class FleetFile:
    """A fleet: its endpoints and, if the file chose one, its routing.

    Attributes:
        endpoints: At least one, with unique names, in file order.
        routing: The file's ``routing`` and ``[routing_options]``; ``None``
            when it sets neither (the scheduler's config decides).

    Raises:
        FleetFileError: No endpoints, or two with one name.
        TypeError: An item of the wrong class.
    """

    endpoints: tuple[EndpointDef, ...]
    routing: RoutingConfig | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.endpoints, tuple):
            raise TypeError(f"endpoints={self.endpoints!r} must be a tuple of EndpointDef")
        for i, d in enumerate(self.endpoints):
            if not isinstance(d, EndpointDef):
                raise TypeError(f"endpoints[{i}]={d!r} must be an EndpointDef")
        if not self.endpoints:
            raise FleetFileError("fleet: no endpoints (add at least one [[endpoint]] table)")
        check_unique(self.endpoints)
        if self.routing is not None and not isinstance(self.routing, RoutingConfig):
            raise TypeError(f"routing={self.routing!r} must be None or a RoutingConfig")

    @property
    def names(self) -> tuple[str, ...]:
        """The endpoints' names, in order."""
        return tuple(d.name for d in self.endpoints)


def _endpoint_def(where: str, index: int, table: object) -> EndpointDef:
    """The ``index``-th (1-based) ``[[endpoint]]`` table, checked (``where`` names the file)."""
    if not isinstance(table, dict):
        raise FleetFileError(f"{where}: endpoint #{index} must be a table ([[endpoint]])")
    name = table.get("name")
    usable = isinstance(name, str) and name
    label = f"{where}: endpoint {name!r}" if usable else f"{where}: endpoint #{index}"
    if "name" not in table:
        raise FleetFileError(f"{label} has no 'name'")
    _known(label, table, ENDPOINT_FIELDS)
    if "base_url" not in table:
        raise FleetFileError(f"{label}: missing 'base_url'")
    model_map = table.get("model_map")
    if model_map is not None and not isinstance(model_map, dict):
        raise FleetFileError(f"{label}: model_map={model_map!r} must be a table")
    try:
        return EndpointDef(**table)
    except (ValueError, TypeError) as exc:
        raise FleetFileError(f"{label}: {exc}") from None


def _routing(where: str, data: dict[str, Any]) -> RoutingConfig | None:
    """The file's routing choice, checked (``None``: it makes none)."""
    policy = data.get("routing")
    options = data.get("routing_options")
    if policy is None and options is None:
        return None
    if options is None:
        options = {}
    if not isinstance(options, dict):
        raise FleetFileError(f"{where}: routing_options must be a table ([routing_options])")
    _known(f"{where}: [routing_options]", options, ROUTING_OPTION_FIELDS)
    if policy is not None and (not isinstance(policy, str) or policy not in ROUTING_POLICY_NAMES):
        raise FleetFileError(
            f"{where}: routing={policy!r} must be one of {', '.join(ROUTING_POLICY_NAMES)}"
        )
    try:
        config = RoutingConfig(**options)
        return config if policy is None else replace(config, policy=policy)
    except (ValueError, TypeError) as exc:
        raise FleetFileError(f"{where}: [routing_options]: {exc}") from None


def fleet_from_dict(data: Mapping[str, Any], *, where: str = "fleet") -> FleetFile:
    """A `FleetFile` from parsed TOML (``where`` names the source in messages).

    Raises:
        FleetFileError: Rule 1.
    """
    data = dict(data)
    _known(where, data, FLEET_FIELDS)
    tables = data.get("endpoint")
    if tables is None or tables == []:
        raise FleetFileError(f"{where}: no endpoints (add at least one [[endpoint]] table)")
    if not isinstance(tables, list):
        raise FleetFileError(f"{where}: 'endpoint' must be an array of tables ([[endpoint]])")
    defs = tuple(_endpoint_def(where, i, table) for i, table in enumerate(tables, 1))
    check_unique(defs, where)
    return FleetFile(endpoints=defs, routing=_routing(where, data))


def load_fleet(path: str | os.PathLike[str]) -> FleetFile:
    """Read and check the fleet file at ``path`` (reads no environment).

    Raises:
        FleetFileError: The file cannot be read, is not TOML, or breaks rule 1;
            the message starts with the path.
    """
    where = os.fspath(path)
    try:
        with open(path, "rb") as handle:
            data = tomllib.load(handle)
    except OSError as exc:
        raise FleetFileError(f"cannot read fleet file {where!r}: {exc.strerror or exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise FleetFileError(f"{where}: not valid TOML: {exc}") from None
    return fleet_from_dict(data, where=where)


def parse_endpoint_option(text: str) -> EndpointDef:
    """The CLI's ``NAME=URL[,key-env=VAR][,rpm=N][,tpm=N][,max-concurrency=N][,weight=X]
    [,pool=short|long][,context-tokens=N]`` (``_`` may stand for ``-`` in keys).

    The URL ends at the first comma (a base URL has none). Model maps need a fleet file.

    Raises:
        FleetFileError: A malformed option, an unknown key or a bad value, naming it.
    """
    name, eq, rest = text.partition("=")
    name = name.strip()
    if not eq or not name:
        raise FleetFileError(f"--endpoint {text!r}: must be NAME=URL[,key-env=VAR]")
    where = f"endpoint {name!r}"
    url, *pairs = rest.split(",")
    values: dict[str, Any] = {"name": name, "base_url": url.strip()}
    try:
        option_pairs(pairs, _OPTION_KEYS, where, values)
        return EndpointDef(**values)
    except (ValueError, TypeError) as exc:
        message = str(exc) if isinstance(exc, FleetFileError) else f"{where}: {exc}"
        raise FleetFileError(message) from None


def option_pairs(
    pairs: Sequence[str],
    keys: Mapping[str, tuple[str, type]],
    where: str,
    values: dict[str, Any],
) -> None:
    """Read a CLI option's ``KEY=VALUE`` pairs into ``values`` (by field name): each key
    one of ``keys`` (``_`` may stand for ``-``), converted by its type, given once.

    Raises:
        FleetFileError: A malformed pair, an unknown or repeated key, or a bad value,
            the message starting with ``where``.
    """
    for pair in pairs:
        key, eq, raw = pair.partition("=")
        key = key.strip().replace("_", "-")
        if not eq or not key:
            raise FleetFileError(f"{where}: {pair!r} must be KEY=VALUE")
        if key not in keys:
            raise FleetFileError(f"{where}: unknown key {key!r} (known: {', '.join(keys)})")
        field_name, kind = keys[key]
        if field_name in values:
            raise FleetFileError(f"{where}: {key} given twice")
        raw = raw.strip()
        try:
            values[field_name] = _flag(raw) if kind is bool else kind(raw)
        except ValueError:
            what = {int: "an int", bool: "true or false"}.get(kind, "a number")
            raise FleetFileError(f"{where}: {key}={raw!r} must be {what}") from None


def _flag(raw: str) -> bool:
    """``true``/``false`` (any case; ``1``/``0``, ``yes``/``no`` too) as a bool."""
    word = raw.lower()
    if word in ("true", "1", "yes"):
        return True
    if word in ("false", "0", "no"):
        return False
    raise ValueError(raw)


def openai_client(base_url: str, api_key: str) -> Any:
    """``openai.AsyncOpenAI(base_url=..., api_key=..., max_retries=0)``: the default client
    (the scheduler owns retries)."""
    import openai

    return openai.AsyncOpenAI(base_url=base_url, api_key=api_key, max_retries=0)


def build_endpoints(
    defs: Iterable[EndpointDef],
    *,
    default_key_env: str = "OPENAI_API_KEY",
    make_client: Callable[[str, str], Any] | None = None,
    environ: Mapping[str, str] | None = None,
) -> list[Endpoint]:
    """The endpoints ``defs`` describe, each with its own client and key.

    Every key is looked up before any client is made, so a missing one fails
    the whole fleet at once, naming every endpoint and variable concerned (never
    a key's value).

    Args:
        defs: The endpoint definitions (a `FleetFile`'s ``endpoints``).
        default_key_env: The variable of endpoints without their own ``key_env``.
        make_client: ``make_client(base_url, api_key)`` -> an OpenAI-compatible
            async client (default: `openai_client`).
        environ: Where keys are read (default ``os.environ``).

    Returns:
        One [`Endpoint`][semisched.Endpoint] per definition, in order.

    Raises:
        FleetFileError: No definitions, duplicate names, or a key variable
            unset or empty.
    """
    defs = tuple(defs)
    if not defs:
        raise FleetFileError("fleet: no endpoints")
    check_unique(defs)
    env = os.environ if environ is None else environ
    missing: list[str] = []
    keys: list[str] = []
    for d in defs:
        var = d.key_env or default_key_env
        key = env.get(var, "")
        if not key:
            missing.append(f"endpoint {d.name!r}: the API key variable {var} is not set")
        keys.append(key)
    if missing:
        raise FleetFileError("; ".join(missing))
    make = openai_client if make_client is None else make_client
    return [d.endpoint(make(d.base_url, key)) for d, key in zip(defs, keys, strict=True)]
