"""The floor every engine figure is graded against: the engine's own linear layers, alone.

A decode step of a 135M model is almost all matrix products: every weight matrix is read
once per step, whatever the batch. ``linears_seconds`` pushes ``rows`` rows through every
Linear the engine runs (fused q/k/v, o, fused gate/up, down of each layer, then the lm_head),
through the same ``Linear.forward``, so through the same kernel the engine picks for that
many rows (the pre-packed copy for a few rows, F.linear beyond). Nothing else runs: no norm,
no rotary, no attention, no sampling, no Python bookkeeping. The engine cannot beat it; how
close it comes is the overhead of everything else.
"""

from __future__ import annotations

import time

import torch


def engine_linears(model: torch.nn.Module) -> list[torch.nn.Module]:
    """Every Linear of our Transformer, in the order a forward pass runs them."""
    from kvcourse.kernels.model.layers import Linear

    return [mod for mod in model.modules() if isinstance(mod, Linear)]


def hf_linears(hf_model) -> list[torch.nn.Module]:
    """The unfused nn.Linear layers of a transformers Llama model (q, k, v, o, gate, up, down + lm_head)."""
    mods = []
    for layer in hf_model.model.layers:
        a, m = layer.self_attn, layer.mlp
        mods += [a.q_proj, a.k_proj, a.v_proj, a.o_proj, m.gate_proj, m.up_proj, m.down_proj]
    return mods + [hf_model.lm_head]


def linears_seconds(linears: list[torch.nn.Module], rows: int = 1, repeats: int = 10) -> float:
    """Seconds for one pass of ``rows`` rows through every linear: the mean of ``repeats`` passes after a warm-up.

    A mean, as the engine's per-step figures are means over many steps: both pay for the
    same machine noise.
    """
    dtype = linears[0].weight.dtype
    inputs: dict[int, torch.Tensor] = {}
    for lin in linears:
        k = lin.weight.shape[1]
        inputs.setdefault(k, torch.randn(rows, k, dtype=dtype))
    with torch.inference_mode():
        for lin in linears:  # warm-up: the first call of a shape picks and primes its kernel
            lin(inputs[lin.weight.shape[1]])
        start = time.perf_counter()
        for _ in range(repeats):
            for lin in linears:
                lin(inputs[lin.weight.shape[1]])
    return (time.perf_counter() - start) / repeats
