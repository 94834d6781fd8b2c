"""Lesson 26's model: a multi-turn chat through a prefix cache, hash chain against radix tree, turn by turn.

A chat (``conversations`` of ``turns`` turns, one shared system prompt, user messages and answers of token ids
drawn with a seed) is served round by round: every conversation's turn 1, then turn 2, ... Each turn's prompt is
the last prompt, its answer and the next message. The serving is the engine's own: its scheduler and KV-cache
manager (``kvcourse.kernels.measure.chat_prefix.count_chat``) with a pool of ``pool_blocks`` blocks of
``block_size`` tokens, no model (the answers are given), once with the hash chain and once with the radix tree
(and, where asked, with the radix tree and longest prefix first). Per turn: the prompt tokens each found in the
cache; after each round, the radix tree's nodes, and which nodes it has held and no longer holds (evicted: only
leaves are chosen; a node whose block is reused for its own path's longer run is replaced, not evicted).
tests/simulators/test_sim_radix_chat.py checks the counts against LLMEngine serving the same chat.
The view is radix_chat.py.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvcourse.kernels.checks import ceil_div
from kvcourse.kernels.measure.chat_prefix import ChatCounts, count_chat, seeded_answers
from kvcourse.kernels.memory.radix_chat import ChatTrace, chat_trace
from kvcourse.simulators.checks import InvalidInput, check_int

BLOCK_SIZES = (4, 8, 16)
VOCAB = (100, 20000)
MAX_CONVERSATIONS, MAX_TURNS, MAX_POOL = 6, 6, 4096
MESSAGE = (3, 8)  # a user message's tokens, lowest and highest
ORDERS = (("first come, first served", "radix"), ("longest prefix first", "radix_lpm"))


@dataclass(frozen=True)
class RadixChatConfig:
    conversations: int = 3
    turns: int = 3
    block_size: int = 4
    pool_blocks: int = 64
    system_len: int = 10
    answer_len: int = 6
    order: str = "radix"  # the radix tree's scheduling: "radix" (FCFS) or "radix_lpm"
    seed: int = 0

    def __post_init__(self) -> None:
        check_int("conversations", self.conversations, 1, MAX_CONVERSATIONS)
        check_int("turns", self.turns, 1, MAX_TURNS)
        check_int("system prompt (tokens)", self.system_len, 1, 256)
        check_int("answer (tokens)", self.answer_len, 1, 64)
        if self.block_size not in BLOCK_SIZES:
            raise InvalidInput(f"block size must be one of {', '.join(map(str, BLOCK_SIZES))}")
        if self.order not in ("radix", "radix_lpm"):
            raise InvalidInput("order must be radix or radix_lpm")
        check_int("pool (blocks)", self.pool_blocks, self.min_pool, MAX_POOL)

    @property
    def longest_sequence(self) -> int:
        """The last turn's prompt and answer, at the longest messages."""
        return self.system_len + self.turns * (MESSAGE[1] + self.answer_len)

    @property
    def min_pool(self) -> int:
        """Blocks one sequence needs alone, and one for a copy: smaller pools cannot serve the last turn."""
        return ceil_div(self.longest_sequence, self.block_size) + 1


class RadixChat:
    """The chat served with both indexes; ``step`` shows one more round."""

    def __init__(self, config: RadixChatConfig) -> None:
        self.config = c = config
        self.trace: ChatTrace = chat_trace(c.conversations, (c.turns, c.turns), c.system_len, MESSAGE, VOCAB, c.seed)
        answer = seeded_answers(c.answer_len, VOCAB, c.seed)
        self.hash: ChatCounts = count_chat(self.trace, "hash", c.pool_blocks, c.block_size, answer)
        self.radix: ChatCounts = count_chat(self.trace, c.order, c.pool_blocks, c.block_size, answer)
        self.rounds_shown = 1

    @property
    def num_rounds(self) -> int:
        return self.config.turns

    def step(self) -> None:
        if self.rounds_shown >= self.num_rounds:
            raise InvalidInput("every turn is shown: press Reset, or change a setting")
        self.rounds_shown += 1

    def found(self, counts: ChatCounts) -> list[int]:
        """Prompt tokens found per turn shown, in serving order."""
        return [t.found for t in counts.turns if t.turn < self.rounds_shown]

    def prompt_lens(self) -> list[int]:
        return [t.prompt_len for t in self.radix.turns if t.turn < self.rounds_shown]

    def nodes(self) -> dict[bytes, tuple[bytes | None, int, bool]]:
        """Every radix node held after any round shown: key -> (parent's key, tokens, held now)."""
        held = {key for key, _, _ in self.radix.trees[self.rounds_shown - 1]}
        seen: dict[bytes, tuple[bytes | None, int, bool]] = {}
        for tree in self.radix.trees[: self.rounds_shown]:
            for key, parent, tokens in tree:
                seen[key] = (parent, tokens, key in held)
        return seen

    def evicted(self) -> int:
        """Nodes held after an earlier round shown and not now (evicted, or replaced by a longer run)."""
        return sum(1 for _, _, now in self.nodes().values() if not now)
