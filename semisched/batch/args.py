"""The ``semisched batch`` command's arguments: the parser and the job they ask for.

`parser` builds the ``semisched`` parser (``batch``, with ``plan`` and
``serve`` listed for ``--help``; `semisched.command` hands those over
before it is built); `batch_options` turns parsed arguments into
`BatchOptions`, with the base URL chosen as the
``openai`` client chooses it (`base_url`).

What this module is not: it runs nothing (`semisched.batch.cli`).
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path

from semisched.batch.auth import AUTH_FAILURES
from semisched.batch.options import BatchOptions
from semisched.batch.tenants import parse_tenant_option, tenant_config
from semisched.batch.tier_args import add_tier_args, tier_options
from semisched.command import version
from semisched.core.config import PRESETS, ROUTING_POLICY_NAMES, RoutingConfig
from semisched.core.tenants.config import TENANT_POLICY_NAMES, TenantSpec
from semisched.fleet.fleetfile import EndpointDef, FleetFileError, load_fleet, parse_endpoint_option

__all__ = ["BASE_URL_ENV", "DEFAULT_BASE_URL", "base_url", "batch_options", "parser"]

#: The variable the ``openai`` client reads its base URL from.
BASE_URL_ENV = "OPENAI_BASE_URL"
#: The ``openai`` client's base URL when neither the argument nor the variable names one.
DEFAULT_BASE_URL = "https://api.openai.com/v1"


def base_url(flag: str | None, environ: Mapping[str, str] | None = None) -> str:
    """The one endpoint's base URL: ``--base-url``, else ``OPENAI_BASE_URL``, else OpenAI's."""
    if flag:
        return flag
    env = os.environ if environ is None else environ
    return env.get(BASE_URL_ENV) or DEFAULT_BASE_URL


def parser() -> argparse.ArgumentParser:
    """The ``semisched`` command's parser (``plan`` and ``serve`` listed for ``--help``)."""
    parser = argparse.ArgumentParser(
        prog="semisched", description="Client-side scheduling for OpenAI-compatible LLM APIs."
    )
    parser.add_argument("--version", action="version", version=f"semisched {version()}")
    sub = parser.add_subparsers(dest="command", required=True)
    batch = sub.add_parser(
        "batch",
        help="run an OpenAI Batch API JSONL file through the scheduler",
        description=(
            "Send every request of an OpenAI Batch API input file through the scheduler and "
            "append each result to OUTPUT as it completes. Rerunning with the same OUTPUT "
            "skips what is already answered. API keys are read from the environment only. "
            "Exit status: 0 all succeeded; 1 some failed; 2 the job could not start, or its API "
            f"key was refused ({AUTH_FAILURES} 401/403 answers in a row, no success: the rest "
            "is left unsent and unrecorded, so a rerun with the right key resumes); 130 "
            "interrupted."
        ),
    )
    _add_files(batch)
    _add_budgets(batch)
    _add_tenants(batch)
    add_tier_args(batch)
    _add_run_control(batch)
    # Listed for --help; semisched.command hands `plan ...` and `serve ...` over first.
    sub.add_parser(
        "plan",
        help="capacity planning: units for a workload's SLOs, one pool or two "
        "(semisched plan --help)",
        add_help=False,
    )
    sub.add_parser(
        "serve",
        help="an OpenAI-compatible scheduling gateway (semisched serve --help)",
        add_help=False,
    )
    return parser


