"""Lesson 26's simulator, its view: a multi-turn chat through the hash chain and the radix tree, round by round.

The config and the model are radix_chat_model.py (``RadixChatConfig``, ``RadixChat``, importable from here too).
The left panel is the prompt tokens each index found in the cache, turn by turn in serving order (the prompt's
length as a grey bar behind them); the right one is the radix tree after the rounds shown: one dot per node (a
block's run of tokens), placed by its block's position in the sequence, held full, held partly filled, or no
longer held (evicted from the leaves, or replaced by a longer run of its own path). Step shows one more round.
"""

from __future__ import annotations

from typing import Any

from kvcourse.simulators.base import SimulatorView
from kvcourse.simulators.controls import dropdown_control, int_control
from kvcourse.simulators.radix_chat_model import BLOCK_SIZES, ORDERS, RadixChat, RadixChatConfig

__all__ = ["RadixChat", "RadixChatConfig", "RadixChatView"]


class RadixChatView(SimulatorView):
    """Conversations, turns, block size, pool: tokens found per turn, hash against radix, and the tree."""

    def __init__(
        self,
        conversations: int = 3,
        turns: int = 3,
        *,
        block_size: int = 4,
        pool_blocks: int = 64,
        system_len: int = 10,
        answer_len: int = 6,
        order: str = "radix",
    ) -> None:
        controls = {
            "conversations": int_control("Conversations", conversations, width="200px"),
            "turns": int_control("Turns each", turns, width="180px"),
            "block_size": dropdown_control(
                "Block (tokens)", [(str(b), b) for b in BLOCK_SIZES], block_size, width="200px"
            ),  # fmt: skip
            "pool_blocks": int_control("Pool (blocks)", pool_blocks, width="200px"),
            "system_len": int_control("System prompt (tokens)", system_len, width="250px"),
            "answer_len": int_control("Answer (tokens)", answer_len, width="210px"),
            "order": dropdown_control("Radix order", ORDERS, order, width="330px"),
        }
        super().__init__(controls, num_axes=2, figsize=(11.5, 4.2), step_label="Next round")

    def build(self, values: dict[str, Any]) -> RadixChat:
        return RadixChat(RadixChatConfig(**values))

    def draw(self, model: RadixChat) -> str:
        self._draw_found(self.axes[0], model)
        self._draw_tree(self.axes[1], model)
        return self._summary(model)

    @staticmethod
    def _draw_found(ax: Any, m: RadixChat) -> None:
        found_hash, found_radix, lens = m.found(m.hash), m.found(m.radix), m.prompt_lens()
        turns = range(1, len(lens) + 1)
        ax.bar(turns, lens, width=0.8, color="0.85", label="prompt")
        ax.bar([t - 0.2 for t in turns], found_hash, width=0.4, color="C0", label="found: hash chain")
        ax.bar([t + 0.2 for t in turns], found_radix, width=0.4, color="C2", label="found: radix tree")
        ax.set_xlabel("turn, in serving order (a round is every conversation's next turn)")
        ax.set_ylabel("prompt tokens")
        ax.set_title(f"tokens found: radix tree {sum(found_radix):,}, hash chain {sum(found_hash):,}")
        ax.xaxis.get_major_locator().set_params(integer=True)
        ax.legend(loc="upper left", fontsize=8)

    @staticmethod
    def _draw_tree(ax: Any, m: RadixChat) -> None:
        nodes = m.nodes()
        children: dict[bytes | None, list[bytes]] = {}
        for key, (parent, _, _) in nodes.items():
            children.setdefault(parent, []).append(key)
        rows: dict[bytes, int] = {}
        depth: dict[bytes, int] = {}

        def place(parent: bytes | None, level: int) -> None:
            for key in children.get(parent, []):
                rows[key], depth[key] = len(rows), level
                place(key, level + 1)

        place(None, 0)
        styles = {"held, full": ("C2", "o"), "held, partly filled": ("C1", "o"), "no longer held": ("0.6", "x")}
        for key, (parent, _, _) in nodes.items():
            if parent in rows:
                ax.plot([depth[parent], depth[key]], [rows[parent], rows[key]], color="0.8", lw=0.8, zorder=1)
        for label, (colour, marker) in styles.items():
            kind = [k for k, (_, n, now) in nodes.items() if k in rows and _kind(n, now, m.config.block_size) == label]
            ax.scatter([depth[k] for k in kind], [rows[k] for k in kind], c=colour, marker=marker, s=28, zorder=2,
                       label=f"{label} ({len(kind)})")  # fmt: skip
        ax.invert_yaxis()
        ax.set_xlabel("block's position in the sequence")
        ax.set_ylabel("node (depth-first order)")
        ax.set_title(f"radix tree after round {m.rounds_shown} of {m.num_rounds}")
        ax.legend(loc="lower left", fontsize=8)

    @staticmethod
    def _summary(m: RadixChat) -> str:
        c = m.config
        found_hash, found_radix = sum(m.found(m.hash)), sum(m.found(m.radix))
        order = "longest prefix first" if c.order == "radix_lpm" else "first come, first served"
        return (
            f"{c.conversations} conversations, round {m.rounds_shown} of {m.num_rounds}, blocks of {c.block_size} "
            f"tokens, a pool of {c.pool_blocks} blocks: the hash chain found <b>{found_hash:,}</b> prompt tokens, "
            f"the radix tree ({order}) <b>{found_radix:,}</b>. Over the whole chat: {m.hash.evictions} and "
            f"{m.radix.evictions} evictions. The tree shows {m.evicted()} nodes no longer held."
        )


def _kind(tokens: int, held: bool, block_size: int) -> str:
    if not held:
        return "no longer held"
    return "held, full" if tokens == block_size else "held, partly filled"
