"""What a model caches per token and per sequence, whatever its attention kind (lessons 07, 16; the 2026 part).

A 2023 rule, "2 x layers x KV heads x head dim x bytes per token", holds only when every layer is
full attention. The models of 2026 mix layer kinds, and each kind caches differently:

* ``full``: multi-head, grouped or multi-query attention over the whole context: K and V of every
  token, ``2 x kv_heads x head_dim`` values per token per layer (multi-query is kv_heads = 1).
* ``latent``: multi-head latent attention (DeepSeek-V2/V3, Kimi-K2): one compressed vector per token
  per layer, ``kv_lora_rank`` values, plus the small key part that carries RoPE (``qk_rope_head_dim``);
  the keys and values of every head are rebuilt from it.
* ``window``: sliding-window layers (Gemma 3's local layers, gpt-oss's banded layers): K and V of the
  last ``window`` tokens only, so the part stops growing once the context passes the window.
* ``chunked``: chunked attention (Llama 4's local layers): a token attends within its chunk of
  ``window`` tokens, so at most one chunk is kept, up to ``window`` tokens.
* ``linear``: linear-attention layers (Qwen3-Next's Gated DeltaNet): no per-token cache at all, a
  fixed-size state per sequence.

So a model's cache at a context of n tokens is ``per_token_bytes x n`` (full and latent layers) plus a
bounded part (window and chunked layers, ``min(n, window)`` tokens each) plus ``state_bytes`` (linear
layers): ``CacheLayout.bytes_at(n)``. Layouts of published models are in ``model/cache_layouts.py``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from kvcourse.kernels.checks import check_positive_int

Kind = Literal["full", "latent", "window", "chunked", "linear"]
KINDS: tuple[Kind, ...] = ("full", "latent", "window", "chunked", "linear")


def _whole(name: str, value: object, allow_zero: bool = False) -> int:
    """``value`` if it is a whole number >= 1 (or 0 where allowed), else a ValueError naming it."""
    if allow_zero and isinstance(value, int) and not isinstance(value, bool) and value == 0:
        return 0
    check_positive_int(name, value)
    assert isinstance(value, int)
    return value


@dataclass(frozen=True)
class LayerGroup:
    """``num_layers`` layers of one kind that cache alike.

    ``values_per_token``: values cached per token in one layer (0 for linear layers); ``window``: the
    tokens a window or chunked layer keeps at most (None for the others); ``state_values``: the fixed
    values one linear layer keeps per sequence (0 for the others).
    """

    kind: Kind
    num_layers: int
    values_per_token: int = 0
    window: int | None = None
    state_values: int = 0

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"kind must be one of {', '.join(KINDS)}, got {self.kind!r}")
        _whole("num_layers", self.num_layers)
        bounded = self.kind in ("window", "chunked")
        if bounded != (self.window is not None):
            raise ValueError(f"a {self.kind} layer group {'needs' if bounded else 'takes no'} window")
        if bounded:
            _whole("window", self.window)
        if (self.kind == "linear") != (self.values_per_token == 0):
            raise ValueError("linear layers cache no values per token; every other kind caches some")
        _whole("values_per_token", self.values_per_token, allow_zero=True)
        if (self.kind == "linear") != (self.state_values > 0):
            raise ValueError("a fixed state belongs to linear layers only, and they need one")
        _whole("state_values", self.state_values, allow_zero=True)

    def tokens_kept(self, context_len: int) -> int:
        """Tokens whose values one layer of this group holds at a context of ``context_len``."""
        n = _whole("context_len", context_len, allow_zero=True)
        if self.kind == "linear":
            return 0
        return n if self.window is None else min(n, self.window)


def full(num_layers: int, num_kv_heads: int, head_dim: int) -> LayerGroup:
    """Full attention layers (MHA, GQA or MQA by the number of KV heads): K and V per head per token."""
    return LayerGroup("full", num_layers, 2 * _whole("num_kv_heads", num_kv_heads) * _whole("head_dim", head_dim))


def latent(num_layers: int, kv_lora_rank: int, rope_head_dim: int) -> LayerGroup:
    """Multi-head latent attention: the compressed vector and the shared RoPE key, per token per layer."""
    return LayerGroup(
        "latent",
        num_layers,
        _whole("kv_lora_rank", kv_lora_rank) + _whole("rope_head_dim", rope_head_dim, allow_zero=True),
    )


def window(num_layers: int, num_kv_heads: int, head_dim: int, tokens: int, *, chunked: bool = False) -> LayerGroup:
    """Sliding-window layers (or chunked ones, ``chunked=True``) keeping at most ``tokens`` tokens' K and V."""
    per_token = 2 * _whole("num_kv_heads", num_kv_heads) * _whole("head_dim", head_dim)
    return LayerGroup("chunked" if chunked else "window", num_layers, per_token, tokens)


def linear(num_layers: int, state_values: int) -> LayerGroup:
    """Linear-attention layers: a fixed state of ``state_values`` values per sequence per layer."""
    return LayerGroup("linear", num_layers, state_values=state_values)


@dataclass(frozen=True)
class CacheBytes:
    """A cache at one context length: the part that grows per token, the bounded part, the fixed state."""

    context_len: int
    growing: int  # full and latent layers: per_token_bytes x context_len
    bounded: int  # window and chunked layers: at most their window each
    state: int  # linear layers' fixed states

    @property
    def total(self) -> int:
        return self.growing + self.bounded + self.state


@dataclass(frozen=True)
class CacheLayout:
    """A model's layers grouped by how they cache; ``bytes_per_value`` is the cache's storage (2: bf16)."""

    groups: tuple[LayerGroup, ...]
    bytes_per_value: int = 2

    def __post_init__(self) -> None:
        if not self.groups:
            raise ValueError("a layout needs at least one layer group")
        _whole("bytes_per_value", self.bytes_per_value)

    @property
    def num_layers(self) -> int:
        return sum(g.num_layers for g in self.groups)

    def layers_of(self, *kinds: Kind) -> int:
        return sum(g.num_layers for g in self.groups if g.kind in kinds)

    @property
    def per_token_bytes(self) -> int:
        """Bytes every further token adds for good: the full and latent layers' share."""
        return sum(g.num_layers * g.values_per_token for g in self.groups if g.window is None) * self.bytes_per_value

    @property
    def state_bytes(self) -> int:
        """Bytes per sequence that do not depend on its length: the linear layers' states."""
        return sum(g.num_layers * g.state_values for g in self.groups) * self.bytes_per_value

    def bytes_at(self, context_len: int) -> CacheBytes:
        """The cache of one sequence of ``context_len`` tokens, split into its three parts."""
        n = _whole("context_len", context_len, allow_zero=True)
        bounded = (
            sum(g.num_layers * g.values_per_token * g.tokens_kept(n) for g in self.groups if g.window is not None)
            * self.bytes_per_value
        )
        return CacheBytes(n, self.per_token_bytes * n, bounded, self.state_bytes)

    def with_bytes_per_value(self, bytes_per_value: int) -> CacheLayout:
        """The same layout stored at another width (1: an 8-bit cache)."""
        return CacheLayout(self.groups, bytes_per_value)


def layout_of(config: object, bytes_per_value: int = 2, window_tokens: int | None = None) -> CacheLayout:
    """The layout of a ``ModelConfig`` (every layer full attention, or every layer a window of ``window_tokens``)."""
    layers, heads, dim = (getattr(config, name) for name in ("num_layers", "num_kv_heads", "head_dim"))
    group = full(layers, heads, dim) if window_tokens is None else window(layers, heads, dim, window_tokens)
    return CacheLayout((group,), bytes_per_value)
