"""Serve the mock provider over HTTP: ``python -m mockprovider --port 8100 --time-scale 100``.

Two modes:

* one endpoint, set by the options below (``--profile``, ``--rpm``, ``--outage``, ...), at
  ``http://HOST:PORT/v1``;
* a fleet, ``python -m mockprovider --fleet FILE.toml``: several endpoints on one port, endpoint
  ``NAME`` at ``http://HOST:PORT/NAME/v1``, each with its own physics, limits, faults, outage
  windows and stats (``mockprovider.fleet`` describes the file). The file sets everything about
  the endpoints, so ``--fleet`` takes only ``--host``, ``--port``, ``--log-level`` and
  ``--access-log``; any endpoint option beside it is an error. At start-up one line per
  endpoint gives its base URL.

The API key is read from the environment variable named by ``--api-key-env`` (``api_key_env``
in a fleet file), never from the command line, so it stays out of shell history and process
listings, and it is never logged.
"""

from __future__ import annotations

import argparse
import logging
import math
import os
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from mockprovider.physics import PROFILES, profile

if TYPE_CHECKING:
    from mockprovider.app import MockConfig
    from mockprovider.fleet import FleetConfig

__all__ = ["build_parser", "config_from_args", "fleet_from_args", "main"]

_SERVER_DESTS = frozenset({"host", "port", "fleet", "log_level", "access_log"})


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be a finite number > 0")
    return value


def _fraction(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not 0 <= value <= 1:
        raise argparse.ArgumentTypeError(f"{text!r} must be a number in [0, 1]")
    return value


def _nonnegative_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be a finite number >= 0")
    return value


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} must be an integer >= 1")
    return value


def _port(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"{text!r} must be a port number in [0, 65535]")
    return value


def _capacity_loss(text: str) -> tuple[float, float]:
    t_text, sep, f_text = text.partition(":")
    try:
        t, f = float(t_text), float(f_text)
    except ValueError:
        t = f = math.nan
    if not sep or not math.isfinite(t) or t < 0 or not 0 <= f <= 1:
        raise argparse.ArgumentTypeError(
            f"{text!r} must be TIME:FRACTION (virtual seconds >= 0, fraction in [0, 1]), "
            "e.g. 30:0.5"
        )
    return t, f


def _outage(text: str) -> tuple[float, float]:
    start_text, sep, end_text = text.partition(":")
    try:
        start, end = float(start_text), float(end_text)
    except ValueError:
        start = end = math.nan
    if not sep or not math.isfinite(start) or not math.isfinite(end) or not 0 <= start < end:
        raise argparse.ArgumentTypeError(
            f"{text!r} must be START:END (virtual seconds, 0 <= START < END), e.g. 60:120"
        )
    return start, end


def build_parser() -> argparse.ArgumentParser:
    """The command-line parser (``--help`` lists every option).

    Endpoint options default to ``None`` (meaning ``MockConfig``'s default), so that
    ``--fleet`` can tell which of them were given.
    """
    p = argparse.ArgumentParser(
        prog="python -m mockprovider",
        description="OpenAI-compatible, congestion-aware mock LLM provider (HTTP, uvicorn).",
        epilog=(
            "Fleet mode: --fleet FILE.toml serves several endpoints on one port, endpoint NAME "
            "at http://HOST:PORT/NAME/v1 (see examples/fleet.toml and mockprovider.fleet); "
            "the file sets every endpoint option, so only the server options go beside it."
        ),
    )
    _add_server_options(p.add_argument_group("server"))
    _add_endpoint_options(p.add_argument_group("one endpoint (not with --fleet)"))
    _add_batch_options(p.add_argument_group("the Batch API (one endpoint; not with --fleet)"))
    return p


