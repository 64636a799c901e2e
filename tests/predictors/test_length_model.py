"""The prompt-tuned length model on small random BERT / DistilBERT backbones (no downloads).

torch and transformers are imported by the ``lm`` fixture, when a test here needs them:
every pytest-xdist worker collects this file, and importing them takes seconds."""

from __future__ import annotations

import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest

from predictors.base import PriorQuery
from predictors.learned import LearnedPrior, load_default


@pytest.fixture(scope="module")
def lm() -> ModuleType:
    """``predictors.length_model`` (skips without torch or transformers)."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    import predictors.length_model

    return predictors.length_model


VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *[f"w{i}" for i in range(95)]]


def _backbone(kind: str) -> Any:
    import torch
    import transformers

    torch.manual_seed(0)
    if kind == "bert":
        cfg = transformers.BertConfig(vocab_size=len(VOCAB), hidden_size=32, num_hidden_layers=2,
                                      num_attention_heads=2, intermediate_size=64)  # fmt: skip
        return transformers.BertModel(cfg)
    cfg = transformers.DistilBertConfig(vocab_size=len(VOCAB), dim=32, n_layers=2, n_heads=2,
                                        hidden_dim=64)  # fmt: skip
    return transformers.DistilBertModel(cfg)


def _tokenizer(folder: Path) -> Any:
    import transformers

    vocab = folder / "vocab.txt"
    vocab.write_text("\n".join(VOCAB) + "\n")
    return transformers.BertTokenizerFast(vocab_file=str(vocab), do_lower_case=True)


@pytest.mark.parametrize("kind", ["bert", "distilbert"])
def test_only_prompt_last_layer_and_head_train(kind: str, lm: ModuleType) -> None:
    model = lm.LengthModel(lm.ModelConfig(soft_prompt_len=4, hidden=16), _backbone(kind))
    trainable = {n for n, p in model.named_parameters() if p.requires_grad}
    assert "soft_prompt" in trainable
    assert any(n.startswith("head.") for n in trainable)
    layers = "encoder.layer" if kind == "bert" else "transformer.layer"
    assert any(f"backbone.{layers}.1." in n for n in trainable)  # the last layer
    assert not any(f"backbone.{layers}.0." in n for n in trainable)  # the others are frozen
    assert not any("embeddings" in n for n in trainable)


@pytest.mark.parametrize("kind", ["bert", "distilbert"])
def test_predicts_ordered_quantiles_and_learns(kind: str, lm: ModuleType) -> None:
    import torch

    pinball_loss = lm.pinball_loss
    model = lm.LengthModel(lm.ModelConfig(soft_prompt_len=4, hidden=16), _backbone(kind))
    ids = torch.randint(5, len(VOCAB), (8, 10))
    ids[:, 0] = 2  # [CLS]
    mask = torch.ones_like(ids)
    prev = lm.prev_features([None, 10, 200, None, 5, 50, None, 1000])
    target = torch.log1p(torch.tensor([10.0, 20, 300, 40, 50, 600, 70, 800]))
    out = model(ids, mask, prev)
    assert out.shape == (8, 2)
    assert bool((out[:, 1] >= out[:, 0]).all())
    opt = torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=1e-2)
    first = pinball_loss(model(ids, mask, prev), target, (0.5, 0.9)).item()
    for _ in range(30):
        loss = pinball_loss(model(ids, mask, prev), target, (0.5, 0.9))
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert loss.item() < first * 0.7


def test_pinball_loss_is_asymmetric(lm: ModuleType) -> None:
    import torch

    target = torch.tensor([1.0])
    under = lm.pinball_loss(torch.tensor([[0.0, 0.0]]), target, (0.5, 0.9)).item()
    over = lm.pinball_loss(torch.tensor([[2.0, 2.0]]), target, (0.5, 0.9)).item()
    assert under > over  # the p90 head pays more for predicting too little


def test_save_and_load_round_trip_over_a_local_backbone(tmp_path: Path, lm: ModuleType) -> None:
    import torch

    backbone_dir = tmp_path / "backbone"
    backbone_dir.mkdir()
    backbone = _backbone("bert")
    backbone.save_pretrained(backbone_dir)
    tokenizer = _tokenizer(backbone_dir)
    tokenizer.save_pretrained(backbone_dir)
    cfg = lm.ModelConfig(backbone=str(backbone_dir), soft_prompt_len=4, hidden=16, max_length=16)
    model = lm.LengthModel.create(cfg)
    with torch.no_grad():
        model.head[2].bias.add_(0.5)  # a change that must survive the round trip
    predictor = lm.LengthPredictor(model, tokenizer)
    texts = ["w1 w2 w3", "w4", "w5 w6 w7 w8 w9 w10 w11"]
    before = predictor.predict(texts, [None, 30, 300])
    predictor.save(tmp_path / "model")
    saved = {p.name for p in (tmp_path / "model").iterdir()}
    assert saved == {"config.json", "trainable.safetensors"}
    loaded = lm.LengthPredictor.from_dir(tmp_path / "model")
    after = loaded.predict(texts, [None, 30, 300])
    np.testing.assert_allclose(before, after, rtol=1e-5)
    assert (after[:, 1] >= after[:, 0]).all()
    # Input order is kept although batches are sorted by length.
    single = loaded.predict([texts[2]], [300])
    np.testing.assert_allclose(single[0], after[2], rtol=1e-4)


class _FakePredictor:
    def __init__(self) -> None:
        self.calls: list[tuple[list[str], list[int | None]]] = []

    def predict(self, texts: list[str], prev: list[int | None]) -> np.ndarray:
        self.calls.append((texts, prev))
        return np.array([[100.0 + i, 50.0] for i in range(len(texts))])


def test_learned_prior_reads_the_last_user_message_and_previous_answer() -> None:
    fake = _FakePredictor()
    source = LearnedPrior(fake)
    queries = [
        PriorQuery(request_id="a", prompt="plain prompt"),
        PriorQuery(
            request_id="b",
            messages=(
                {"role": "user", "content": "first"},
                {"role": "assistant", "content": "an answer"},
                {"role": "user", "content": "second"},
            ),
            previous_output_tokens=42,
        ),
    ]
    priors = source.prior_batch(queries)
    assert fake.calls == [(["plain prompt", "second"], [None, 42])]
    assert [p.p50 for p in priors] == [100.0, 101.0]
    assert all(p.p90 >= p.p50 for p in priors)  # never crossing, even if the model did


def test_without_torch_the_learned_source_says_what_to_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "predictors.length_model", None)
    with pytest.raises(ImportError, match=r"semisched\[ml\]"):
        LearnedPrior.from_dir("anywhere")
    import predictors.learned as learned

    if (learned.DEFAULT_WEIGHTS / "trainable.safetensors").exists():
        with pytest.raises(ImportError, match=r"semisched\[ml\]"):
            load_default()
