"""Serve the mock provider over HTTP: ``python -m mockprovider --port 8000 --time-scale 100``.

The API key is read from the environment variable named by ``--api-key-env`` (never from the
command line, so it stays out of shell history and process listings) and is never logged.
"""

from __future__ import annotations

import argparse
import logging
import math
import os
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

from mockprovider.physics import PROFILES, profile

if TYPE_CHECKING:
    from mockprovider.app import MockConfig

__all__ = ["build_parser", "config_from_args", "main"]


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


def build_parser() -> argparse.ArgumentParser:
    """The command-line parser (``--help`` lists every option)."""
    p = argparse.ArgumentParser(
        prog="python -m mockprovider",
        description="OpenAI-compatible, congestion-aware mock LLM provider (HTTP, uvicorn).",
    )
    p.add_argument("--host", default="127.0.0.1", help="bind address (default 127.0.0.1)")
    p.add_argument("--port", type=_port, default=8000, help="TCP port (default 8000)")
    p.add_argument(
        "--profile",
        default="default",
        choices=sorted(PROFILES),
        help="physics profile (default 'default')",
    )
    p.add_argument("--slots", type=_positive_int, help="override the profile's batch slots")
    p.add_argument(
        "--time-scale",
        type=_positive_float,
        default=1.0,
        help="virtual seconds per wall second (default 1; 100 = 100x faster than real time)",
    )
    p.add_argument("--rpm", type=_positive_int, help="requests per virtual minute")
    p.add_argument("--tpm", type=_positive_int, help="tokens per virtual minute")
    p.add_argument(
        "--rate-window", choices=("sliding", "fixed"), default="sliding", help="window kind"
    )
    p.add_argument("--quota-tokens", type=_positive_int, help="total billed tokens before 429")
    p.add_argument(
        "--api-key-env",
        metavar="VAR",
        help="require 'Authorization: Bearer <key>' with the key read from env var VAR",
    )
    p.add_argument("--error-rate", type=_fraction, default=0.0, help="fraction answered 5xx")
    p.add_argument("--hang-rate", type=_fraction, default=0.0, help="fraction never answered")
    p.add_argument("--drop-rate", type=_fraction, default=0.0, help="fraction dropped mid-body")
    p.add_argument(
        "--capacity-loss",
        type=_capacity_loss,
        metavar="TIME:FRACTION",
        help="at virtual TIME keep FRACTION of the slots",
    )
    p.add_argument("--seed", type=int, default=0, help="seed of the fault draws (default 0)")
    p.add_argument(
        "--default-output-tokens",
        type=_positive_int,
        default=128,
        help="output length without hint or max_tokens (default 128)",
    )
    p.add_argument("--model", default="mock-1", help="model id listed by /v1/models")
    p.add_argument(
        "--log-level",
        default="info",
        choices=("critical", "error", "warning", "info", "debug"),
        help="uvicorn log level (default info)",
    )
    p.add_argument("--access-log", action="store_true", help="log every request")
    return p


def config_from_args(args: argparse.Namespace, parser: argparse.ArgumentParser) -> MockConfig:
    """Build a ``MockConfig`` from parsed arguments; configuration errors exit via ``parser``."""
    from dataclasses import replace

    from mockprovider.app import MockConfig

    api_key: str | None = None
    if args.api_key_env is not None:
        api_key = os.environ.get(args.api_key_env)
        if not api_key:
            parser.error(f"--api-key-env: environment variable {args.api_key_env} is unset/empty")
    try:
        physics = profile(args.profile)
        if args.slots is not None:
            physics = replace(physics, slots=args.slots)
        return MockConfig(
            physics=physics,
            time_scale=args.time_scale,
            rpm=args.rpm,
            tpm=args.tpm,
            rate_window=args.rate_window,
            quota_tokens=args.quota_tokens,
            api_key=api_key,
            error_rate=args.error_rate,
            hang_rate=args.hang_rate,
            drop_rate=args.drop_rate,
            capacity_loss=args.capacity_loss,
            seed=args.seed,
            default_output_tokens=args.default_output_tokens,
            model=args.model,
        )
    except ValueError as exc:
        parser.error(str(exc))


class _QuietDrops(logging.Filter):
    """Drop uvicorn's traceback for connections the mock drops on purpose."""

    def filter(self, record: logging.LogRecord) -> bool:
        from mockprovider.app import ConnectionDropped

        exc = record.exc_info[1] if record.exc_info else None
        return not isinstance(exc, ConnectionDropped)


def main(argv: Sequence[str] | None = None) -> int:
    """Parse ``argv`` and serve until interrupted."""
    parser = build_parser()
    args = parser.parse_args(argv)
    config = config_from_args(args, parser)
    try:
        import uvicorn
    except ImportError:  # pragma: no cover - depends on the installed extras
        parser.error("uvicorn is not installed: pip install 'semisched[mock]'")

    from mockprovider.app import create_app

    logging.getLogger("uvicorn.error").addFilter(_QuietDrops())
    uvicorn.run(
        create_app(config),
        host=args.host,
        port=args.port,
        log_level=args.log_level,
        access_log=args.access_log,
        lifespan="off",
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
