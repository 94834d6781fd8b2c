"""Tiny models for fast tests: a config factory and random Hugging Face Llama/Qwen2 models."""

from __future__ import annotations

from typing import Any

import torch

from kvcourse.kernels import Transformer
from kvcourse.kernels.model.config import ModelConfig

TINY_DEFAULTS: dict[str, Any] = dict(
    vocab_size=96,
    hidden_size=32,
    intermediate_size=64,
    num_layers=2,
    num_heads=4,
    num_kv_heads=2,
    head_dim=None,
    rope_theta=10000.0,
    rms_norm_eps=1e-5,
    max_position_embeddings=128,
    tie_word_embeddings=False,
    attention_bias=False,
)


def make_config(**overrides: Any) -> ModelConfig:
    """A tiny valid ModelConfig (2 layers, 4 query heads, 2 KV heads of 8); override any field."""
    return ModelConfig(**{**TINY_DEFAULTS, **overrides})


def hf_config_for(config: ModelConfig, arch: str = "llama", initializer_range: float = 0.3):
    """The transformers config equivalent to a ModelConfig ("llama" or "qwen2" architecture)."""
    from transformers import LlamaConfig, Qwen2Config

    common = dict(
        vocab_size=config.vocab_size,
        hidden_size=config.hidden_size,
        intermediate_size=config.intermediate_size,
        num_hidden_layers=config.num_layers,
        num_attention_heads=config.num_heads,
        num_key_value_heads=config.num_kv_heads,
        head_dim=config.head_dim,
        rms_norm_eps=config.rms_norm_eps,
        max_position_embeddings=config.max_position_embeddings,
        tie_word_embeddings=config.tie_word_embeddings,
        rope_parameters={"rope_type": "default", "rope_theta": config.rope_theta},
        initializer_range=initializer_range,
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=0,
    )
    if arch == "llama":
        return LlamaConfig(**common, attention_bias=config.attention_bias)
    if arch == "qwen2":
        return Qwen2Config(**common)
    raise ValueError(f"arch must be 'llama' or 'qwen2', got {arch!r}")


def make_tiny_hf_llama(
    arch: str = "llama",
    seed: int = 0,
    dtype: torch.dtype = torch.float32,
    initializer_range: float = 0.3,
    **overrides: Any,
):
    """A random LlamaForCausalLM (or Qwen2ForCausalLM with arch="qwen2") built from make_config(**overrides).

    The seed is fixed so every test sees the same weights; the wider-than-default init keeps
    the logits well separated, so greedy argmax never hangs on a near tie.
    """
    from transformers import LlamaForCausalLM, Qwen2ForCausalLM

    if arch == "qwen2":
        overrides.setdefault("attention_bias", True)
    config = make_config(**overrides)
    hf_config = hf_config_for(config, arch, initializer_range)
    cls = LlamaForCausalLM if arch == "llama" else Qwen2ForCausalLM
    torch.manual_seed(seed)
    model = cls(hf_config)
    if arch == "qwen2" or config.attention_bias:
        # HF initialises biases to zero; random biases make the test actually check them.
        with torch.no_grad():
            for name, param in model.named_parameters():
                if name.endswith("proj.bias"):
                    param.normal_(0.0, initializer_range)
    return model.to(dtype).eval()


def make_tiny_model(
    fast_paths: str | None = None, arch: str = "llama", dtype: torch.dtype = torch.float32, **overrides: Any
) -> Transformer:
    """Our Transformer converted from make_tiny_hf_llama(arch, dtype=dtype, **overrides); the textbook model,
    or accelerated with ``fast_paths`` ("auto" or "off") where a test compares the two."""
    model = Transformer.from_hf(make_tiny_hf_llama(arch, dtype=dtype, **overrides))
    return model if fast_paths is None else model.accelerate(fast_paths)


def serve_beside_replay(trace, num_blocks: int, block_size: int, policy_class=None):
    """LLMEngine on a tiny model, each request added at its arrival step and run to its drawn length, stepped
    beside a PagingReplay of the same trace; both with a fresh ``policy_class()`` where one is given (lab C).
    Yields (engine, replay, {engine request id: trace index}) after every step."""
    from kvcourse.kernels import EngineConfig, LLMEngine, PagingReplay, SamplingParams

    model = make_tiny_model(max_position_embeddings=512)
    engine = LLMEngine(
        model,
        EngineConfig(
            block_size=block_size,
            num_blocks=num_blocks,
            max_num_seqs=1000,
            max_num_batched_tokens=100_000,
            max_model_len=512,
        ),
        scheduling_policy=policy_class() if policy_class else None,
    )
    replay = PagingReplay(trace, num_blocks, block_size, policy_class() if policy_class else None)
    generator = torch.Generator().manual_seed(0)
    pending, request_of = list(range(len(trace))), {}
    while not replay.done:
        while pending and trace[pending[0]].arrival_step <= replay.step_index:
            index = pending.pop(0)
            ids = torch.randint(3, 96, (trace[index].num_prompt_tokens,), generator=generator).tolist()
            params = SamplingParams(max_new_tokens=trace[index].num_output_tokens, stop_on_eos=False)
            request_of[engine.add_request(ids, params)] = index
        replay.step()
        engine.step()
        yield engine, replay, request_of


def run_chunks(model: Transformer, backend: Any, ids: torch.Tensor, chunks: list[tuple[int, int]]) -> torch.Tensor:
    """Feed ``ids`` to ``model`` through a sequence cache in ``chunks`` ((start, end) pairs, in order); all logits."""
    from kvcourse.kernels.attention.backend import StepMetadata

    outs = []
    with torch.no_grad():
        for start, end in chunks:
            backend.begin_step(StepMetadata(start, end - start))
            outs.append(model(ids[start:end], torch.arange(start, end), backend))
            backend.end_step()
    return torch.cat(outs)
