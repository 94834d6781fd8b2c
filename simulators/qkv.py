"""Lesson 04's simulator: pick a token and watch its query score every key, then mix the values."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from kvcourse.kernels.attention.backends.contiguous import NoCacheBackend
from kvcourse.kernels.engine.generate import as_transformer
from kvcourse.simulators.base import SimulatorView
from kvcourse.simulators.checks import InvalidInput, check_int
from kvcourse.simulators.controls import int_control


@dataclass(frozen=True)
class QKV:
    """Queries, keys and values of one sequence, every layer and head (lesson 04).

    Shapes: ``q`` (num_layers, num_heads, num_tokens, head_dim); ``k`` and ``v``
    (num_layers, num_kv_heads, num_tokens, head_dim). With grouped-query attention several
    query heads read the same key/value head.
    """

    q: np.ndarray
    k: np.ndarray
    v: np.ndarray
    tokens: tuple[str, ...]

    def __post_init__(self) -> None:
        if self.q.ndim != 4 or self.k.ndim != 4 or self.k.shape != self.v.shape:
            raise ValueError(
                f"q must be 4-D and k, v 4-D of equal shape; got {self.q.shape}, {self.k.shape}, {self.v.shape}"
            )
        num_layers, num_heads, num_tokens, head_dim = self.q.shape
        if self.k.shape[0] != num_layers or self.k.shape[2:] != (num_tokens, head_dim):
            raise ValueError(f"k/v shape {self.k.shape} does not match q shape {self.q.shape}")
        if num_heads % self.k.shape[1] != 0:
            raise ValueError(f"{num_heads} query heads cannot share {self.k.shape[1]} key/value heads evenly")
        if len(self.tokens) != num_tokens:
            raise ValueError(f"{len(self.tokens)} token labels for {num_tokens} tokens")

    @property
    def num_layers(self) -> int:
        return self.q.shape[0]

    @property
    def num_heads(self) -> int:
        return self.q.shape[1]

    @property
    def num_tokens(self) -> int:
        return self.q.shape[2]

    def kv_head(self, head: int) -> int:
        """The key/value head that query head ``head`` reads (grouped-query attention)."""
        return head // (self.num_heads // self.k.shape[1])


@dataclass(frozen=True)
class Lookup:
    """One query's attention: raw scores, softmax weights (future masked) and the output."""

    scores: np.ndarray  # (num_tokens,), -inf for keys after the query
    weights: np.ndarray  # (num_tokens,), sums to 1, zero after the query
    output: np.ndarray  # (head_dim,), the weighted sum of values


def attend_one(q: np.ndarray, k: np.ndarray, v: np.ndarray, position: int) -> Lookup:
    """Scaled dot-product attention for the query at ``position`` over keys 0..position (lesson 04)."""
    head_dim = q.shape[-1]
    scores = k @ q / np.sqrt(head_dim)  # (num_tokens,)
    scores = np.where(np.arange(len(scores)) <= position, scores, -np.inf)
    weights = np.exp(scores - scores[: position + 1].max())
    weights /= weights.sum()
    return Lookup(scores=scores, weights=weights, output=weights @ v)