def _endpoint_arg(text: str) -> EndpointDef:
    """``--endpoint``'s value (argparse reports the message of a bad one)."""
    try:
        return parse_endpoint_option(text)
    except FleetFileError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _add_files(batch: argparse.ArgumentParser) -> None:
    """Where requests come from, where results go, and the endpoints."""
    batch.add_argument("input", type=Path, help="Batch API input file (JSONL)")
    batch.add_argument("-o", "--output", type=Path, required=True, help="results file (JSONL)")
    target = batch.add_mutually_exclusive_group()
    target.add_argument(
        "--base-url",
        metavar="URL",
        help=f"OpenAI-compatible base URL (…/v1): one endpoint (default: ${BASE_URL_ENV} "
        f"if set, as the openai client reads it, else {DEFAULT_BASE_URL})",
    )
    target.add_argument(
        "--endpoint",
        action="append",
        type=_endpoint_arg,
        dest="endpoints",
        metavar="NAME=URL[,key-env=VAR]",
        help="one endpoint of a fleet (repeat for each); also ,rpm=N ,tpm=N "
        ",max-concurrency=N ,weight=X ,pool=short|long ,context-tokens=N",
    )
    target.add_argument(
        "--fleet",
        type=Path,
        metavar="FILE",
        help="the fleet's endpoints and routing in a TOML file (see semisched.fleet.fleetfile)",
    )
    batch.add_argument(
        "--api-key-env",
        default="OPENAI_API_KEY",
        metavar="VAR",
        help="environment variable holding the API key (default OPENAI_API_KEY); with a "
        "fleet, of every endpoint that names none",
    )
    batch.add_argument(
        "--routing",
        choices=ROUTING_POLICY_NAMES,
        metavar="POLICY",
        help="which endpoint takes each request: "
        f"{', '.join(ROUTING_POLICY_NAMES)} (default: the fleet file's, else anticipated_load)",
    )
    batch.add_argument(
        "--state",
        metavar="URL",
        help="share the budgets with every runner in --namespace through this Redis "
        "(redis://HOST:PORT/DB): several runners, one key, no 429 storm",
    )
    batch.add_argument(
        "--namespace",
        default="semisched",
        help="the shared state's key namespace (default semisched)",
    )
    batch.add_argument("--model", help="model for lines whose body names none")


def _add_budgets(batch: argparse.ArgumentParser) -> None:
    """Concurrency, rate budgets, the deadline and the scheduling preset."""
    batch.add_argument(
        "--max-concurrency", type=int, default=32, metavar="N", help="calls in flight (32)"
    )
    batch.add_argument("--rpm", type=int, help="requests per minute budget")
    batch.add_argument(
        "--tpm", type=int, help="tokens per minute budget (prompt estimate + max_tokens)"
    )
    batch.add_argument(
        "--budget-margin",
        type=float,
        metavar="SECONDS",
        help="how much longer than its minute a budget charge counts: the allowance for "
        "network transit (default 1)",
    )
    batch.add_argument(
        "--deadline",
        type=float,
        metavar="SECONDS",
        help="finish the job within this time: every line's deadline, in seconds from the "
        "job's start (a line's own body.metadata.deadline_s may be earlier)",
    )
    batch.add_argument(
        "--policy",
        default="batch_packing",
        choices=sorted(PRESETS),
        help="scheduling preset (default batch_packing: under --rpm/--tpm keeps both rate "
        "windows busy, longest work first, sheds nothing; batch_makespan: longest predicted "
        "work first; adaptive_drr: the online two-class default)",
    )


