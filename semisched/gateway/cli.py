"""``semisched serve``: the gateway's command line.

Three ways to say where requests go:

- ``--config FILE``: a gateway file (`semisched.gateway.config`);
- ``--upstream URL``: one OpenAI-compatible upstream, with ``--rpm``/``--tpm``,
  ``--key TENANT=SHA256`` (or ``--no-auth``) and ``--upstream-key-env VAR``;
- ``--demo``: an in-process mock provider and two demo keys.

Flags override the file's ``[gateway]`` values. A configuration error exits
with status 2 and one line naming the culprit (never a key's value).

What this module is not: it serves nothing itself (`semisched.gateway.server`).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping, Sequence
from typing import Any, TextIO

from semisched.core.config import PRESETS
from semisched.extras import MissingDependency, needs
from semisched.fleet.fleetfile import FleetFileError
from semisched.gateway.config import GatewayConfig, GatewayConfigError
from semisched.gateway.configfile import config_from_dict, read_toml
from semisched.gateway.keys import key_hash
from semisched.priors.default import PRIOR_CHOICES

__all__ = ["build_config", "main", "parser"]

_EPILOG = """\
examples:
  semisched serve --demo
  semisched serve --upstream https://api.openai.com/v1 --upstream-key-env OPENAI_API_KEY \\
      --rpm 500 --tpm 200000 --key web=$(printf %s "$GATEWAY_KEY" | sha256sum | cut -d' ' -f1)
  semisched serve --config examples/gateway.toml --port 8080

Scheduling hints (headers): x-semisched-deadline (seconds), x-semisched-class,
x-semisched-prior (P50,P90 output tokens). SIGTERM drains: queued requests get 503
with Retry-After, requests in flight may finish for --grace seconds.
"""


def parser() -> argparse.ArgumentParser:
    """The ``semisched serve`` parser (a declarative table, hence its length)."""
    p = argparse.ArgumentParser(
        prog="semisched serve",
        description="An OpenAI-compatible scheduling gateway: tenants by key, priority "
        "classes, deadlines, fair sharing and shared budgets in front of your providers.",
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument("--config", metavar="FILE", help="a gateway TOML file")
    where.add_argument("--upstream", metavar="URL", help="one upstream's /v1 base URL")
    where.add_argument(
        "--demo", action="store_true", help="serve an in-process mock provider, with demo keys"
    )
    p.add_argument(
        "--upstream-key-env",
        metavar="VAR",
        help="with --upstream: the variable holding its API key (default: none)",
    )
    p.add_argument("--rpm", type=int, help="the upstreams' shared requests per minute")
    p.add_argument("--tpm", type=int, help="the upstreams' shared tokens per minute")
    p.add_argument("--max-inflight", type=int, help="requests in flight at once (all upstreams)")
    p.add_argument(
        "--key",
        action="append",
        default=[],
        metavar="TENANT=SHA256",
        help="a gateway key's SHA-256 and its tenant (repeatable)",
    )
    p.add_argument(
        "--no-auth",
        action="store_true",
        help="accept requests without a key (the default tenant pays)",
    )
    p.add_argument("--host", help="listen address (default 127.0.0.1)")
    p.add_argument("--port", type=int, help="listen port (default 8080)")
    p.add_argument(
        "--state", metavar="URL", help="redis://... shared by the replicas (budgets, usage, health)"
    )
    p.add_argument(
        "--grace",
        type=float,
        metavar="S",
        help="on SIGTERM, seconds in-flight requests may finish (default 30)",
    )
    p.add_argument("--preset", choices=sorted(PRESETS), help="the scheduling preset")
    p.add_argument("--priors", choices=PRIOR_CHOICES, help="prior source (default heuristic)")
    p.add_argument("--log-level", default="info",
                   choices=("critical", "error", "warning", "info", "debug"),
                   help="the gateway's and uvicorn's log level (default info)")  # fmt: skip
    p.add_argument("--access-log", action="store_true",
                   help="log one line per request: route, status, tenant, class, time queued "
                   "and in all, request id (never a key or a prompt)")  # fmt: skip
    return p  # fmt: skip


def _keys(data: dict[str, Any], keys: Sequence[str]) -> None:
    """Put ``--key TENANT=SHA256`` into ``data``'s ``[[tenant]]`` tables."""
    tables: list[dict[str, Any]] = data.setdefault("tenant", [])
    for item in keys:
        tenant, eq, digest = item.partition("=")
        if not eq or not tenant.strip():
            raise GatewayConfigError(f"--key: {tenant or '?'}=... must be TENANT=SHA256")
        table = next((t for t in tables if t.get("name") == tenant.strip()), None)
        if table is None:
            table = {"name": tenant.strip()}
            tables.append(table)
        hashes = table.get("key_sha256", [])
        table["key_sha256"] = [*([hashes] if isinstance(hashes, str) else hashes), digest.strip()]


