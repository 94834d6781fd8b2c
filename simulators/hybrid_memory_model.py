"""Lesson 22's simulator, its model: a model of 2026 on a card, per GPU, split into weights and the cache's three parts.

A model's cache at n tokens is ``CacheLayout.bytes_at(n)`` (kernels/cache_layout.py): a part that grows with every
token (full and latent layers), a part bounded by windows and chunks, and a fixed state (linear layers). This model
puts ``num_users`` such caches and the weights on ``tp`` GPUs under tensor parallelism, and says what each GPU
holds. Every rule is stated so that it can be checked by hand (tests/simulators/test_sim_hybrid_memory.py does):

* **Weights** split evenly over the GPUs: ``weight_bytes / tp``. (Engines replicate a few small tensors, norms
  for one; they are left out.)
* **Full, window and chunked layers** split by KV head, as vLLM's attention layers do: each GPU holds
  ``max(1, kv_heads // tp)`` of the ``kv_heads`` heads, so past ``tp = kv_heads`` every GPU keeps one whole head and
  the heads are replicated, not split further (vLLM's ``LlamaAttention``: "Number of KV heads is less than TP size,
  so we replicate the KV heads across multiple tensor parallel GPUs").
* **Latent layers** (MLA) cache one vector per token that every head is rebuilt from: it has no head axis to split,
  so every GPU holds the whole latent, whatever ``tp``. This is why SGLang serves DeepSeek with data-parallel
  attention (each GPU attends for its own requests, so no latent is held twice).
* **Linear layers** (Qwen3-Next's Gated DeltaNet) keep a state per head; it splits like KV heads, over the
  ``linear_num_key_heads`` groups of heads.

A card holds what it is sold as, read in GiB (a card sold as "80 GB" holds 80 GiB, lesson 00; ``hardware.CARDS``).
Nothing is held back and nothing is rounded to blocks: the largest context is the token count at which the last
GPU is exactly full. The view is hybrid_memory.py.
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from kvcourse.kernels.cache_layout import CacheLayout, LayerGroup
from kvcourse.kernels.model.cache_layouts import LAYOUTS_2026
from kvcourse.kernels.model.context_windows import PUBLISHED_2026
from kvcourse.simulators.checks import InvalidInput, check_choice, check_int
from kvcourse.simulators.hardware import CARDS
from kvcourse.simulators.labels import GIB


@dataclass(frozen=True)
class Heads:
    """How a model's attention splits under tensor parallelism, from its config.json."""

    query: int  # num_attention_heads: the TP degree must divide it
    kv: int  # num_key_value_heads of its full, window and chunked layers (0: none)
    linear: int = 0  # linear_num_key_heads of its linear-attention layers (0: none)


# num_attention_heads and num_key_value_heads from each config.json (cache_layouts.py names the files).
HEADS: dict[str, Heads] = {
    "llama-3.1-8b": Heads(32, 8),
    "llama-3.1-70b": Heads(64, 8),
    "qwen3-8b": Heads(32, 8),
    "qwen3-32b": Heads(64, 8),
    "mistral-small-3.1": Heads(32, 8),
    "deepseek-v3": Heads(128, 0),  # latent: 128 heads rebuilt from one vector
    "kimi-k2": Heads(64, 0),
    "gemma-3-27b": Heads(32, 16),
    "gpt-oss-120b": Heads(64, 8),
    "gpt-oss-20b": Heads(64, 8),
    "llama-4-scout": Heads(40, 8),
    "qwen3-next-80b": Heads(16, 2, linear=16),  # linear_num_key_heads 16 (32 value heads)
}

# Weights as published (context_windows.PUBLISHED_2026, with its sources), and three more from their model cards:
# moonshotai/Kimi-K2-Instruct, 1T parameters in FP8 (one byte each); meta-llama/Llama-4-Scout-17B-16E-Instruct,
# 109B parameters in bf16; Qwen/Qwen3-Next-80B-A3B-Instruct, 80B parameters in bf16.
WEIGHT_BYTES: dict[str, int] = {
    **{name: shipped.weight_bytes for name, shipped in PUBLISHED_2026.items()},
    "kimi-k2": round(1.0e12),
    "llama-4-scout": round(109e9) * 2,
    "qwen3-next-80b": round(80e9) * 2,
}
# max_position_embeddings of each config.json (PUBLISHED_2026 names the rest): Kimi-K2 131,072, Llama-4-Scout
# 10,485,760, Qwen3-Next 262,144.
POSITIONS: dict[str, int] = {
    **{name: shipped.positions for name, shipped in PUBLISHED_2026.items()},
    "kimi-k2": 131_072,
    "llama-4-scout": 10_485_760,
    "qwen3-next-80b": 262_144,
}
MODELS = tuple(LAYOUTS_2026)
CACHE_BYTES_PER_VALUE = {"16-bit (2 bytes)": 2, "8-bit FP8 (1 byte)": 1}
TP_DEGREES = (1, 2, 4, 8, 16)
DEFAULT_CARD = "H100 80GB"
MAX_USERS = 100_000
MAX_CONTEXT = 100_000_000
SEARCH_LIMIT = 2**34  # tokens: past every context a GPU here can hold


