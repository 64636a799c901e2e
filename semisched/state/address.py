"""Where a shared state lives: its URL and its key namespace, checked before anything opens.

``Scheduler(state=..., options=RuntimeOptions(namespace=...))`` and ``semisched
batch --state URL --namespace NAME`` check both here, so a typo is one clear
``ValueError`` naming the argument, at construction (the command: exit 2, before
any file is written), not a traceback from the Redis client at the first call.

- A URL is ``redis://[[user]:password@]host[:port][/db]``, ``rediss://...`` (TLS)
  or ``unix:///path.sock[?db=N]``: a known scheme, a host (a path for ``unix``),
  a numeric port and database. Its password never appears in a message.
- A namespace is a non-empty string without ``:`` (the keys' separator) or spaces.

Pure: no I/O, and no import of the ``redis`` package (the ``redis`` extra is
needed only to connect).
"""

from __future__ import annotations

from urllib.parse import SplitResult, parse_qsl, urlencode, urlsplit, urlunsplit

__all__ = ["SCHEMES", "check_namespace", "check_state_url", "redact"]

#: The URL schemes a Redis state accepts.
SCHEMES = ("redis", "rediss", "unix")


def redact(url: str) -> str:
    """``url`` with its password (in the authority or the query) replaced by ``***``."""
    parts = urlsplit(url)
    netloc = parts.netloc
    if "@" in netloc:
        userinfo, host = netloc.rsplit("@", 1)
        if ":" in userinfo:
            netloc = f"{userinfo.split(':', 1)[0]}:***@{host}"
    query = parts.query
    if "password=" in query:
        pairs = parse_qsl(query, keep_blank_values=True)
        query = urlencode([(k, "***" if k == "password" else v) for k, v in pairs])
    return urlunsplit(parts._replace(netloc=netloc, query=query))


def check_state_url(url: object, name: str = "state") -> None:
    """Require a Redis URL the state can connect to (module docstring).

    Raises:
        TypeError: ``url`` is not a string.
        ValueError: Its scheme, host, port or database is wrong, naming ``name``
            (the password redacted).
    """
    if not isinstance(url, str):
        raise TypeError(f"{name}={url!r} must be a Redis URL (redis://HOST:PORT/DB)")
    parts = urlsplit(url)
    shown = redact(url)
    problem = _problem(parts)
    if problem:
        raise ValueError(f"{name}={shown!r}: {problem} (e.g. redis://127.0.0.1:6379/0)")


def _problem(parts: SplitResult) -> str:
    """What is wrong with a split URL, or ``""``."""
    scheme = parts.scheme
    if scheme not in SCHEMES:
        return "must start with redis://, rediss:// or unix://"
    if scheme == "unix":
        if not parts.path:
            return "unix:// needs the socket's path (unix:///path/to/redis.sock)"
        db = dict(parse_qsl(parts.query)).get("db", "0")
        return "" if db.isdigit() else f"the database must be a number, not {db!r}"
    try:
        parts.port  # noqa: B018 - urlsplit checks the port when it is read
    except ValueError:
        return "the port must be a number from 0 to 65535"
    if not parts.hostname:
        return "the URL needs a host"
    db = parts.path.strip("/")
    if db and not db.isdigit():
        return f"the database must be a number, not {db!r}"
    return ""


def check_namespace(namespace: object, name: str = "namespace") -> None:
    """Require a key namespace: a non-empty string without ``:`` or spaces.

    Raises:
        ValueError: Naming ``name``.
    """
    if (
        not isinstance(namespace, str)
        or not namespace
        or ":" in namespace
        or any(c.isspace() for c in namespace)
    ):
        raise ValueError(f"{name}={namespace!r} must be a non-empty str without ':' or spaces")
