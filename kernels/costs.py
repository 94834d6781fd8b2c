"""The analytic cost model that lessons, simulators and the engine share (lessons 01, 03, 06, 07, 14, 15, 16).

Conventions, used everywhere in the course:

* FLOPs count 2 per multiply-add. A forward pass counts the matmuls (q/k/v/o projections,
  the SwiGLU MLP, the lm_head for the positions whose logits are needed) plus attention's
  two grid products (scores = q.k and the weighted sum of v), each 2 x head_dim per score
  cell. Norms, RoPE, softmax and activations are left out: they are a rounding error.
* A "score cell" is one (query, key) pair of one head in one layer. With a causal mask,
  the query at absolute position p sees keys 0..p (or the last ``window`` of them).
* ``context_len`` is the number of tokens in the sequence after this pass, including the
  ``num_new_tokens`` being processed now; the new tokens are its last positions.
* Weight bytes "read per forward pass" count every weight matrix and norm vector once
  (a matmul with M rows still reads each weight once) and the lm_head; the embedding
  table is only gathered row by row, so an untied embedding table is not counted.

``config`` is duck-typed: anything with the named attributes (a ``ModelConfig`` or a
look-alike) works. Every count is validated: zero, negative, NaN or non-integer -> ValueError
(kernels/cost_checks.py). What the weights cost (parameters, weight bytes) is kernels/weight_costs.py,
re-exported here with the rest: ``costs.num_parameters``, ``costs.weight_bytes``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from fractions import Fraction
from typing import Any

from kvcourse.kernels.checks import ceil_div
from kvcourse.kernels.cost_checks import config_count, count, rate
from kvcourse.kernels.weight_costs import layer_parameters as layer_parameters
from kvcourse.kernels.weight_costs import num_parameters as num_parameters
from kvcourse.kernels.weight_costs import weight_bytes, weight_bytes_read_per_pass


def tokens_processed(prompt_len: int, num_new_tokens: int, use_cache: bool) -> int:
    """Token positions run through the model to write num_new_tokens (lessons 02, 05, 17).

    With a cache: the prompt once, then one token per later step. Without one, step t
    rereads the prompt plus the t tokens written so far: a rectangle plus a triangle.
    """
    prompt, n = count("prompt_len", prompt_len), count("num_new_tokens", num_new_tokens)
    if use_cache:
        return prompt + (n - 1)
    return n * prompt + n * (n - 1) // 2


def kv_bytes_per_token(config: Any, bytes_per_value: int = 2) -> int:
    """K and V for one token across all layers: 2 x layers x kv_heads x head_dim x bytes (lesson 07)."""
    bpv = count("bytes_per_value", bytes_per_value)
    layers, kv_heads = config_count(config, "num_layers"), config_count(config, "num_kv_heads")
    return 2 * layers * kv_heads * config_count(config, "head_dim") * bpv


def kv_cache_bytes(config: Any, num_tokens: int, num_users: int = 1, bytes_per_value: int = 2) -> int:
    """The cache for num_users sequences of num_tokens each (lesson 07: 13B, 4,000 tokens -> ~3.2 GB)."""
    tokens = count("num_tokens", num_tokens, allow_zero=True)
    users = count("num_users", num_users, allow_zero=True)
    return kv_bytes_per_token(config, bytes_per_value) * tokens * users


def kv_crossover_tokens(
    config: Any, num_users: int = 1, bytes_per_value: int = 2, weight_bytes_per_value: int | None = None
) -> int:
    """Tokens per user at which num_users' KV cache first holds as many bytes as the weights (lesson 07).

    ``weight_bytes_per_value`` None means the weights are stored like the cache, and then the
    answer does not depend on the bytes per value: both sides scale with it.
    """
    users = count("num_users", num_users)
    weight_bpv = bytes_per_value if weight_bytes_per_value is None else weight_bytes_per_value
    per_token_all_users = kv_bytes_per_token(config, bytes_per_value) * users
    return ceil_div(weight_bytes(config, weight_bpv), per_token_all_users)


def kv_projection_flops_per_token(config: Any) -> int:
    """FLOPs to compute one token's K and V in every layer: the k and v projections (lesson 07).

    Part of ``matmul_flops_per_token``; this is the work a KV cache saves per token and per step.
    """
    kv_size = config_count(config, "num_kv_heads") * config_count(config, "head_dim")
    return 2 * config_count(config, "num_layers") * config_count(config, "hidden_size") * 2 * kv_size


def quantized_kv_bytes_per_token(config: Any, bytes_per_value: int = 1, scale_bytes: int = 4) -> int:
    """An int8 KV cache with one scale per token, per KV head, for K and for V (lesson 16)."""
    bpv = count("bytes_per_value", bytes_per_value)
    sb = count("scale_bytes", scale_bytes)
    per_head = config_count(config, "head_dim") * bpv + sb
    return 2 * config_count(config, "num_layers") * config_count(config, "num_kv_heads") * per_head


def fp8_kv_bytes_per_token(config: Any) -> int:
    """An FP8 (E4M3) KV cache with one scale per layer for K and for V: one byte a value; the scales are per
    sequence, not per token (issue 45; kernels/attention/backends/fp8.py)."""
    return kv_bytes_per_token(config, 1)


def kivi_kv_bytes_per_token(config: Any, group: int = 32, scale_bytes: int = 2) -> int:
    """A KIVI-style 2-bit KV cache, per quantised token (issue 45; backends/kivi.py): codes packed four to a byte
    for K and V; V's low and step per group of ``group`` channels; K's low and step per channel, shared by a group
    of ``group`` tokens (so 1/group of them per token). The recent tokens kept in full precision are per sequence."""
    head_dim, g, sb = config_count(config, "head_dim"), count("group", group), count("scale_bytes", scale_bytes)
    if head_dim % g or head_dim % 4:
        raise ValueError(f"head_dim {head_dim} must be a multiple of 4 and of the group ({g})")
    codes = 2 * head_dim // 4  # K and V, 2 bits a value
    key_scales = Fraction(2 * sb * head_dim, g)  # low and step per channel, over g tokens
    value_scales = 2 * sb * (head_dim // g)  # low and step per g channels, every token
    per_head = codes + key_scales + value_scales
    total = per_head * config_count(config, "num_layers") * config_count(config, "num_kv_heads")
    return math.ceil(total)


def max_cached_tokens(config: Any, free_bytes: int, bytes_per_value: int = 2) -> int:
    """How many tokens of KV cache fit in free_bytes (lesson 15: window = spare memory / bytes per token)."""
    free = count("free_bytes", free_bytes, allow_zero=True)
    return free // kv_bytes_per_token(config, bytes_per_value)


def kv_blocks_needed(context_len: int, block_size: int, num_users: int = 1, shared_prefix_tokens: int = 0) -> int:
    """Blocks a paged pool holds for num_users sequences of context_len tokens that open alike (lesson 15).

    Each sequence needs ceil(context_len / block_size) blocks, its last one partly empty. The
    first ``shared_prefix_tokens`` (a system prompt every user sends) are stored once with prefix
    caching, but only in whole blocks: a partly filled prefix block, and the block that holds a
    sequence's last token, stay each sequence's own, as the engine's KVCacheManager shares them.
    """
    ctx, bs = count("context_len", context_len), count("block_size", block_size)
    users = count("num_users", num_users, allow_zero=True)
    prefix = count("shared_prefix_tokens", shared_prefix_tokens, allow_zero=True)
    if users == 0:
        return 0
    shared = min(prefix, ctx - 1) // bs  # whole prefix blocks that end before the last token
    return shared + users * (ceil_div(ctx, bs) - shared)


def pool_window(num_blocks: int, block_size: int, num_users: int = 1, shared_prefix_tokens: int = 0) -> int:
    """The longest context every one of num_users sequences can reach at once in num_blocks blocks (lesson 15).

    The largest whole number of blocks k per sequence with ``kv_blocks_needed(k * block_size, ...)``
    <= num_blocks, in tokens; 0 when the pool cannot give each user even one block.
    """
    blocks, bs = count("num_blocks", num_blocks, allow_zero=True), count("block_size", block_size)
    users = count("num_users", num_users)
    shared = count("shared_prefix_tokens", shared_prefix_tokens, allow_zero=True) // bs
    if blocks < users:
        return 0
    if blocks >= shared + users:  # the whole shared prefix fits: the rest is split evenly
        return (shared + (blocks - shared) // users) * bs
    return (blocks - users + 1) * bs  # shorter than the prefix: all but each last block shared


def context_window(
    config: Any,
    free_bytes: int,
    bytes_per_value: int = 2,
    num_users: int = 1,
    block_size: int = 1,
    shared_prefix_tokens: int = 0,
) -> int:
    """Window = spare memory / bytes per token, for num_users at once, in whole blocks (lesson 15).

    The memory is cut into whole blocks of ``block_size`` tokens (what is left over is lost), the
    whole blocks of a shared prefix are stored once, and every user gets the same number of
    blocks of their own. One user, blocks of one token and nothing shared: ``max_cached_tokens``.
    """
    block_bytes = kv_bytes_per_token(config, bytes_per_value) * count("block_size", block_size)
    num_blocks = count("free_bytes", free_bytes, allow_zero=True) // block_bytes
    return pool_window(num_blocks, block_size, num_users, shared_prefix_tokens)


def score_cells_per_head(num_new_tokens: int, context_len: int, window: int | None = None) -> int:
    """(query, key) pairs one head of one layer scores for the new tokens, causally (lesson 03)."""
    new = count("num_new_tokens", num_new_tokens, allow_zero=True)
    ctx = count("context_len", context_len, allow_zero=True)
    if new > ctx:
        raise ValueError(f"num_new_tokens ({new}) cannot exceed context_len ({ctx}), which includes them")
    start = ctx - new  # absolute position of the first new token
    if window is None:
        # Sum of (p + 1) for p in start .. ctx-1.
        return new * start + new * (new + 1) // 2
    win = count("window", window)
    # Query at position p sees min(p + 1, window) keys: ramp up to the window, then flat.
    ramp_end = min(ctx, max(start, win - 1))  # positions before win-1 still see fewer than win keys
    ramp = ramp_end - start
    ramp_cells = ramp * start + ramp * (ramp + 1) // 2
    return ramp_cells + (new - ramp) * win


def score_cells(
    config: Any, num_new_tokens: int, context_len: int, window: int | None | Sequence[int | None] = None
) -> int:
    """Score cells over all heads and layers: score_cells_per_head x num_heads x num_layers (lesson 03).

    ``window`` is one window for every layer, or one per layer (None where a layer sees every key), as a model
    with local and global layers has (issue 45)."""
    heads, layers = config_count(config, "num_heads"), config_count(config, "num_layers")
    if window is None or isinstance(window, int):
        return score_cells_per_head(num_new_tokens, context_len, window) * heads * layers
    if len(window) != layers:
        raise ValueError(f"window gives {len(window)} per-layer windows for a model of {layers} layers")
    return heads * sum(score_cells_per_head(num_new_tokens, context_len, w) for w in window)


def score_grid_bytes(num_queries: int, num_keys: int, num_heads: int = 1, bytes_per_value: int = 4) -> int:
    """Memory for a materialised (heads, queries, keys) score grid, as naive attention holds it (lesson 03)."""
    return (
        count("num_queries", num_queries, allow_zero=True)
        * count("num_keys", num_keys, allow_zero=True)
        * count("num_heads", num_heads)
        * count("bytes_per_value", bytes_per_value)
    )


def matmul_flops_per_token(config: Any, with_lm_head: bool = True) -> int:
    """Projection and MLP FLOPs for one token through all layers (2 per multiply-add), plus the lm_head."""
    hidden, head_dim = config_count(config, "hidden_size"), config_count(config, "head_dim")
    q_size = config_count(config, "num_heads") * head_dim
    kv_size = config_count(config, "num_kv_heads") * head_dim
    mlp = 3 * hidden * config_count(config, "intermediate_size")
    per_layer = hidden * (q_size + 2 * kv_size) + q_size * hidden + mlp
    total = config_count(config, "num_layers") * per_layer
    if with_lm_head:
        total += hidden * config_count(config, "vocab_size")
    return 2 * total


def forward_flops(
    config: Any,
    num_new_tokens: int,
    context_len: int,
    num_logits: int | None = None,
    window: int | None | Sequence[int | None] = None,
) -> int:
    """FLOPs of one forward pass over num_new_tokens at the end of a context_len sequence (lesson 01).

    ``num_logits`` is how many positions go through the lm_head; None means all new tokens
    (the plain forward pass); generation needs only the last one (num_logits=1).
    """
    new = count("num_new_tokens", num_new_tokens, allow_zero=True)
    logits = new if num_logits is None else count("num_logits", num_logits, allow_zero=True)
    if logits > new:
        raise ValueError(f"num_logits ({logits}) cannot exceed num_new_tokens ({new})")
    matmuls = new * matmul_flops_per_token(config, with_lm_head=False)
    lm_head = 2 * logits * config_count(config, "hidden_size") * config_count(config, "vocab_size")
    attention = 4 * config_count(config, "head_dim") * score_cells(config, new, context_len, window)
    return matmuls + lm_head + attention


def decode_step_bytes(config: Any, batch_size: int, context_len: int, bytes_per_value: int = 2) -> int:
    """Bytes one decode step reads: the weights once, whatever the batch, plus each sequence's K and V (lesson 14).

    Each of the ``batch_size`` sequences adds one token at ``context_len`` (its new token included),
    so its attention reads ``context_len`` tokens of K and V; the weights serve every row at once.
    """
    return weight_bytes_read_per_pass(config, bytes_per_value) + kv_cache_bytes(
        config, context_len, count("batch_size", batch_size), bytes_per_value
    )


def decode_step_flops(config: Any, batch_size: int, context_len: int) -> int:
    """FLOPs of one decode step: ``batch_size`` sequences, one new token each at ``context_len`` (lesson 14)."""
    return count("batch_size", batch_size) * forward_flops(config, 1, context_len, num_logits=1)


def compute_bound_batch(
    config: Any, context_len: int, flops_per_second: float, bytes_per_second: float, bytes_per_value: int = 2
) -> int | None:
    """The smallest batch whose decode step takes at least as long to compute as to read (lesson 14).

    Roofline reasoning: a step needs ``decode_step_flops / flops_per_second`` of arithmetic and
    ``decode_step_bytes / bytes_per_second`` of memory traffic, and takes about the longer of the
    two. The weights are read once for the batch, but each sequence brings its own FLOPs and its
    own K/V to read, so the batch B reaches the ridge when B (f / F - k / BW) >= W / BW. If one
    sequence's K/V takes longer to read than its FLOPs take to compute (long contexts), the step
    stays memory-bound at every batch: None.
    """
    # Fractions: exact, no rounding at the ridge.
    flops_rate = Fraction(rate("flops_per_second", flops_per_second))
    byte_rate = Fraction(rate("bytes_per_second", bytes_per_second))
    weights = Fraction(weight_bytes_read_per_pass(config, bytes_per_value))
    per_seq_flops = Fraction(decode_step_flops(config, 1, context_len))
    per_seq_kv = Fraction(kv_cache_bytes(config, context_len, 1, bytes_per_value))
    surplus = per_seq_flops / flops_rate - per_seq_kv / byte_rate  # seconds of math over reading, per sequence
    if surplus <= 0:
        return None
    return max(1, math.ceil(weights / byte_rate / surplus))
