"""Lesson 16's model: chapter 003's ways to shrink the cache, switched on one by one over one memory budget.

Every technique changes one factor of what a user's cache costs:

* **key/value heads** (grouped-query and multi-query attention) and **int8 values** change the bytes
  per token, through the cost model: ``costs.kv_bytes_per_token`` for the model's own values and
  ``costs.quantized_kv_bytes_per_token`` (1-byte values plus one 4-byte scale per token, per KV head,
  for K and for V) for int8;
* **paging** changes how much of the memory holds real tokens. Without it, each user's tokens are
  charged at the share of reserved memory that lesson 09's trace found filled with real tokens
  (``reservation_filled``, 31 % on ``workload.LESSON_TRACE``); with it, a user holds whole blocks
  of ``block_size`` tokens, so only the last block's tail is empty;
* **prefix caching** stores the full blocks of a prompt opening that every user shares once, for
  all of them (it needs paging: blocks are what is shared; the block holding a prompt's last token
  is never shared, as in the engine);
* a **sliding window** keeps only the last ``window_tokens`` tokens of each user, so a user's cache
  stops growing there. Once a conversation is longer than the window, the shared opening has slid
  out of every user's window and is no longer held.

The three numbers the lesson compares come out side by side: bytes per token, the users whose
caches fit at once at one context length, and the longest context one user can keep (lesson 15's
window: the memory ÷ bytes per token; unlimited with a sliding window, which forgets instead).
tests/simulators/test_sim_shrink.py checks the bytes per token against the engine's int8, sliding-window and
regrouped caches, and the users that fit with paging against LLMEngine's admissions.

What a change to the model costs in answers, the lesson measures on the model itself with
``kvcourse.kernels.next_token_agreement`` and ``first_difference`` (kernels/measure/agreement.py).

The view that draws all of this is shrink.py.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from enum import StrEnum

from kvcourse.kernels import ModelConfig, costs
from kvcourse.simulators.checks import InvalidInput, check_choice, check_float, check_int, model_shape
from kvcourse.simulators.labels import GB, bytes_per_value_choices


class KVHeads(StrEnum):
    """How many key/value heads the cache keeps per layer (lesson 16)."""

    MHA = "mha"  # one per query head: multi-head attention
    SHIPPED = "shipped"  # as the model ships (grouped-query attention for most)
    MQA = "mqa"  # just one: multi-query attention


KV_HEAD_CHOICES = (
    ("MHA: one per query head", KVHeads.MHA),
    ("as the model ships", KVHeads.SHIPPED),
    ("MQA: just one", KVHeads.MQA),
)
BYTES_PER_VALUE_CHOICES = bytes_per_value_choices(4, 2)  # int8 is a switch of its own, its scales counted
LESSON_09_FILLED = 0.311  # share of a reserving pool that held real tokens on LESSON_TRACE (lesson 09)
SCALE_BYTES = 4  # one float32 scale per token, per KV head, for K and for V (kernels/attention/backends/int8.py)
MAX_GB = 1e5
MAX_TOKENS = 10_000_000
MAX_USERS_DRAWN = 10**9
TECHNIQUES = ("gqa", "mqa", "int8", "paging", "prefix", "window")  # the order Step switches them on


@dataclass(frozen=True)
class ShrinkConfig:
    """One memory budget, one context length, and which of chapter 003's techniques are on (lesson 16)."""

    model: str = "smollm2-135m"
    kv_budget_gb: float = 1.0
    context_tokens: int = 512
    bytes_per_value: int = 2
    kv_heads: KVHeads = KVHeads.SHIPPED
    int8: bool = False
    paging: bool = False
    prefix: bool = False
    prefix_tokens: int = 0
    window: bool = False
    window_tokens: int = 4096
    block_size: int = 16
    reservation_filled: float = LESSON_09_FILLED
    model_config: ModelConfig | None = None  # a shape of one's own; None: the preset's

    def __post_init__(self) -> None:
        model_shape(self.model, self.model_config)  # an unknown preset name is an input error
        check_float("KV memory (GB)", self.kv_budget_gb, 1e-9, MAX_GB)
        check_int("Context per user (tokens)", self.context_tokens, 1, MAX_TOKENS)
        check_choice("Values in (bytes)", self.bytes_per_value, BYTES_PER_VALUE_CHOICES)
        check_choice("Key/value heads", self.kv_heads, KV_HEAD_CHOICES)
        object.__setattr__(self, "kv_heads", KVHeads(self.kv_heads))  # a typed "mqa" becomes KVHeads.MQA
        check_int("Shared prefix (tokens)", self.prefix_tokens, 0, self.context_tokens)
        check_int("Window (tokens)", self.window_tokens, 1, MAX_TOKENS)
        check_int("block_size", self.block_size, 1, 1024)
        check_float("reservation_filled", self.reservation_filled, 1e-6, 1.0)
        if self.prefix and not self.paging:
            raise InvalidInput("prefix caching shares blocks, so it needs paging: tick paging too.")

    @property
    def base_shape(self) -> ModelConfig:
        return model_shape(self.model, self.model_config)

    @property
    def shape(self) -> ModelConfig:
        """The model with the chosen number of key/value heads."""
        base = self.base_shape
        heads = {KVHeads.MHA: base.num_heads, KVHeads.SHIPPED: base.num_kv_heads, KVHeads.MQA: 1}[self.kv_heads]
        return dataclasses.replace(base, num_kv_heads=heads)

    def with_technique(self, name: str) -> ShrinkConfig:
        """This config with one more technique on (the order of TECHNIQUES)."""
        changes = {
            "gqa": {"kv_heads": KVHeads.SHIPPED},
            "mqa": {"kv_heads": KVHeads.MQA},
            "int8": {"int8": True},
            "paging": {"paging": True},
            "prefix": {"prefix": True},
            "window": {"window": True},
        }[name]
        return dataclasses.replace(self, **changes)

    def is_on(self, name: str) -> bool:
        """Whether a technique is on and changes something for this model."""
        base = self.base_shape
        if name == "gqa":
            return self.kv_heads is not KVHeads.MHA and base.num_kv_heads < base.num_heads
        if name == "mqa":
            return self.kv_heads is KVHeads.MQA and base.num_kv_heads > 1
        return bool(getattr(self, name))

    @property
    def nothing_on(self) -> ShrinkConfig:
        """The same budget and context with every technique off: multi-head attention, reserved regions."""
        return dataclasses.replace(self, kv_heads=KVHeads.MHA, int8=False, paging=False, prefix=False, window=False)