class RecordingBackend:
    """A plain causal attention backend that keeps every layer's q, k, v and output (lesson 04).

    The model calls ``attend`` once per layer with q and k already rotated (RoPE) at the
    tokens' positions, so the recorded tensors are exactly what attention compares.
    """

    def __init__(self, attention: str = "sdpa") -> None:
        self.inner = NoCacheBackend(attention)
        self.q: dict[int, torch.Tensor] = {}
        self.k: dict[int, torch.Tensor] = {}
        self.v: dict[int, torch.Tensor] = {}
        self.out: dict[int, torch.Tensor] = {}

    def attend(self, layer_idx: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """q (T, num_heads, D), k and v (T, num_kv_heads, D) -> (T, num_heads, D), recording all four."""
        out = self.inner.attend(layer_idx, q, k, v)
        for store, tensor in ((self.q, q), (self.k, k), (self.v, v), (self.out, out)):
            store[layer_idx] = tensor.detach().clone()
        return out

    def stacked(self, store: dict[int, torch.Tensor]) -> torch.Tensor:
        """One recorded quantity for all layers, head-major: (num_layers, heads, T, D)."""
        return torch.stack([store[i] for i in sorted(store)]).transpose(1, 2)  # (L, T, H, D) -> (L, H, T, D)


def record_qkv(
    model: Any, ids: list[int] | torch.Tensor, tokenizer: Any = None, attention: str = "sdpa"
) -> tuple[QKV, RecordingBackend]:
    """Run one forward pass of the real model over ``ids`` and return its Q, K, V (lesson 04).

    ``model`` is a kvcourse Transformer or a Hugging Face model (converted once). Token labels
    come from ``tokenizer`` when given, else the ids themselves.
    """
    transformer = as_transformer(model)
    ids = torch.as_tensor(ids, dtype=torch.long).flatten().to(transformer.device)  # (T,)
    recorder = RecordingBackend(attention)
    with torch.inference_mode():
        transformer(ids, torch.arange(len(ids), device=ids.device), recorder, logits_index=torch.tensor([-1]))
    labels = (
        tuple(tokenizer.decode([i]) for i in ids.tolist())
        if tokenizer is not None
        else tuple(str(i) for i in ids.tolist())
    )
    data = QKV(
        q=recorder.stacked(recorder.q).float().cpu().numpy(),
        k=recorder.stacked(recorder.k).float().cpu().numpy(),
        v=recorder.stacked(recorder.v).float().cpu().numpy(),
        tokens=labels,
    )
    return data, recorder


class QKVExplorer:
    """Pick a layer, head and token; ``step()`` moves to the next token (lesson 04)."""

    def __init__(self, data: QKV, layer: int = 0, head: int = 0, position: int = 0) -> None:
        self.data = data
        self.layer = check_int("Layer", layer, 0, data.num_layers - 1)
        self.head = check_int("Query head", head, 0, data.num_heads - 1)
        self.position = check_int("Token", position, 0, data.num_tokens - 1)

    def step(self) -> None:
        """Move the query to the next token, which sees one more key than the last."""
        if self.position + 1 >= self.data.num_tokens:
            raise InvalidInput("this is the last token; pick another one or press Reset.")
        self.position += 1

    def lookup(self) -> Lookup:
        kv = self.data.kv_head(self.head)
        return attend_one(
            self.data.q[self.layer, self.head, self.position],
            self.data.k[self.layer, kv],
            self.data.v[self.layer, kv],
            self.position,
        )


class QKVView(SimulatorView):
    """Choose a token and see its query score every key and blend the values (lesson 04)."""

    stepped = {"position": "position"}  # Step changes this box: it shows the new value

    def __init__(self, data: QKV, *, layer: int = 0, head: int = 0, position: int | None = None) -> None:
        self.data = data
        last = data.num_tokens - 1 if position is None else position
        controls = {
            "layer": int_control("Layer", layer),
            "head": int_control("Query head", head),
            "position": int_control("Token", last),
        }
        super().__init__(controls, num_axes=2, figsize=(11, 4.2), step_label="Next token")

    def build(self, values: dict[str, Any]) -> QKVExplorer:
        return QKVExplorer(self.data, values["layer"], values["head"], values["position"])

    def draw(self, model: QKVExplorer) -> str:
        score_ax, weight_ax = self.axes
        look = model.lookup()
        n, p = self.data.num_tokens, model.position
        labels = [f"{i}:{t}" for i, t in enumerate(self.data.tokens)]
        seen = np.arange(n) <= p
        visible_scores = np.where(seen, look.scores, 0.0)
        score_ax.bar(np.arange(n), visible_scores, color="C0")
        score_ax.set_title(
            f"query of token {p} ({self.data.tokens[p]!r}) · every key / √d\n(grey: later tokens, masked)"
        )
        score_ax.set_ylabel("score")
        weight_ax.bar(np.arange(n), look.weights, color=np.where(seen, "C3", "0.85"))
        weight_ax.set_title("softmax → how much of each value flows in")
        weight_ax.set_ylabel("attention weight")
        weight_ax.set_ylim(0, 1)
        for ax in (score_ax, weight_ax):
            if p + 1 < n:
                ax.axvspan(p + 0.5, n - 0.5, color="0.9", zorder=0)  # keys this query may not see
            ax.set_xlim(-0.5, n - 0.5)
            ax.set_xticks(np.arange(n), labels, rotation=70, fontsize=8)
            ax.set_xlabel("key token")
        top = int(np.argmax(look.weights))
        return (
            f"Layer {model.layer}, query head {model.head} (reads key/value head {self.data.kv_head(model.head)}): "
            f"token {p} {self.data.tokens[p]!r} scores {p + 1} keys; the largest weight, {look.weights[top]:.2f}, "
            f"goes to token {top} {self.data.tokens[top]!r}."
        )
