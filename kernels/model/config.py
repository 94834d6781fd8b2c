"""The shape of a Llama-family decoder as one validated, frozen dataclass (lessons 01 and 07)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from kvcourse.kernels.checks import check_positive_int


def _check_positive_float(name: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{name} must be a positive number, got {value!r}")
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"{name} must be a positive finite number, got {value}")


@dataclass(frozen=True)
class ModelConfig:
    """Sizes of a Llama/Qwen2-style decoder; every byte and FLOP count derives from these (lesson 07).

    ``head_dim`` mirrors Hugging Face: when left as None it becomes hidden_size // num_heads,
    and then num_heads must divide hidden_size. Some models (e.g. Gemma) set it explicitly.
    ``attention_bias`` adds biases to the q, k and v projections (Qwen2 does this);
    ``attention_out_bias`` adds one to the output projection as well (Llama's attention_bias=True).
    """

    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    # None only as the constructor's default: __post_init__ puts hidden_size // num_heads in its place, so
    # every read of a built config is an int.
    head_dim: int = None  # type: ignore[assignment]  # see above
    rope_theta: float = 10000.0
    rms_norm_eps: float = 1e-5
    max_position_embeddings: int = 2048
    tie_word_embeddings: bool = False
    attention_bias: bool = False
    attention_out_bias: bool = False
    # The tokens that end an answer; not part of the shape, so equal shapes compare equal.
    eos_token_ids: tuple[int, ...] = field(default=(), compare=False)

    def __post_init__(self) -> None:
        for name in (
            "vocab_size",
            "hidden_size",
            "intermediate_size",
            "num_layers",
            "num_heads",
            "num_kv_heads",
            "max_position_embeddings",
        ):
            check_positive_int(name, getattr(self, name))
        _check_positive_float("rope_theta", self.rope_theta)
        _check_positive_float("rms_norm_eps", self.rms_norm_eps)
        if self.num_heads % self.num_kv_heads != 0:
            raise ValueError(
                f"num_heads ({self.num_heads}) must be a multiple of num_kv_heads ({self.num_kv_heads}): "
                "in grouped-query attention each KV head serves the same number of query heads"
            )
        if self.head_dim is None:
            if self.hidden_size % self.num_heads != 0:
                raise ValueError(
                    f"num_heads ({self.num_heads}) does not divide hidden_size ({self.hidden_size}); "
                    "give head_dim explicitly if the model really uses a different head size"
                )
            object.__setattr__(self, "head_dim", self.hidden_size // self.num_heads)
        check_positive_int("head_dim", self.head_dim)
        for name in ("tie_word_embeddings", "attention_bias", "attention_out_bias"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name} must be a bool, got {getattr(self, name)!r}")
        if not isinstance(self.eos_token_ids, tuple) or not all(
            isinstance(t, int) and not isinstance(t, bool) and t >= 0 for t in self.eos_token_ids
        ):
            raise ValueError(f"eos_token_ids must be a tuple of token ids, got {self.eos_token_ids!r}")

    @property
    def num_queries_per_kv(self) -> int:
        """How many query heads share one KV head (1 = MHA, num_heads = MQA)."""
        return self.num_heads // self.num_kv_heads

    @property
    def q_size(self) -> int:
        return self.num_heads * self.head_dim

    @property
    def kv_size(self) -> int:
        return self.num_kv_heads * self.head_dim

    @classmethod
    def from_hf(cls, hf_config: Any) -> ModelConfig:
        """Read a transformers LlamaConfig / Qwen2Config (or any look-alike) into a ModelConfig."""
        model_type = getattr(hf_config, "model_type", "llama")
        if getattr(hf_config, "mlp_bias", False):
            raise ValueError("mlp_bias=True is not supported by this engine (no Llama/Qwen2 checkpoint uses it)")
        act = getattr(hf_config, "hidden_act", "silu")
        if act != "silu":
            raise ValueError(f"only the SwiGLU MLP (hidden_act='silu') is supported, got {act!r}")
        if getattr(hf_config, "use_sliding_window", False):
            raise ValueError(
                "this checkpoint uses sliding-window attention in some layers; "
                "from_hf supports full attention only (use generate(cache='sliding') to try a window)"
            )
        rope = getattr(hf_config, "rope_parameters", None) or {}
        rope_type = rope.get("rope_type", rope.get("type", "default"))
        if rope_type != "default":
            raise ValueError(f"rope_type {rope_type!r} is not supported; only the plain RoPE ('default')")
        rope_theta = rope.get("rope_theta", getattr(hf_config, "rope_theta", 10000.0))
        num_heads = hf_config.num_attention_heads
        num_kv_heads = getattr(hf_config, "num_key_value_heads", None) or num_heads
        head_dim: Any = getattr(hf_config, "head_dim", None)  # None too: __post_init__ resolves and checks it
        llama_bias = bool(getattr(hf_config, "attention_bias", False))
        qkv_bias = True if model_type == "qwen2" else llama_bias
        eos = getattr(hf_config, "eos_token_id", None)
        eos_ids = () if eos is None else (int(eos),) if isinstance(eos, int) else tuple(int(t) for t in eos)
        return cls(
            vocab_size=hf_config.vocab_size,
            hidden_size=hf_config.hidden_size,
            intermediate_size=hf_config.intermediate_size,
            num_layers=hf_config.num_hidden_layers,
            num_heads=num_heads,
            num_kv_heads=num_kv_heads,
            head_dim=head_dim,
            rope_theta=float(rope_theta),
            rms_norm_eps=float(hf_config.rms_norm_eps),
            max_position_embeddings=hf_config.max_position_embeddings,
            tie_word_embeddings=bool(getattr(hf_config, "tie_word_embeddings", False)),
            attention_bias=qkv_bias,
            attention_out_bias=llama_bias and model_type != "qwen2",
            eos_token_ids=eos_ids,
        )