def _add_server_options(server: argparse._ArgumentGroup) -> None:
    server.add_argument("--host", default="127.0.0.1", help="bind address (default 127.0.0.1)")
    server.add_argument("--port", type=_port, default=8100, help="TCP port (default 8100)")
    server.add_argument(
        "--fleet",
        metavar="FILE.toml",
        help="serve the fleet of endpoints in this TOML file instead of one endpoint",
    )
    server.add_argument(
        "--log-level",
        default="info",
        choices=("critical", "error", "warning", "info", "debug"),
        help="uvicorn log level (default info)",
    )
    server.add_argument("--access-log", action="store_true", help="log every request")


def _add_endpoint_options(one: argparse._ArgumentGroup) -> None:
    one.add_argument(
        "--profile", choices=sorted(PROFILES), help="physics profile (default 'default')"
    )
    one.add_argument("--slots", type=_positive_int, help="override the profile's batch slots")
    one.add_argument(
        "--time-scale",
        type=_positive_float,
        help="virtual seconds per wall second (default 1; 100 = 100x faster than real time)",
    )
    one.add_argument("--rpm", type=_positive_int, help="requests per virtual minute")
    one.add_argument("--tpm", type=_positive_int, help="tokens per virtual minute")
    one.add_argument(
        "--rate-window", choices=("sliding", "fixed"), help="window kind (default sliding)"
    )
    one.add_argument("--quota-tokens", type=_positive_int, help="total billed tokens before 429")
    one.add_argument(
        "--api-key-env",
        metavar="VAR",
        help="require 'Authorization: Bearer <key>' with the key read from env var VAR",
    )
    one.add_argument("--error-rate", type=_fraction, help="fraction answered 5xx (default 0)")
    one.add_argument("--hang-rate", type=_fraction, help="fraction never answered (default 0)")
    one.add_argument("--drop-rate", type=_fraction, help="fraction dropped mid-body (default 0)")
    one.add_argument(
        "--capacity-loss",
        type=_capacity_loss,
        metavar="TIME:FRACTION",
        help="at virtual TIME keep FRACTION of the slots",
    )
    one.add_argument(
        "--outage",
        type=_outage,
        action="append",
        metavar="START:END",
        help=(
            "down from virtual START to END (seconds from the first request): new requests "
            "get 503, those already being served finish; repeatable"
        ),
    )
    one.add_argument("--seed", type=int, help="seed of the fault draws (default 0)")
    one.add_argument(
        "--default-output-tokens",
        type=_positive_int,
        help="output length without hint or max_tokens (default 128)",
    )
    one.add_argument("--model", help="model id listed by /v1/models (default mock-1)")
    one.add_argument(
        "--context-tokens",
        type=_positive_int,
        help=(
            "the model's context window, prompt plus output tokens; a max_tokens that does "
            "not fit beside the prompt gets a 400 (default 131072)"
        ),
    )


def _add_batch_options(batch: argparse._ArgumentGroup) -> None:
    batch.add_argument(
        "--batch-turnaround-s",
        type=_positive_float,
        metavar="MEDIAN",
        help="median virtual seconds from a batch's creation to completed (default 3600)",
    )
    batch.add_argument(
        "--batch-turnaround-sigma",
        type=_nonnegative_float,
        metavar="SIGMA",
        help="lognormal spread of a batch's turnaround; 0: always the median (default 0.5)",
    )
    batch.add_argument(
        "--batch-failure-rate",
        type=_fraction,
        help="fraction of batch lines answered 500 in the error file (default 0)",
    )
    batch.add_argument(
        "--batch-expiry-rate",
        type=_fraction,
        help="fraction of batches that expire at the end of the completion window (default 0)",
    )
    batch.add_argument(
        "--batch-window-s",
        type=_positive_float,
        metavar="SECONDS",
        help="the completion window ('24h') in virtual seconds (default 86400)",
    )


