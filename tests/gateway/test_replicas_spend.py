"""Two gateway processes share one spend cap through a real Redis: together they spend no
more than the cap plus one request's slack, and the requests past it get an OpenAI-shaped
429 ``spend_cap_exceeded`` naming the cap and its reset, before anything is sent."""

from __future__ import annotations

import signal
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx2
import pytest
from gateway_kit import UPSTREAM_SECRET, mock_app, servers
from test_replicas import redis_url, start_replicas  # noqa: F401 (a fixture)

from semisched import Price
from semisched.gateway.keys import key_hash

pytestmark = pytest.mark.wallclock

PRICE = Price(input=2.0, output=1000.0)
BODY = {"model": "mock-1", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 20}
ONE = PRICE.cost(0, 20)  # a request's output at most: $0.02
CAP = 10 * ONE  # worth ten requests (their prompts make them a little dearer: fewer fit)


def config(tmp_path: Path, upstream: str) -> Path:
    path = tmp_path / "gateway.toml"
    path.write_text(
        f'[[tenant]]\nname = "web"\nkey_sha256 = "{key_hash("sk-test-web")}"\n'
        f'[[spend_cap]]\nusd = {CAP}\nper = "day"\n'
        f'[[endpoint]]\nname = "mock"\nbase_url = "{upstream}"\nkey_env = "UPSTREAM_KEY"\n'
        f"price = {{ input = {PRICE.input}, output = {PRICE.output} }}\n"
    )
    return path


@pytest.mark.slow  # two gateway processes and a Redis
@pytest.mark.timeout(200)
def test_two_replicas_hold_one_spend_cap(tmp_path: Path, redis_url: str) -> None:  # noqa: F811
    with servers() as s:
        app = mock_app(api_key=UPSTREAM_SECRET)
        upstream = s.serve_app(app) + "/v1"
        ports, procs = start_replicas(config(tmp_path, upstream), redis_url)
        try:

            def call(i: int) -> httpx2.Response:
                url = f"http://127.0.0.1:{ports[i % 2]}/v1/chat/completions"
                auth = {"authorization": "Bearer sk-test-web"}
                return httpx2.post(url, json=BODY, timeout=120, headers=auth)

            with ThreadPoolExecutor(16) as pool:
                answers = list(pool.map(call, range(40)))
            status = [httpx2.get(f"http://127.0.0.1:{p}/semisched/status").json() for p in ports]
        finally:
            for proc in procs:
                proc.send_signal(signal.SIGTERM)
            for proc in procs:
                proc.wait(60)
    served = [a.json() for a in answers if a.status_code == 200]
    refused = [a for a in answers if a.status_code != 200]
    spent = sum(PRICE.cost(r["usage"]["prompt_tokens"], r["usage"]["completion_tokens"])
                for r in served)  # fmt: skip
    assert served and refused
    assert spent <= CAP + ONE
    for answer in refused:
        assert answer.status_code == 429
        error = answer.json()["error"]
        assert error["code"] == "spend_cap_exceeded" and "per day for this key" in error["message"]
        assert int(answer.headers["retry-after"]) >= 1
    assert app.state.mock_stats().counters.requests == len(served)  # refused: never sent
    assert sum(doc["spend"]["spent_usd"] for doc in status) == pytest.approx(spent, abs=1e-5)
