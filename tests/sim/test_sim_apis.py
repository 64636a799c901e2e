"""The simulator runs every scheduled API's shape: an embedding is a prefill and no output."""

from __future__ import annotations

from mockprovider.physics import profile
from semisched.core import Prior, Request, preset
from semisched.sim.simulator import SimJob, simulate


def _embedding(i: int, tokens: int) -> SimJob:
    request = Request(id=f"e{i}", klass="batch", prior=Prior(p50=1, p90=1),
                      input_tokens=float(tokens), arrival=0.1 * i, max_output_tokens=0)  # fmt: skip
    return SimJob(request=request, output_tokens=0, input_tokens=tokens)


def _chat(i: int) -> SimJob:
    request = Request(id=f"c{i}", klass="interactive", prior=Prior(p50=100, p90=200),
                      input_tokens=50.0, arrival=0.1 * i)  # fmt: skip
    return SimJob(request=request, output_tokens=120, input_tokens=50)


def test_embeddings_beside_chat_complete_with_no_first_token_and_no_output() -> None:
    jobs = [_embedding(i, 500) for i in range(40)] + [_chat(i) for i in range(40)]
    result = simulate(jobs, preset("final_adrr_olc"), profile("default"))
    rows = {row.id: row for row in result.rows}
    assert all(row.outcome == "completed" for row in rows.values())
    embedded = [rows[f"e{i}"] for i in range(40)]
    chatted = [rows[f"c{i}"] for i in range(40)]
    assert all(row.output_tokens == 0 for row in embedded)
    # a prefill of 500 tokens ends far sooner than 120 decode steps after it
    prefill = max(r.end - r.first_send for r in embedded)  # type: ignore[operator]
    decode = min(r.end - r.first_send for r in chatted)  # type: ignore[operator]
    assert prefill < decode