@dataclass(frozen=True)
class GpuBytes:
    """What one GPU holds: the weights' share and the three parts of the users' caches."""

    weights: int
    growing: int
    bounded: int
    state: int

    @property
    def cache(self) -> int:
        return self.growing + self.bounded + self.state

    @property
    def total(self) -> int:
        return self.weights + self.cache


def group_share(group: LayerGroup, heads: Heads, tp: int) -> float:
    """The share of one layer group's cache that each of ``tp`` GPUs holds (1.0: all of it)."""
    if group.kind == "latent":
        return 1.0  # no head axis: every GPU keeps the whole latent
    split = heads.linear if group.kind == "linear" else heads.kv
    return max(1, split // tp) / split


def per_gpu_bytes(name: str, context_len: int, num_users: int, tp: int, cache_bytes_per_value: int = 2) -> GpuBytes:
    """One GPU's bytes for ``num_users`` users of ``context_len`` tokens each, the model on ``tp`` GPUs."""
    heads = HEADS[name]
    parts = {"growing": 0.0, "bounded": 0.0, "state": 0.0}
    for group in LAYOUTS_2026[name].groups:
        one = CacheLayout((group,), cache_bytes_per_value).bytes_at(context_len)
        share = group_share(group, heads, tp) * num_users
        parts["growing"] += one.growing * share
        parts["bounded"] += one.bounded * share
        parts["state"] += one.state * share
    rounded = {part: round(value) for part, value in parts.items()}
    return GpuBytes(WEIGHT_BYTES[name] // tp, **rounded)


def largest_context(name: str, card_bytes: int, num_users: int, tp: int, cache_bytes_per_value: int = 2) -> int:
    """The most tokens each of ``num_users`` users can have with every GPU's bytes within ``card_bytes``
    (0: the weights' share alone, or the users' fixed states, leave no room for even one token)."""
    if per_gpu_bytes(name, 0, num_users, tp, cache_bytes_per_value).total > card_bytes:
        return 0
    low, high = 0, SEARCH_LIMIT
    while low < high:  # the cache only grows with the context, so bisect on it
        mid = (low + high + 1) // 2
        fits = per_gpu_bytes(name, mid, num_users, tp, cache_bytes_per_value).total <= card_bytes
        low, high = (mid, high) if fits else (low, mid - 1)
    return low


def cache_passes_weights(name: str, tp: int = 1, cache_bytes_per_value: int = 2) -> int:
    """The fewest tokens at which one user's cache on a GPU weighs more than the weights on it."""
    low, high = 0, SEARCH_LIMIT
    while low < high:
        mid = (low + high) // 2
        gpu = per_gpu_bytes(name, mid, 1, tp, cache_bytes_per_value)
        low, high = (low, mid) if gpu.cache > gpu.weights else (mid + 1, high)
    return low


def fit_table(names: list[str], card: str, context_len: int, num_users: int, tp: int = 1) -> pd.DataFrame:
    """One row per model on ``tp`` cards named ``card``: per GPU, its weights and the users' cache at
    ``context_len`` (GB), whether they fit, and the largest context each user could have (16-bit caches)."""
    card_bytes = round(CARDS[card].memory_gib * GIB)
    rows = {}
    for name in names:
        gpu = per_gpu_bytes(name, context_len, num_users, tp)
        rows[name] = {
            "weights per GPU (GB)": round(gpu.weights / 1e9, 1),
            "cache per GPU (GB)": round(gpu.cache / 1e9, 1),
            "fits": gpu.total <= card_bytes,
            "largest context per user": largest_context(name, card_bytes, num_users, tp),
        }
    return pd.DataFrame.from_dict(rows, orient="index")


def parts_table(names: list[str], contexts: list[int]) -> pd.DataFrame:
    """One row per model and context: one user's 16-bit cache split into its three parts, and its total (GB)."""
    rows = []
    for name in names:
        for n in contexts:
            at = LAYOUTS_2026[name].bytes_at(n)
            rows.append(
                {
                    "model": name,
                    "context": n,
                    "growing (GB)": at.growing / 1e9,
                    "bounded (GB)": at.bounded / 1e9,
                    "state (GB)": at.state / 1e9,
                    "total (GB)": at.total / 1e9,
                }
            )
    return pd.DataFrame(rows).set_index(["model", "context"]).round(3)


def crossover_table(names: list[str]) -> pd.DataFrame:
    """One row per model: its weights as published, the bytes every token adds, the context at which one user's
    16-bit cache passes the weights (all on one GPU), and the positions its config declares."""
    rows = {}
    for name in names:
        passes = cache_passes_weights(name)
        rows[name] = {
            "weights (GB)": round(WEIGHT_BYTES[name] / 1e9, 1),
            "bytes per token": LAYOUTS_2026[name].per_token_bytes,
            "cache passes weights at (tokens)": passes,
            "config's positions": POSITIONS[name],
            "within its positions": passes <= POSITIONS[name],
        }
    return pd.DataFrame.from_dict(rows, orient="index")


def per_gpu_table(names: list[str], context_len: int, tps: list[int]) -> pd.DataFrame:
    """One row per model: one user's 16-bit cache at ``context_len`` held on each GPU (GB), for each TP degree."""
    rows = {name: {f"TP {tp}": per_gpu_bytes(name, context_len, 1, tp).cache / 1e9 for tp in tps} for name in names}
    return pd.DataFrame.from_dict(rows, orient="index").round(3)


@dataclass(frozen=True)
class HybridMemoryConfig:
    """A model of 2026, a card, tensor parallelism over ``tp`` of them, and the users it serves (lesson 22)."""

    model: str = "gemma-3-27b"
    card: str = DEFAULT_CARD
    tp: int = 1
    context_tokens: int = 32_768
    num_users: int = 8
    cache_bytes_per_value: int = 2

    def __post_init__(self) -> None:
        check_choice("Model", self.model, [(name, name) for name in MODELS])
        check_choice("GPU", self.card, [(name, name) for name in CARDS])
        check_choice("GPUs (tensor parallel)", self.tp, [(str(tp), tp) for tp in TP_DEGREES])
        check_int("Context per user (tokens)", self.context_tokens, 0, MAX_CONTEXT)
        check_int("Users", self.num_users, 1, MAX_USERS)
        check_choice("Cache bytes per value", self.cache_bytes_per_value, list(CACHE_BYTES_PER_VALUE.items()))
        query = HEADS[self.model].query
        if query % self.tp:
            raise InvalidInput(
                f"{self.model} has {query} query heads, which {self.tp} GPUs cannot share out evenly: tensor "
                f"parallelism gives each GPU the same number of heads, so pick a number of GPUs that divides {query}."
            )

    @property
    def card_bytes(self) -> int:
        return round(CARDS[self.card].memory_gib * GIB)


class HybridMemory:
    """Per GPU: the weights' share and the users' caches at a context; ``step()`` doubles the context."""

    def __init__(self, config: HybridMemoryConfig) -> None:
        self.config = config
        self.context_tokens = config.context_tokens

    def step(self) -> None:
        """Double each user's context (from 0, go to 1,024)."""
        doubled = max(1024, 2 * self.context_tokens)
        if doubled > MAX_CONTEXT:
            raise InvalidInput(f"doubling again would pass {MAX_CONTEXT:,} tokens per user; press Reset.")
        self.context_tokens = doubled

    def reset(self) -> None:
        self.context_tokens = self.config.context_tokens

    @property
    def layout(self) -> CacheLayout:
        return LAYOUTS_2026[self.config.model].with_bytes_per_value(self.config.cache_bytes_per_value)

    def gpu_at(self, context_len: int) -> GpuBytes:
        c = self.config
        return per_gpu_bytes(c.model, context_len, c.num_users, c.tp, c.cache_bytes_per_value)

    @property
    def gpu(self) -> GpuBytes:
        return self.gpu_at(self.context_tokens)

    @property
    def fits(self) -> bool:
        return self.gpu.total <= self.config.card_bytes

    @property
    def weights_fit(self) -> bool:
        return self.gpu_at(0).weights <= self.config.card_bytes

    @property
    def largest_context(self) -> int:
        c = self.config
        return largest_context(c.model, c.card_bytes, c.num_users, c.tp, c.cache_bytes_per_value)

    @property
    def cache_passes_weights(self) -> int:
        """One user's context at which the cache on a GPU passes the weights on it."""
        return cache_passes_weights(self.config.model, self.config.tp, self.config.cache_bytes_per_value)

    @property
    def shares(self) -> dict[str, float]:
        """Each layer kind's share of its cache that one GPU holds."""
        heads, tp = HEADS[self.config.model], self.config.tp
        return {group.kind: group_share(group, heads, tp) for group in self.layout.groups}