def config_from_args(args: argparse.Namespace, parser: argparse.ArgumentParser) -> MockConfig:
    """Build a ``MockConfig`` from parsed arguments; configuration errors exit via ``parser``.

    An endpoint option left out keeps ``MockConfig``'s default.
    """
    from dataclasses import replace

    from mockprovider.app import MockConfig

    settings: dict[str, Any] = {}
    if args.api_key_env is not None:
        settings["api_key"] = os.environ.get(args.api_key_env)
        if not settings["api_key"]:
            parser.error(f"--api-key-env: environment variable {args.api_key_env} is unset/empty")
    plain = (
        *("time_scale", "rpm", "tpm", "rate_window", "quota_tokens", "error_rate", "hang_rate"),
        *("drop_rate", "capacity_loss", "seed", "default_output_tokens", "model"),
        "context_tokens",
        *("batch_turnaround_s", "batch_turnaround_sigma", "batch_failure_rate"),
        *("batch_expiry_rate", "batch_window_s"),
    )
    settings.update({k: getattr(args, k) for k in plain if getattr(args, k) is not None})
    if args.outage is not None:
        settings["outages"] = tuple(args.outage)
    try:
        physics = profile(args.profile or "default")
        if args.slots is not None:
            physics = replace(physics, slots=args.slots)
        return MockConfig(physics=physics, **settings)
    except ValueError as exc:
        parser.error(str(exc))


def fleet_from_args(args: argparse.Namespace, parser: argparse.ArgumentParser) -> FleetConfig:
    """Load the ``--fleet`` file; a bad file or an endpoint option beside it exits (``parser``)."""
    from mockprovider.fleet import load_fleet

    given = [
        "--" + dest.replace("_", "-")
        for dest, value in vars(args).items()
        if dest not in _SERVER_DESTS and value is not None
    ]
    if given:
        parser.error(
            f"--fleet cannot be combined with {', '.join(given)}: "
            "the fleet file sets every endpoint option"
        )
    try:
        return load_fleet(args.fleet)
    except (OSError, ValueError) as exc:
        parser.error(f"--fleet: {exc}")


class _QuietDrops(logging.Filter):
    """Drop uvicorn's traceback for connections the mock drops on purpose."""

    def filter(self, record: logging.LogRecord) -> bool:
        from mockprovider.app import ConnectionDropped

        exc = record.exc_info[1] if record.exc_info else None
        return not isinstance(exc, ConnectionDropped)


#: The server's packages outside the base install -> how to install each (the mock imports
#: nothing of semisched, so this is its own copy of semisched.extras' hint).
_SERVER_PACKAGES = {
    "starlette": "pip install 'semisched[mock]'",
    "uvicorn": "pip install 'semisched[mock]'",
    "prometheus_client": "pip install 'semisched[mock]'",
    "httpx2": "pip install httpx2",
}


def main(argv: Sequence[str] | None = None) -> int:
    """Parse ``argv`` and serve until interrupted."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return _serve(args, parser)
    except ModuleNotFoundError as exc:
        name = (exc.name or "").split(".", 1)[0]
        if name not in _SERVER_PACKAGES:
            raise
        parser.error(f"the mock's HTTP server needs {name}: {_SERVER_PACKAGES[name]}")


def _serve(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    """Serve what ``args`` ask for (the server's packages imported here)."""
    fleet = None if args.fleet is None else fleet_from_args(args, parser)
    config = None if fleet is not None else config_from_args(args, parser)
    import uvicorn

    from mockprovider.app import create_app
    from mockprovider.fleet import create_fleet_app

    if fleet is not None:
        app = create_fleet_app(fleet)
        for endpoint in fleet:
            print(f"{endpoint.name}: http://{args.host}:{args.port}{endpoint.base_path}")
        sys.stdout.flush()
    else:
        app = create_app(config)
    logging.getLogger("uvicorn.error").addFilter(_QuietDrops())
    uvicorn.run(
        app,
        host=args.host,
        port=args.port,
        log_level=args.log_level,
        access_log=args.access_log,
        lifespan="off",
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
