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

from collections.abc import Sequence

import pandas as pd
import torch

from kvcourse.kernels import costs
from kvcourse.kernels.measure.agreement import all_logits
from kvcourse.kernels.measure.perplexity import perplexity_of
from kvcourse.kernels.measure.texts import CALIBRATION_SOURCE as CALIBRATION_SOURCE  # re-exported: lessons 23-25
from kvcourse.kernels.measure.texts import HELD_OUT_SOURCE as HELD_OUT_SOURCE
from kvcourse.kernels.measure.texts import calibration_text as calibration_text
from kvcourse.kernels.measure.texts import held_out_text as held_out_text
from kvcourse.kernels.model.latent import JointSVD, latent_bytes_per_token, latent_twin, layer_svds
from kvcourse.kernels.model.merge_heads import regroup_kv_heads
from kvcourse.kernels.model.transformer import Transformer

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
