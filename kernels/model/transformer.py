"""A Llama-family decoder written from scratch, on a flat batch of tokens (lessons 01-06).

RMSNorm -> grouped-query attention with RoPE -> residual -> RMSNorm -> SwiGLU MLP -> residual,
num_layers times, then a final RMSNorm and the lm_head. The attention layer hands q, k, v
to an AttentionBackend, which owns the KV storage (see backend.py). Every module here is the
textbook form (layers.py); ``accelerate()`` swaps in the CPU fast paths (cpu_fast.py).
"""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING, Any

import torch
import torch.nn.functional as F
from torch import nn

from kvcourse.kernels.model import cpu_fast
from kvcourse.kernels.model.config import ModelConfig
from kvcourse.kernels.model.hf import copy_hf_weights, hf_model_config
from kvcourse.kernels.model.layers import Linear, RMSNorm, RotaryEmbedding, RotationForm

if TYPE_CHECKING:  # the model only calls a backend; attention is the layer above it
    from kvcourse.kernels.attention.backend import AttentionBackend


class Attention(nn.Module):
    """q, k, v from one fused projection; RoPE; backend attention; output projection (lesson 04)."""

    def __init__(self, config: ModelConfig, layer_idx: int) -> None:
        super().__init__()
        self.layer_idx = layer_idx
        self.num_heads, self.num_kv_heads, self.head_dim = config.num_heads, config.num_kv_heads, config.head_dim
        self.q_size, self.kv_size = config.q_size, config.kv_size
        # One matmul instead of three: the weights are [W_q; W_k; W_v] stacked by rows.
        self.qkv_proj = Linear(config.hidden_size, self.q_size + 2 * self.kv_size, bias=config.attention_bias)
        self.o_proj = Linear(self.q_size, config.hidden_size, bias=config.attention_out_bias)

    def forward(self, x: torch.Tensor, rope: RotationForm, backend: AttentionBackend) -> torch.Tensor:
        """Attention of the normalised ``x`` (T, hidden) -> (T, hidden)."""
        num_tokens = x.shape[0]
        qkv = self.qkv_proj(x)  # (T, q_size + 2 * kv_size)
        qk = qkv[:, : self.q_size + self.kv_size].view(
            num_tokens, self.num_heads + self.num_kv_heads, self.head_dim
        )  # (T, H + Hkv, D)
        qk = rope(qk)  # q and k rotated in one call: the same turn for every head at a position
        q = qk[:, : self.num_heads]  # (T, H, D)
        k = qk[:, self.num_heads :]  # (T, Hkv, D)
        v = qkv[:, self.q_size + self.kv_size :].view(num_tokens, self.num_kv_heads, self.head_dim)  # (T, Hkv, D)
        out = backend.attend(self.layer_idx, q, k, v)  # (T, H, D)
        return self.o_proj(out.reshape(num_tokens, self.q_size))  # (T, H * D) -> (T, hidden)


