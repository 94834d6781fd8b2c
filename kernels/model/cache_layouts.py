"""How published models cache, from their public config.json files (lessons 07, 15, 16; the 2026 part).

Each entry says which config fields it reads; the numbers are those fields, not estimates. The models
of 2023 (``config_table.py``, beside this file) are full attention on every layer, so their layout follows from
the config alone (``cache_layout.layout_of``). Some models of 2025-26 below still are (Llama-3.1, Qwen3,
Mistral-Small-3.1); the others are not, and that is the point:
bytes per token no longer tell the whole story; a bounded part (windows, chunks) and a fixed state
(linear layers) sit beside it.
"""

from __future__ import annotations

import pandas as pd

from kvcourse.kernels.cache_layout import CacheLayout, full, latent, layout_of, linear, window
from kvcourse.kernels.model.config_table import MODEL_CONFIGS

LAYOUTS_2026: dict[str, CacheLayout] = {
    # The dense models of 2025-26: full grouped-query attention on every layer, as in 2023, but declaring 128k
    # positions (lesson 15). meta-llama/Llama-3.1-8B: num_hidden_layers 32, num_key_value_heads 8, head_dim 128
    # (hidden_size 4096 / num_attention_heads 32); Llama-3.1-70B: 80 layers, 8 KV heads, head_dim 128 (8192 / 64).
    "llama-3.1-8b": CacheLayout((full(32, 8, 128),)),
    "llama-3.1-70b": CacheLayout((full(80, 8, 128),)),
    # Qwen/Qwen3-8B: num_hidden_layers 36, num_key_value_heads 8, head_dim 128; Qwen/Qwen3-32B: 64 layers, 8, 128.
    "qwen3-8b": CacheLayout((full(36, 8, 128),)),
    "qwen3-32b": CacheLayout((full(64, 8, 128),)),
    # mistralai/Mistral-Small-3.1-24B-Instruct-2503 (text_config): num_hidden_layers 40, num_key_value_heads 8,
    # head_dim 128, sliding_window null; Mistral-Small-24B-Instruct-2501 (Mistral Small 3) has the same attention.
    "mistral-small-3.1": CacheLayout((full(40, 8, 128),)),
    # deepseek-ai/DeepSeek-V3: num_hidden_layers 61, kv_lora_rank 512, qk_rope_head_dim 64. One latent
    # vector of 512 and one RoPE key of 64 per token per layer; 128 heads' keys and values rebuilt from it.
    "deepseek-v3": CacheLayout((latent(61, 512, 64),)),
    # moonshotai/Kimi-K2-Instruct: DeepSeek-V3's attention (61 layers, kv_lora_rank 512, qk_rope_head_dim 64)
    # with 64 heads instead of 128: the cache per token is the same.
    "kimi-k2": CacheLayout((latent(61, 512, 64),)),
    # google/gemma-3-27b-it (text): num_hidden_layers 62, num_key_value_heads 16, head_dim 128,
    # sliding_window 1024, sliding_window_pattern 6: five local layers, then one global, so 10 of 62 global.
    "gemma-3-27b": CacheLayout((window(52, 16, 128, 1024), full(10, 16, 128))),
    # openai/gpt-oss-120b: num_hidden_layers 36, num_key_value_heads 8, head_dim 64, sliding_window 128,
    # layer_types alternating sliding and full attention: 18 of each.
    "gpt-oss-120b": CacheLayout((window(18, 8, 64, 128), full(18, 8, 64))),
    # openai/gpt-oss-20b: the same attention on 24 layers, 12 of each.
    "gpt-oss-20b": CacheLayout((window(12, 8, 64, 128), full(12, 8, 64))),
    # meta-llama/Llama-4-Scout-17B-16E: num_hidden_layers 48, num_key_value_heads 8, head_dim 128,
    # attention_chunk_size 8192: three layers in four attend within their chunk, every fourth is global.
    "llama-4-scout": CacheLayout((window(36, 8, 128, 8192, chunked=True), full(12, 8, 128))),
    # Qwen/Qwen3-Next-80B-A3B-Instruct: num_hidden_layers 48, full_attention_interval 4: 12 attention layers
    # (num_key_value_heads 2, head_dim 256); the other 36 are Gated DeltaNet layers, whose state per sequence
    # is linear_num_value_heads 32 x linear_key_head_dim 128 x linear_value_head_dim 128 values, plus the
    # short convolution's last 3 inputs (linear_conv_kernel_dim 4) over the 2 x 16 x 128 key and query and
    # 32 x 128 value channels.
    "qwen3-next-80b": CacheLayout((full(12, 2, 256), linear(36, 32 * 128 * 128 + 3 * (2 * 16 * 128 + 32 * 128)))),
}

# The full-attention models of 2023 beside them, from config_table.py (no window applied).
LAYOUTS_2023: dict[str, CacheLayout] = {name: layout_of(config) for name, config in MODEL_CONFIGS.items()}


def cache_table(context_len: int, names: list[str] | None = None) -> pd.DataFrame:
    """One row per model: its layer kinds, the bytes every token adds, the bounded part (windows, chunks) and
    the fixed state at ``context_len``, and one user's whole cache at that length; 16-bit values."""
    layouts = {**LAYOUTS_2023, **LAYOUTS_2026}
    rows = []
    for name in names or list(layouts):
        if name not in layouts:
            raise KeyError(f"unknown model {name!r}; known: {', '.join(sorted(layouts))}")
        layout = layouts[name]
        at = layout.bytes_at(context_len)
        kinds = ", ".join(f"{g.num_layers} {g.kind}" + (f" ({g.window:,})" if g.window else "") for g in layout.groups)
        rows.append(
            {
                "model": name,
                "layers": kinds,
                "bytes per token": layout.per_token_bytes,
                "bounded (MB)": round(at.bounded / 1e6, 1),
                "state (MB)": round(at.state / 1e6, 1),
                f"one user at {context_len:,} tokens (GB)": round(at.total / 1e9, 2),
            }
        )
    return pd.DataFrame(rows).set_index("model")
