"""What a latent of each rank costs SmolLM2 in answers, beside the bytes it caches (lesson 23, issue 45 item 2).

``rank_sweep`` builds ``latent_twin`` at each rank from one decomposition per layer and measures, on one
text, its perplexity and its next-token agreement with the model as shipped, beside the latent's bytes per
token; the first row is the model itself, the latent at full rank. ``other_shrinks`` measures lesson 16's
ways on the same text: int8 keys and values (their scales counted), and the three KV heads averaged into
one (MQA, the GQA paper's conversion). ``energy_table`` is what a rank keeps of each layer's stacked
projection. None of it trains anything: this is the quality a conversion gives before fine-tuning.

The text is held out: the model is never prompted with it and nothing is fitted on it (the plain factorisation
reads the weights only; the activation-aware one reads the model's activations on the calibration text, kept
apart). Both texts are public domain and committed with the package (``kvcourse.kernels.measure.texts``, which
names their sources): the evaluation text is chapter I of "Alice's Adventures in Wonderland", about 3,000 of
SmolLM2's tokens; the calibration text the US Constitution's articles.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import pandas as pd
import torch
from torch import nn

from kvcourse.kernels import costs
from kvcourse.kernels.attention.backends.contiguous import NoCacheBackend
from kvcourse.kernels.measure.agreement import all_logits
from kvcourse.kernels.measure.perplexity import perplexity_of
from kvcourse.kernels.measure.texts import CALIBRATION_SOURCE as CALIBRATION_SOURCE  # re-exported: lessons 23-25
from kvcourse.kernels.measure.texts import HELD_OUT_SOURCE as HELD_OUT_SOURCE
from kvcourse.kernels.measure.texts import calibration_text as calibration_text
from kvcourse.kernels.measure.texts import held_out_text as held_out_text
from kvcourse.kernels.model.latent import JointSVD, latent_bytes_per_token, latent_twin, layer_svds
from kvcourse.kernels.model.latent_rope import partial_bytes_per_token, partial_twin
from kvcourse.kernels.model.merge_heads import regroup_kv_heads
from kvcourse.kernels.model.transformer import Attention, Transformer

SCALE_BYTES = 4  # int8: one float32 scale per token, per KV head, for K and for V (lesson 16)
INT8_ROW, MQA_ROW = "int8 keys and values", "MQA (KV heads averaged)"  # other_shrinks' rows


def _row(logits: torch.Tensor, reference: torch.Tensor, ids: Sequence[int], per_token: int) -> dict[str, float]:
    return {
        "bytes per token": per_token,
        "perplexity": perplexity_of(logits, ids),
        "next-token agreement": float((logits.argmax(-1) == reference.argmax(-1)).float().mean()),
    }


def rank_sweep(
    model: Transformer,
    ids: Sequence[int],
    ranks: Sequence[int],
    svds: Sequence[JointSVD] | None = None,
    reference: torch.Tensor | None = None,
) -> pd.DataFrame:
    """One row per latent rank, the model itself first (the full rank, where the factorisation is exact):
    bytes per token, its share of the model's own cache, perplexity, next-token agreement. ``svds``
    (``layer_svds(model)``) and ``reference`` (the model's ``all_logits`` of ``ids``) where computed already."""
    svds = layer_svds(model) if svds is None else svds
    full = svds[0].full_rank
    if any(rank >= full for rank in ranks):
        raise ValueError(f"ranks {list(ranks)}: below the full rank {full}, which is the model itself (first row)")
    bytes_per_value = model.dtype.itemsize
    reference = all_logits(model, ids) if reference is None else reference
    rows = {full: _row(reference, reference, ids, latent_bytes_per_token(model.config, full, bytes_per_value))}
    for rank in sorted(ranks, reverse=True):
        twin = latent_twin(model, rank, svds)
        per_token = latent_bytes_per_token(model.config, rank, bytes_per_value)
        rows[rank] = _row(all_logits(twin, ids), reference, ids, per_token)
    table = pd.DataFrame.from_dict(rows, orient="index").rename_axis("rank")
    table.insert(1, "share of the shipped cache", table["bytes per token"] / table["bytes per token"][full])
    return table


def other_shrinks(model: Transformer, ids: Sequence[int], reference: torch.Tensor | None = None) -> pd.DataFrame:
    """Lesson 16's ways on the same text, without training: as shipped (GQA), int8 keys and values, one KV head.

    ``reference``: the model's ``all_logits`` of ``ids`` where they are computed already."""
    config, bytes_per_value = model.config, model.dtype.itemsize
    reference = all_logits(model, ids) if reference is None else reference
    mqa = regroup_kv_heads(model, 1)
    rows = {
        f"GQA as shipped ({config.num_kv_heads} KV heads)": _row(
            reference, reference, ids, costs.kv_bytes_per_token(config, bytes_per_value)
        ),
        INT8_ROW: _row(
            all_logits(model, ids, "int8"), reference, ids, costs.quantized_kv_bytes_per_token(config, 1, SCALE_BYTES)
        ),
        MQA_ROW: _row(all_logits(mqa, ids), reference, ids, costs.kv_bytes_per_token(mqa.config, bytes_per_value)),
    }
    return pd.DataFrame.from_dict(rows, orient="index").rename_axis("cache")


def energy_table(svds: Sequence[JointSVD], ranks: Sequence[int]) -> pd.DataFrame:
    """The share of each layer's stacked [W_k; W_v] (squared Frobenius norm) that each rank keeps, summed up over
    the layers: the least, the median and the most."""
    kept = torch.stack([svd.energy_kept() for svd in svds])  # (layers, full rank)
    columns = {rank: kept[:, rank - 1] for rank in sorted(ranks, reverse=True)}
    return pd.DataFrame(
        {
            "least kept": {r: float(v.min()) for r, v in columns.items()},
            "median layer": {r: float(v.median()) for r, v in columns.items()},
            "most kept": {r: float(v.max()) for r, v in columns.items()},
        }
    ).rename_axis("rank")


@torch.no_grad()
def input_second_moments(model: Transformer, ids: Sequence[int]) -> list[torch.Tensor]:
    """Each layer's E[x x^T] (hidden square, float64) over the normalised inputs x its attention reads on ``ids``:
    what the activation-aware factorisation (``layer_svds(model, moments)``) is fitted to. Give it the
    calibration text, never the evaluation text."""
    layers = [a for a in model.modules() if isinstance(a, Attention)]
    moments = [torch.zeros(model.config.hidden_size, model.config.hidden_size, dtype=torch.float64) for _ in layers]

    def adder(index: int) -> Callable[[nn.Module, tuple[torch.Tensor, ...]], None]:
        def add(module: nn.Module, args: tuple[torch.Tensor, ...]) -> None:
            x = args[0].detach().to(device="cpu", dtype=torch.float64)  # (T, hidden)
            moments[index] += x.T @ x / len(ids)

        return add

    handles = [a.register_forward_pre_hook(adder(i)) for i, a in enumerate(layers)]
    tokens = torch.tensor(list(ids), device=model.device)
    try:  # one pass; only the last position's logits, as nothing reads them
        model(tokens, torch.arange(len(tokens), device=model.device), NoCacheBackend(), tokens.new_tensor([-1]))
    finally:
        for handle in handles:
            handle.remove()
    return moments


def fits_table(weights: pd.DataFrame, activations: pd.DataFrame) -> pd.DataFrame:
    """Two ``rank_sweep`` tables side by side, the factorisation fitted to the weights and to the activations:
    per rank, the bytes per token (the same), each one's perplexity and each one's next-token agreement; the ranks
    of ``activations``, which ``weights`` holds too."""
    weights = weights.loc[activations.index]
    return pd.DataFrame(
        {
            "bytes per token": weights["bytes per token"],
            "perplexity, fitted to weights": weights["perplexity"],
            "perplexity, fitted to activations": activations["perplexity"],
            "agreement, fitted to weights": weights["next-token agreement"],
            "agreement, fitted to activations": activations["next-token agreement"],
        }
    )


def partial_rope_sweep(
    model: Transformer,
    ids: Sequence[int],
    pairs: int,
    rotated: Sequence[torch.Tensor],
    svds: Sequence[JointSVD],
    full_rope: pd.DataFrame,
    reference: torch.Tensor | None = None,
) -> pd.DataFrame:
    """Partial RoPE (``pairs`` rotated pairs per KV head, ``latent_rope.partial_layers``) against the full-RoPE
    latent of ``full_rope`` (a ``rank_sweep`` table) at equal bytes per token: for each of its ranks r, the
    partial-RoPE latent of rank r minus the rotated dimensions' values, so the two caches are the same size.
    The first row (the full rank) is partial RoPE alone: the stack at its full rank, only the rotation taken off.
    ``reference``: the model's ``all_logits`` of ``ids`` where computed already."""
    config, bytes_per_value = model.config, model.dtype.itemsize
    rotated_values = config.num_kv_heads * 2 * pairs  # per layer and token, cached in full beside the latent
    reference = all_logits(model, ids) if reference is None else reference
    if (full_rope.index <= rotated_values).any():
        raise ValueError(f"ranks {list(full_rope.index)}: each must exceed the {rotated_values} rotated values")
    rows = {}
    for rank in full_rope.index:
        latent = min(rank - rotated_values, svds[0].full_rank)
        logits = all_logits(partial_twin(model, latent, rotated, svds), ids)
        row = _row(logits, reference, ids, partial_bytes_per_token(config, latent, pairs, bytes_per_value))
        rows[rank] = {
            "latent rank, partial RoPE": latent,
            "bytes per token": row["bytes per token"],
            "perplexity, full RoPE": full_rope["perplexity"][rank],
            "perplexity, partial RoPE": row["perplexity"],
            "agreement, full RoPE": full_rope["next-token agreement"][rank],
            "agreement, partial RoPE": row["next-token agreement"],
        }
    return pd.DataFrame.from_dict(rows, orient="index").rename_axis("full-RoPE rank")