class MLP(nn.Module):
    """SwiGLU: down(silu(gate(x)) * up(x)), with gate and up fused into one matmul."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.intermediate_size = config.intermediate_size
        self.gate_up_proj = Linear(config.hidden_size, 2 * config.intermediate_size)
        self.down_proj = Linear(config.intermediate_size, config.hidden_size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """SwiGLU of the normalised ``x`` (T, hidden) -> (T, hidden)."""
        gate_up = self.gate_up_proj(x)  # (T, 2 * intermediate)
        gate, up = gate_up[:, : self.intermediate_size], gate_up[:, self.intermediate_size :]  # (T, intermediate) each
        return self.down_proj(F.silu(gate) * up)  # (T, hidden)


class DecoderLayer(nn.Module):
    """One pre-norm transformer block."""

    def __init__(self, config: ModelConfig, layer_idx: int) -> None:
        super().__init__()
        self.input_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.self_attn = Attention(config, layer_idx)
        self.post_attention_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.mlp = MLP(config)

    def forward(self, x: torch.Tensor, rope: RotationForm, backend: AttentionBackend) -> torch.Tensor:
        x = x + self.self_attn(self.input_layernorm(x), rope, backend)  # the residual stream, (T, hidden)
        return x + self.mlp(self.post_attention_layernorm(x))


class Transformer(nn.Module):
    """The from-scratch decoder: forward(input_ids (T,), positions (T,), backend) -> logits (lesson 01)."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.config = config
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size)
        self.layers = nn.ModuleList(DecoderLayer(config, i) for i in range(config.num_layers))
        self.norm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.rotary = RotaryEmbedding(config.head_dim, config.max_position_embeddings, config.rope_theta)
        self.lm_head = Linear(config.hidden_size, config.vocab_size)
        if config.tie_word_embeddings:
            self.lm_head.weight = self.embed_tokens.weight
        self.fast_paths: tuple[cpu_fast.FastPath, ...] = ()  # none until accelerate()
        if not self.embed_tokens.weight.is_meta:
            self.reset_parameters()

    def reset_parameters(self, std: float = 0.02, generator: torch.Generator | None = None) -> None:
        """Random weights N(0, std), unit norms, zero biases: a fresh untrained model. Drawn from ``generator``
        where given (the same weights whatever else the process draws, in any thread), else torch's global one."""
        with torch.no_grad():
            for name, param in self.named_parameters():
                if name.endswith("layernorm.weight") or name == "norm.weight":
                    param.fill_(1.0)
                elif name.endswith("bias"):
                    param.zero_()
                else:
                    param.normal_(0.0, std, generator=generator)

    @property
    def dtype(self) -> torch.dtype:
        return self.embed_tokens.weight.dtype

    @property
    def device(self) -> torch.device:
        return self.embed_tokens.weight.device

    def forward(
        self,
        input_ids: torch.Tensor,
        positions: torch.Tensor,
        backend: AttentionBackend,
        logits_index: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Logits (len(logits_index), vocab), or (T, vocab) when logits_index is None."""
        if input_ids.dim() != 1 or positions.shape != input_ids.shape:
            raise ValueError(
                f"input_ids and positions must both be 1-D of equal length (a flat batch), "
                f"got {tuple(input_ids.shape)} and {tuple(positions.shape)}"
            )
        x = self.embed_tokens(input_ids)  # (T, hidden)
        rope = self.rotary.at(positions, x.dtype)  # built once, used by every layer
        for layer in self.layers:
            x = layer(x, rope, backend)
        if logits_index is not None:
            x = x[logits_index]  # only the rows whose next token we need: the lm_head is the biggest matmul
        return self.lm_head(self.norm(x))  # (len(logits_index) or T, vocab)

    def accelerate(self, fast_paths: str = "auto") -> Transformer:
        """Swap in the CPU fast paths this machine can run ("auto"), or the textbook forms ("off"); returns self.

        The fast twins (cpu_fast.py) share these modules' weights and are tested equal to them;
        ``KVCOURSE_FAST_PATHS=0`` makes "auto" mean "off". ``self.fast_paths`` says what is on, and why.
        """
        self.fast_paths = cpu_fast.accelerate(self, fast_paths)
        return self

    def accelerated(self, fast_paths: str = "auto") -> Transformer:
        """A twin of this model with ``fast_paths`` set, and this model left exactly as it is.

        The twin has its own modules but the same weight tensors (no copy of the weights is made),
        so an engine that sets its fast paths never changes the model it was given (lesson 08).
        """
        twin = _module_twin(self, {})
        return twin.accelerate(fast_paths)

    def weight_bytes_read_per_pass(self) -> int:
        """Bytes of weights one forward pass reads, measured on the tensors (lesson 01).

        Every matrix and norm vector once, the lm_head once; an untied embedding table is only
        gathered row by row, so it is left out (the same convention as costs.weight_bytes_read_per_pass).
        """
        seen: set[int] = set()
        total = 0
        for name, param in self.named_parameters(remove_duplicate=False):
            if id(param) in seen or (name == "embed_tokens.weight" and not self.config.tie_word_embeddings):
                continue
            seen.add(id(param))
            total += param.numel() * param.element_size()
        return total

    @classmethod
    def from_hf(cls, hf_model: Any) -> Transformer:
        """A new Transformer holding a copy of a transformers Llama/Qwen2 model's weights, in the same dtype and
        on the same device, in eval mode (lessons 01, 04); hf.py reads the Hugging Face config and weights."""
        config = hf_model_config(hf_model)
        state = hf_model.state_dict()
        ref = state["model.embed_tokens.weight"]
        with torch.device("meta"):
            model = cls(config)  # no memory yet: the copy below fills every weight
        model = model.to_empty(device=ref.device).to(ref.dtype)
        copy_hf_weights(model, state)
        return model.eval()


def _module_twin(module: nn.Module, made: dict[int, nn.Module]) -> Any:
    """A copy of ``module``'s tree of modules sharing its Parameters and buffers (a module met twice, once)."""
    if id(module) in made:
        return made[id(module)]
    twin = copy.copy(module)  # its settings; the three tables below are its own, so a swap stays in the twin
    made[id(module)] = twin
    twin._parameters = dict(module._parameters)
    twin._buffers = dict(module._buffers)
    twin._modules = {
        name: None if child is None else _module_twin(child, made) for name, child in module._modules.items()
    }
    return twin
