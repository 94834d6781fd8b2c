"""A multi-turn chat trace and how a prefix cache serves it (issue 46).

Each conversation starts from a system prompt that every conversation shares; turn ``t``'s prompt is
turn ``t - 1``'s prompt, the model's answer to it and the next user message, as a chat template lays
them end to end. ``serve_chat`` plays the trace on an engine round by round (turn 1 of every
conversation, then turn 2, ...), so a turn always arrives after the answer it extends, and reports for
each turn the prompt tokens found in the prefix cache and the time to its first token. ``chat_manager`` builds the
engine's KV-cache manager for each cache a chat is served with (``CACHES``; ``prompt_only_manager`` is the hash
chain that keeps only prompt blocks); kernels/measure/chat_prefix.py serves and counts (lesson 26).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kvcourse.kernels.checks import check_positive_int


@dataclass(frozen=True)
class ChatTrace:
    """Token ids of a synthetic chat: one shared system prompt, user messages per conversation."""

    system: list[int]
    conversations: list[list[list[int]]]  # conversation -> turn -> the user's message

    @property
    def num_turns(self) -> int:
        return sum(len(c) for c in self.conversations)


def chat_trace(
    num_conversations: int,
    turns: tuple[int, int] = (3, 6),
    system_len: int = 24,
    user_len: tuple[int, int] = (5, 12),
    vocab: tuple[int, int] = (3, 96),
    seed: int = 0,
) -> ChatTrace:
    """``num_conversations`` of ``turns[0]`` to ``turns[1]`` turns each, drawn from ``vocab`` (lo, hi)."""
    check_positive_int("num_conversations", num_conversations)
    rng = random.Random(seed)

    def message(n: int) -> list[int]:
        return [rng.randrange(*vocab) for _ in range(n)]

    system = message(system_len)
    conversations = [
        [message(rng.randint(*user_len)) for _ in range(rng.randint(*turns))] for _ in range(num_conversations)
    ]
    return ChatTrace(system, conversations)


@dataclass(frozen=True)
class ChatTurn:
    """One served turn."""

    conversation: int
    turn: int  # 0 for the first
    prompt_len: int
    num_cached_tokens: int  # prompt tokens found in the prefix cache
    answer: list[int]
    ttft_s: float | None


def serve_chat(generate: Callable[[list[list[int]]], list[Any]], trace: ChatTrace) -> list[ChatTurn]:
    """Serve every turn of ``trace`` with ``generate`` (e.g. ``lambda p: engine.generate(p, params)``, which
    returns one ``RequestOutput`` per prompt), one round of turns per call."""
    histories = [list(trace.system) for _ in trace.conversations]
    turns: list[ChatTurn] = []
    for turn in range(max(len(c) for c in trace.conversations)):
        live = [i for i, c in enumerate(trace.conversations) if turn < len(c)]
        prompts = [histories[i] + trace.conversations[i][turn] for i in live]
        for i, prompt, out in zip(live, prompts, generate(prompts), strict=True):
            if out.refusal:
                raise RuntimeError(f"conversation {i}, turn {turn} was refused: {out.refusal}")
            histories[i] = prompt + list(out.tokens)
            ttft = out.latency.ttft_s if out.latency is not None else None
            turns.append(ChatTurn(i, turn, len(prompt), out.num_cached_tokens, list(out.tokens), ttft))
    return turns


CACHES = ("hash_prompt_only", "hash", "radix", "radix_lpm")
CACHE_WORDS = {
    "hash_prompt_only": "hash chain, prompt blocks only",
    "hash": "hash chain, answers' blocks kept",
    "radix": "radix tree",
    "radix_lpm": "radix tree, longest prefix first",
}


def prompt_only_manager(num_blocks: int, block_size: int) -> Any:
    """The hash chain caching only blocks that lie inside the prompt: an answer's blocks are not kept."""
    from kvcourse.kernels.memory.kv_cache_manager import KVCacheManager

    class PromptOnly(KVCacheManager):
        def cache_full_blocks(self, seq: Any) -> None:
            computed = seq.num_computed_tokens
            seq.num_computed_tokens = min(computed, seq.num_prompt_tokens)
            super().cache_full_blocks(seq)
            seq.num_computed_tokens = computed

    return PromptOnly(num_blocks, block_size, enable_prefix_caching=True)


def chat_manager(cache: str, num_blocks: int, block_size: int) -> Any:
    """The engine's KV-cache manager for one of ``CACHES`` (or ``"none"``)."""
    from kvcourse.kernels.memory.kv_cache_manager import KVCacheManager
    from kvcourse.kernels.memory.radix_manager import RadixKVCacheManager

    if cache == "hash_prompt_only":
        return prompt_only_manager(num_blocks, block_size)
    if cache.startswith("radix"):
        return RadixKVCacheManager(num_blocks, block_size)
    if cache not in ("hash", "none"):
        raise ValueError(f"unknown cache {cache!r}; choose one of none, {', '.join(CACHES)}")
    return KVCacheManager(num_blocks, block_size, enable_prefix_caching=cache == "hash")
