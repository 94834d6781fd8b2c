"""The eager bound: a decode step in the fewest eager PyTorch calls, to tell the engine's cost from eager torch's.

The floor (floor.py) runs the matrix products alone; the engine adds norms, RoPE, the cache
and attention. Some of that is the engine's structure (modules, checks, measurements) and some
is what any eager PyTorch program pays: each torch call after a matrix product runs with the
CPU's caches full of weights, so even a one-element op costs microseconds. This is the same
greedy decode written flat, one torch call per step of the maths, on the engine's own packed
fp32 weights (each layer by the product the engine chose for it) and KV cache, with nothing else:

    rms_norm · product (q, k, v) · RoPE · 2 cache writes · bmm · mul · softmax · bmm (attention)
    · product (o) · add (skip) · rms_norm · product (gate, up) · silu · mul · product (down) · add (skip)

Its tokens must equal the engine's (checked by bench_decode), so it does all the work. What
separates it from the floor needs fused kernels (many ops in one call), not fewer lines of Python.
"""

from __future__ import annotations

import functools
import math
import time
from collections.abc import Callable

import torch
import torch.nn.functional as F

from kvcourse.kernels.model import products


def _packed(linear) -> Callable[[torch.Tensor], torch.Tensor]:
    """The product the engine multiplies a decode row by for this layer (cpu_fast.FastLinear), as one call."""
    from kvcourse.kernels.model.cpu_fast import FastLinear

    if not isinstance(linear, FastLinear) or linear.weight.dtype != torch.float32 or linear.bias is not None:
        raise ValueError("the eager bound runs on a float32 model after accelerate(), without biases")
    product = linear.choices()[0].product
    if product == "transposed":
        return functools.partial(torch.mm, mat2=linear.prepared(product))
    return functools.partial(
        products.multiply, product, weight=linear.weight, prepared=linear.prepared(product), bias=None
    )


def eager_decode(model, prompt: list[int], num_new: int) -> tuple[float, list[int]]:
    """Seconds per decode token and the greedy tokens: the prompt through ``model``, then the flat loop."""
    from kvcourse.kernels.attention.backend import StepMetadata
    from kvcourse.kernels.attention.backends.contiguous import ContiguousKVBackend

    cfg = model.config
    num_heads, num_kv, head_dim, inter = cfg.num_heads, cfg.num_kv_heads, cfg.head_dim, cfg.intermediate_size
    qk_size, eps = (num_heads + num_kv) * head_dim, cfg.rms_norm_eps
    layers = [
        (
            lay.input_layernorm.weight,
            _packed(lay.self_attn.qkv_proj),
            _packed(lay.self_attn.o_proj),
            lay.post_attention_layernorm.weight,
            _packed(lay.mlp.gate_up_proj),
            _packed(lay.mlp.down_proj),
        )
        for lay in model.layers
    ]
    lm_head, norm = _packed(model.lm_head), model.norm.weight
    cache = ContiguousKVBackend(cfg, len(prompt) + num_new, model.dtype, model.device)
    scale = 1.0 / math.sqrt(head_dim)
    with torch.inference_mode():
        cache.begin_step(StepMetadata(0, len(prompt)))
        logits = model(torch.tensor(prompt), torch.arange(len(prompt)), cache, torch.tensor([len(prompt) - 1]))
        cache.end_step()
        tokens = [int(logits.argmax())]
        start = time.perf_counter()
        for pos in range(len(prompt), len(prompt) + num_new - 1):
            x = model.embed_tokens.weight[tokens[-1]][None]  # (1, hidden)
            rope = model.rotary.at(torch.tensor([pos]), x.dtype)  # the form measured fastest here (fast_rope.py)
            for i, (w_in, qkv_w, o_w, w_post, gate_up_w, down_w) in enumerate(layers):
                qkv = qkv_w(F.rms_norm(x, w_in.shape, w_in, eps))  # (1, q + 2 kv)
                qk = rope(qkv[:, :qk_size].view(1, num_heads + num_kv, head_dim))[0]  # (H + Hkv, D)
                k_cache, v_cache = cache.k_cache[i], cache.v_cache[i]  # (Hkv, capacity, D)
                k_cache.select(1, pos).copy_(qk[num_heads:])
                v_cache.select(1, pos).copy_(qkv[0, qk_size:].view(num_kv, head_dim))
                q = qk[:num_heads].view(num_kv, num_heads // num_kv, head_dim)  # (Hkv, group, D)
                scores = torch.bmm(q, k_cache[:, : pos + 1].transpose(1, 2)).mul_(scale)  # (Hkv, group, pos + 1)
                attn = torch.bmm(torch.softmax(scores, -1), v_cache[:, : pos + 1])  # (Hkv, group, D)
                x = x + o_w(attn.view(1, num_heads * head_dim))
                gate_up = gate_up_w(F.rms_norm(x, w_post.shape, w_post, eps))  # (1, 2 * inter)
                x = x + down_w(F.silu(gate_up[:, :inter]) * gate_up[:, inter:])
            tokens.append(int(lm_head(F.rms_norm(x, norm.shape, norm, eps)).argmax()))
        seconds = time.perf_counter() - start
    return seconds / max(num_new - 1, 1), tokens
