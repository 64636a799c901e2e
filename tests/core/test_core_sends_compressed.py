"""Compress-and-route's one send rule: the compressed prompt goes only where the original
cannot (``semisched.core.fleet.routing.sends_compressed``), and routing prefers the short pool
for a borderline request whose compressed prompt fits it."""

from __future__ import annotations

import pytest

from semisched.core.actions import Send
from semisched.core.config import RoutingConfig, SchedulerConfig
from semisched.core.engine import Engine
from semisched.core.fleet.endpoint import EndpointSpec
from semisched.core.fleet.routing import request_total, sends_compressed
from semisched.core.request import Prior, Request


def request(prompt: float, *, compressed: float | None, cap: int | None = 100) -> Request:
    return Request(id="r", klass="batch", prior=Prior(p50=50.0, p90=300.0), input_tokens=prompt,
                   arrival=0.0, max_output_tokens=cap, compressed_tokens=compressed)  # fmt: skip


SHORT = EndpointSpec(name="short", pool="short", context_tokens=1000)
LONG = EndpointSpec(name="long", pool="long", context_tokens=8000)
ANY = EndpointSpec(name="any")  # no declared context


@pytest.mark.parametrize(
    ("req", "endpoint", "compressed"),
    [
        (request(1100, compressed=850), SHORT, True),  # 1200 > 1000: only compressed fits
        (request(1100, compressed=850), LONG, False),  # a spill sends the original
        (request(1100, compressed=850), ANY, False),  # no context declared: the original
        (request(1100, compressed=None), SHORT, False),  # nothing prepared
        (request(850, compressed=800), SHORT, False),  # 950 fits whole: why cut it
        (request(900, compressed=800), SHORT, False),  # 1000 == context: fits whole
        (request(800, compressed=600, cap=None), SHORT, True),  # 800 + p90 300 = 1100
    ],
)  # fmt: skip
def test_the_compressed_prompt_goes_only_where_the_original_cannot(
    req: Request, endpoint: EndpointSpec, compressed: bool
) -> None:
    assert sends_compressed(req, endpoint) is compressed


def test_request_total_reserves_the_cap_else_the_p90() -> None:
    assert request_total(request(1100, compressed=None)) == 1200
    assert request_total(request(1100, compressed=None, cap=None)) == 1400


def sent_to(band: float, req: Request) -> str:
    routing = RoutingConfig(policy="token_budget", short_pool_tokens=1000, compress_band=band)
    engine = Engine(SchedulerConfig(routing=routing), endpoints=[SHORT, LONG])
    (send,) = engine.submit(req, 0.0)
    assert isinstance(send, Send)
    return send.endpoint


def test_a_borderline_request_goes_short_when_its_compressed_prompt_fits() -> None:
    borderline = request(1100, compressed=850)  # 1200 in (1000, 1500]
    assert sent_to(1.5, borderline) == "short"
    assert sent_to(1.1, borderline) == "long"  # 1200 > 1.1 * 1000: outside the band
    assert sent_to(1.5, request(1100, compressed=None)) == "long"  # nothing prepared
    assert sent_to(1.5, request(1100, compressed=950)) == "long"  # 1050 still too big
