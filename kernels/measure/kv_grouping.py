"""Why a 2-bit cache groups keys by channel and values by token, measured on the model's own K/V (issue 45).

KIVI's argument is about where the large numbers sit. If a few key channels are large for every token, a
group that runs across channels (one token's 64 values) must stretch its four levels to reach the large
channel, and every small channel in it lands on one level; a group that runs along one channel over many
tokens (one channel's values for 32 tokens) holds numbers of one size. So the grouping that suits K is the
one whose groups stay inside a channel. ``kv_grouping`` reads the K and V a prompt leaves in a contiguous
cache, says how concentrated each is in its largest channels, and quantises each both ways, with the same
quantiser the 2-bit cache uses (``backends/kivi.quantize_2bit``), reporting the relative error of each.
"""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd
import torch

from kvcourse.kernels.attention.backend import StepMetadata
from kvcourse.kernels.attention.backends.contiguous import ContiguousKVBackend
from kvcourse.kernels.attention.backends.kivi import dequantize_2bit, quantize_2bit
from kvcourse.kernels.checks import check_positive_int
from kvcourse.kernels.model.transformer import Transformer


def cached_kv(model: Transformer, ids: Sequence[int]) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """Every layer's keys and values (Hkv, T, D, in float32) after one pass over ``ids`` (keys after RoPE)."""
    backend = ContiguousKVBackend(model.config, len(ids), model.dtype, model.device)
    backend.begin_step(StepMetadata(0, len(ids)))
    with torch.inference_mode():
        model(torch.tensor(list(ids), device=model.device), torch.arange(len(ids), device=model.device), backend)
    backend.end_step()
    return [k[:, : len(ids)].float() for k in backend.k_cache], [v[:, : len(ids)].float() for v in backend.v_cache]


def top_channel_share(x: torch.Tensor, top: int = 4) -> float:
    """The share of x's squared magnitude in its ``top`` largest channels (the last axis), per KV head, averaged."""
    energy = x.pow(2).sum(dim=1)  # (Hkv, D): each channel's energy over the tokens
    return float((energy.topk(top, dim=-1).values.sum(-1) / energy.sum(-1)).mean())


def grouped_error(x: torch.Tensor, by: str, group: int) -> float:
    """Relative RMS error of ``x`` (Hkv, T, D) quantised to 2 bits in groups: "channel" groups run along one channel
    over ``group`` tokens (a low and step per channel), "token" groups across ``group`` channels of one token."""
    heads, tokens, dim = x.shape
    if by == "channel":
        usable = tokens - tokens % group
        groups = x[:, :usable].reshape(heads, usable // group, group, dim)  # quantised along the group's tokens
        codes, low, step = quantize_2bit(groups, dim=2)
    elif by == "token":
        groups = x.reshape(heads, tokens, dim // group, group)  # quantised along the group's channels
        codes, low, step = quantize_2bit(groups, dim=3)
    else:
        raise ValueError(f"group by 'channel' or 'token', got {by!r}")
    back = dequantize_2bit(codes, low, step, torch.float32)
    return float((back - groups).norm() / groups.norm())


def kv_grouping(model: Transformer, ids: Sequence[int], group: int = 32, top: int = 4) -> pd.DataFrame:
    """One row per layer: the share of K's and of V's energy in their ``top`` channels, and each quantised to
    2 bits by channel and by token (relative error), on the K/V ``ids`` leave in the cache."""
    check_positive_int("group", group)
    if len(ids) < group:
        raise ValueError(f"grouping by channel needs at least one group of {group} tokens, got {len(ids)}")
    keys, values = cached_kv(model, ids)
    rows = []
    for layer, (k, v) in enumerate(zip(keys, values, strict=True)):
        rows.append(
            {
                "layer": layer,
                f"K in top {top} channels": top_channel_share(k, top),
                f"V in top {top} channels": top_channel_share(v, top),
                "K by channel": grouped_error(k, "channel", group),
                "K by token": grouped_error(k, "token", group),
                "V by channel": grouped_error(v, "channel", group),
                "V by token": grouped_error(v, "token", group),
            }
        )
    return pd.DataFrame(rows).set_index("layer")