class Shrink:
    """What one user's cache costs under a ShrinkConfig, and who fits; step() switches on the next technique."""

    def __init__(self, config: ShrinkConfig) -> None:
        self.start = config
        self.config = config

    def reset(self) -> None:
        self.config = self.start

    @property
    def next_technique(self) -> str | None:
        c = self.config
        for name in TECHNIQUES:
            if c.is_on(name) or (name == "gqa" and c.kv_heads is not KVHeads.MHA):
                continue
            if name == "mqa" and c.base_shape.num_kv_heads == 1:
                continue  # the model already ships with one KV head
            if name == "gqa" and c.base_shape.num_kv_heads == c.base_shape.num_heads:
                continue  # multi-head as shipped: grouped-query attention is not an option it has
            return name
        return None

    def step(self) -> str:
        """Switch on the next technique of chapter 003's table; return its name."""
        name = self.next_technique
        if name is None:
            raise InvalidInput("every technique is on; press Reset to start again.")
        self.config = self.config.with_technique(name)
        return name

    # -- per token ---------------------------------------------------------------------------------
    @property
    def bytes_per_token(self) -> int:
        """K and V of one token over all layers, scales included for int8 (the cost model)."""
        c = self.config
        if c.int8:
            return costs.quantized_kv_bytes_per_token(c.shape, 1, SCALE_BYTES)
        return costs.kv_bytes_per_token(c.shape, c.bytes_per_value)

    @property
    def block_bytes(self) -> int:
        return self.bytes_per_token * self.config.block_size

    @property
    def budget_bytes(self) -> int:
        return round(self.config.kv_budget_gb * GB)

    # -- per user ----------------------------------------------------------------------------------
    def held_tokens(self, context_tokens: int) -> int:
        """Tokens whose K and V a user of this context keeps: all of them, or the last window."""
        c = self.config
        return min(context_tokens, c.window_tokens) if c.window else context_tokens

    def shared_prefix(self, context_tokens: int) -> int:
        """Tokens of the shared opening that prefix caching can share at this context (0: none)."""
        c = self.config
        if not (c.prefix and c.paging) or self.held_tokens(context_tokens) < context_tokens:
            return 0  # no sharing, or the opening has slid out of every user's window
        return c.prefix_tokens

    def _blocks(self, context_tokens: int, num_users: int) -> int:
        return costs.kv_blocks_needed(
            self.held_tokens(context_tokens), self.config.block_size, num_users, self.shared_prefix(context_tokens)
        )

    def shared_blocks(self, context_tokens: int) -> int:
        """Whole blocks of the opening stored once for everyone (never the block of a last token)."""
        return 2 * self._blocks(context_tokens, 1) - self._blocks(context_tokens, 2)

    def bytes_per_user(self, context_tokens: int) -> float:
        """What one more user of this context takes from the memory (the shared blocks not counted)."""
        c = self.config
        if not c.paging:
            return self.held_tokens(context_tokens) * self.bytes_per_token / c.reservation_filled
        return (self._blocks(context_tokens, 2) - self._blocks(context_tokens, 1)) * self.block_bytes

    @property
    def num_blocks(self) -> int:
        """Whole blocks in the budget, as a paged pool cuts it."""
        return self.budget_bytes // self.block_bytes

    def users_at(self, context_tokens: int) -> int:
        """Users of this context whose caches fit in the budget at once."""
        c = self.config
        if not c.paging:
            return min(MAX_USERS_DRAWN, math.floor(self.budget_bytes / self.bytes_per_user(context_tokens)))
        shared, own = (
            self.shared_blocks(context_tokens),
            self._blocks(context_tokens, 2) - self._blocks(context_tokens, 1),
        )
        return 0 if shared > self.num_blocks else min(MAX_USERS_DRAWN, (self.num_blocks - shared) // own)

    @property
    def users_fit(self) -> int:
        return self.users_at(self.config.context_tokens)

    @property
    def longest_context(self) -> int | None:
        """The longest context one user can have in the budget (None: unlimited, a window forgets instead).

        The same accounting as users_at: the largest context at which one user fits.
        """
        c = self.config
        if c.window and self.users_at(c.window_tokens) >= 1:
            return None
        if c.paging:
            return costs.pool_window(self.num_blocks, c.block_size)
        return math.floor(self.budget_bytes * c.reservation_filled / self.bytes_per_token)

    def stages(self) -> list[tuple[str, Shrink]]:
        """Nothing on, then each technique that is on, added in table order: (label, the model then)."""
        config = self.config.nothing_on
        out = [("nothing on", Shrink(config))]
        for name in TECHNIQUES:
            if self.config.is_on(name):
                config = config.with_technique(name)
                out.append((self.label(name), Shrink(config)))
        return out

    def label(self, name: str) -> str:
        c = self.config
        return {
            "gqa": f"+ GQA ({c.base_shape.num_kv_heads} KV heads)",
            "mqa": "+ MQA (1 KV head)",
            "int8": "+ int8 and scales",
            "paging": f"+ paging ({c.block_size}-token blocks)",
            "prefix": f"+ prefix caching ({c.prefix_tokens:,} shared)",
            "window": f"+ sliding window ({c.window_tokens:,})",
        }[name]
