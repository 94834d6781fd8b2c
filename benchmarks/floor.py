"""The floor every engine figure is graded against: the engine's own linear layers, alone.

A decode step of a 135M model is almost all matrix products: every weight matrix is read
once per step, whatever the batch. ``linears_seconds`` pushes ``rows`` rows through every
Linear the engine runs (fused q/k/v, o, fused gate/up, down of each layer, then the lm_head),
through the same ``Linear.forward``, so through the same product the engine picks for that
many rows. Nothing else runs: no norm, no rotary, no attention, no sampling, no Python
bookkeeping. ``fastest_linears_seconds`` is the floor of a decode step: each of those layers by
the fastest product this machine has for it (every one products.py knows, timed in the same
pass), so the engine is graded against the machine, not against its own choice.
"""

from __future__ import annotations

import time

import torch

from kvcourse.kernels.model import products


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


def fastest_linears_seconds(linears: list[torch.nn.Module], rows: int = 1, repeats: int = 10) -> float:
    """Seconds for one pass of ``rows`` rows through every linear, each by the fastest product for it here.

    Each product runs whole passes (so every weight streams from memory, as in a step), timing each
    layer inside the pass; a layer's floor is its best product's mean. A product whose warm-up pass
    takes over 4x the textbook's is timed no further.
    """
    dtype = linears[0].weight.dtype
    inputs = {lin.weight.shape[1]: torch.randn(rows, lin.weight.shape[1], dtype=dtype) for lin in linears}
    per_layer: dict[str, list[float]] = {}
    warm_up: dict[str, float] = {}
    with torch.inference_mode():
        for name in (p for p in products.PRODUCTS if products.runs(p, dtype)[0]):  # textbook first
            calls = [(lin.weight, products.prepare(name, lin.weight.detach()), lin.bias) for lin in linears]
            times = [0.0] * len(calls)
            for rep in range(repeats + 1):
                for i, (weight, prepared, bias) in enumerate(calls):
                    start = time.perf_counter()
                    products.multiply(name, inputs[weight.shape[1]], weight, prepared, bias)
                    times[i] += time.perf_counter() - start
                if rep == 0:
                    warm_up[name], times = sum(times), [0.0] * len(calls)
                    if warm_up[name] > 4 * warm_up["textbook"]:
                        break
            else:
                per_layer[name] = [t / repeats for t in times]
    return sum(min(times[i] for times in per_layer.values()) for i in range(len(linears)))


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