def build_config(args: argparse.Namespace, *, demo_upstream: str | None = None) -> GatewayConfig:
    """The configuration the flags (and file) describe.

    Raises:
        GatewayConfigError, FleetFileError: Unusable; the message names the culprit.
    """
    overrides: dict[str, Any] = {
        "host": args.host, "port": args.port, "state": args.state, "grace_s": args.grace,
        "max_inflight": args.max_inflight, "preset": args.preset, "priors": args.priors,
    }  # fmt: skip
    if args.no_auth:
        overrides["auth"] = False
    if args.config is not None:
        data: dict[str, Any] = read_toml(args.config)
        where = args.config
    else:
        url = demo_upstream if args.demo else args.upstream
        endpoint: dict[str, Any] = {"name": "demo" if args.demo else "upstream", "base_url": url}
        if args.upstream_key_env:
            endpoint["key_env"] = args.upstream_key_env
        data, where = {"endpoint": [endpoint]}, "flags"
        if args.demo:
            data["tenant"] = [{"name": t, "key_sha256": [key_hash(k)]} for k, t in _demo_keys()]
            data["gateway"] = {"models": ["mock-1"]}
    if args.rpm is not None or args.tpm is not None:
        budget = dict(data.get("budget") or {})
        budget.update({k: v for k, v in (("rpm", args.rpm), ("tpm", args.tpm)) if v is not None})
        data["budget"] = budget
    _keys(data, args.key)
    return config_from_dict(data, where=where, **overrides)


def _demo_keys() -> list[tuple[str, str]]:
    from semisched.gateway.server import DEMO_KEYS

    return list(DEMO_KEYS.items())


def _banner(config: GatewayConfig, demo: bool, out: TextIO) -> None:
    url = f"http://{config.host}:{config.port}/v1"
    print(f"semisched gateway on {url} -> {', '.join(d.base_url for d in config.fleet.endpoints)}",
          file=out, flush=True)  # fmt: skip
    if demo:
        print("demo keys: sk-demo-alice (tenant alice), sk-demo-bob (tenant bob); try:\n"
              f"  curl -s {url}/chat/completions -H 'authorization: Bearer sk-demo-alice' "
              "-H 'content-type: application/json' -H 'x-semisched-deadline: 30' "
              "-d '{\"model\": \"mock-1\", \"messages\": [{\"role\": \"user\", \"content\": "
              "\"hi\"}], \"max_tokens\": 20}'", file=out, flush=True)  # fmt: skip


def main(argv: Sequence[str], *, environ: Mapping[str, str] | None = None) -> int:
    """Run ``semisched serve`` with ``argv`` (after ``serve``); the exit status."""
    args = parser().parse_args(list(argv))
    try:
        with needs("semisched serve", extra="gateway"):
            from semisched.gateway.app import upstream_keys
            from semisched.gateway.server import demo_mock_app, run
    except MissingDependency as exc:
        print(f"semisched serve: {exc}", file=sys.stderr)
        return 2
    mock = None
    try:
        if args.demo:
            from mockprovider.launch import free_port

            port = free_port()
            mock = (demo_mock_app(), port)
            config = build_config(args, demo_upstream=f"http://127.0.0.1:{port}/v1")
        else:
            config = build_config(args)
        upstream_keys(config, environ)  # a missing variable: one clear line, before serving
    except (GatewayConfigError, FleetFileError) as exc:
        print(f"semisched serve: {exc}", file=sys.stderr)
        return 2
    run(config, log_level=args.log_level, mock=mock, access_log=args.access_log,
        started=lambda: _banner(config, args.demo, sys.stdout))  # fmt: skip
    return 0