def _tenant_arg(text: str) -> TenantSpec:
    """``--tenant``'s value (argparse reports the message of a bad one)."""
    try:
        return parse_tenant_option(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _add_tenants(batch: argparse.ArgumentParser) -> None:
    """Who shares the job: each line names its tenant in body.metadata.tenant."""
    batch.add_argument(
        "--tenant",
        action="append",
        type=_tenant_arg,
        dest="tenants",
        metavar="NAME[,weight=W]",
        help="declare a tenant (repeat for each); also ,service=guaranteed|elastic|best_effort "
        ",rpm=N ,tpm=N ,max-concurrency=N. A line names its own in body.metadata.tenant",
    )
    batch.add_argument(
        "--tenant-policy",
        choices=TENANT_POLICY_NAMES,
        help="which tenant sends next: fair_share (the default), fifo or static_quota",
    )
    batch.add_argument(
        "--default-tenant", metavar="NAME", help="the tenant of lines that name none"
    )


def _port(text: str) -> int:
    """``--metrics-port``'s value: a TCP port, 1 to 65535."""
    if not text.isdigit() or not 1 <= int(text) <= 65535:
        raise argparse.ArgumentTypeError(f"{text!r} is not a TCP port (1 to 65535)")
    return int(text)


def _add_run_control(batch: argparse.ArgumentParser) -> None:
    """Invalid lines, retries of failures, priors, stopping and progress."""
    batch.add_argument(
        "--skip-invalid",
        action="store_true",
        help="record invalid lines as errors in the output and send the rest (a repeated "
        "custom_id's record names its line, so each custom_id keeps its first line's record)",
    )
    batch.add_argument(
        "--retry-failed",
        action="store_true",
        help="drop the error records of an earlier run from OUTPUT and send those again",
    )
    batch.add_argument(
        "--priors",
        default="auto",
        choices=("auto", "learned", "heuristic"),
        help="output-length priors: the learned model if installed (auto), or max_tokens",
    )
    batch.add_argument(
        "--grace",
        type=float,
        default=10.0,
        metavar="SECONDS",
        help="on Ctrl-C, wait this long for calls in flight (10)",
    )
    batch.add_argument(
        "--progress-every",
        type=float,
        default=10.0,
        metavar="SECONDS",
        help="seconds between progress lines when not on a terminal (10)",
    )
    batch.add_argument(
        "--dry-run",
        action="store_true",
        help="validate the input and read OUTPUT exactly as a run would, print the makespan "
        "floor (its requests, tokens and serving bounds) and send nothing",
    )
    batch.add_argument(
        "--metrics-port",
        type=_port,
        metavar="PORT",
        help="serve the job's Prometheus metrics on http://127.0.0.1:PORT/metrics while it runs",
    )
    batch.add_argument(
        "--time-scale",
        type=float,
        default=1.0,
        metavar="FACTOR",
        help="how many times faster than real time the provider's rate windows run, so the "
        "budget's minute matches the provider's: 1 (the default) for a real provider; for a "
        "compressed-time mock (python -m mockprovider --time-scale N) pass the same N",
    )


def _fleet(args: argparse.Namespace) -> tuple[tuple[EndpointDef, ...], RoutingConfig | None]:
    """The endpoints and routing the arguments ask for (``()`` with ``--base-url``).

    Raises:
        FleetFileError: The fleet file is unreadable or wrong (two ``--endpoint``
            options with one name are `BatchOptions`' to refuse).
    """
    routing: RoutingConfig | None = None
    endpoints: tuple[EndpointDef, ...] = tuple(args.endpoints or ())
    if args.fleet is not None:
        fleet = load_fleet(args.fleet)
        endpoints, routing = fleet.endpoints, fleet.routing
    if args.routing is not None:  # overrides the file's policy, keeps its options
        routing = replace(routing or RoutingConfig(), policy=args.routing)
    return endpoints, routing


def batch_options(
    args: argparse.Namespace, environ: Mapping[str, str] | None = None
) -> BatchOptions:
    """The job the arguments ask for (raises ``ValueError`` naming a bad one).

    The one endpoint's base URL is ``--base-url``, else ``OPENAI_BASE_URL`` from
    ``environ`` (default ``os.environ``), else `DEFAULT_BASE_URL`, as the
    ``openai`` client chooses it; a fleet (``--endpoint``, ``--fleet``) ignores both.
    """
    endpoints, routing = _fleet(args)
    return BatchOptions(
        input=args.input,
        output=args.output,
        base_url=None if endpoints else base_url(args.base_url, environ),
        endpoints=endpoints,
        routing=routing,
        tenants=tenant_config(
            args.tenants or (), policy=args.tenant_policy, default=args.default_tenant
        ),
        state=args.state,
        namespace=args.namespace,
        api_key_env=args.api_key_env,
        model=args.model,
        max_concurrency=args.max_concurrency,
        rpm=args.rpm,
        tpm=args.tpm,
        deadline_s=args.deadline,
        policy=args.policy,
        skip_invalid=args.skip_invalid,
        retry_failed=args.retry_failed,
        priors=args.priors,
        time_scale=args.time_scale,
        grace_s=args.grace,
        budget_margin_s=args.budget_margin,
        **tier_options(args),
    )
