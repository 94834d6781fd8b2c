"""Lesson 26: a multi-turn chat served with each prefix index, as tidy tables (issue 46).

``text_chat`` tokenises a chat (a system prompt and each conversation's user messages) into a ``ChatTrace``;
``serve_indexes`` serves it on an ``LLMEngine`` once per prefix cache (none, the hash chain keeping prompt blocks
only, the hash chain, the radix tree), reporting per cache the prompt tokens found in later turns, the median time
to first token of later turns, and whether every answer equals the uncached run's. ``count_chat`` serves a chat on
the engine's scheduler and KV-cache manager alone, no model (the answers given: seeded ones, or an engine run's,
``replayed``), so its counts are the engine's (tests/simulators/test_sim_radix_chat.py); ``pool_sweep`` runs it on
pools of several sizes, with first come, first served and with longest prefix first; ``admission_order`` shows the
order in which waiting prompts are admitted under each.
"""

from __future__ import annotations

import random
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd

from kvcourse.kernels.memory.radix_chat import ChatTrace, ChatTurn, chat_manager, prompt_only_manager, serve_chat

SERVED = ("none", "hash_prompt_only", "hash", "radix")
SYSTEM = "You are a patient tutor for a course on how language models serve text. Answer in one or two short sentences."
CONVERSATIONS = (  # each begins "What is a", so first turns share a few words past the system prompt
    ("What is a key-value cache?", "Why does it grow with the context?", "How do engines page it?", "What is a block?"),
    ("What is a prefix cache?", "Why share a system prompt?", "What does a hash chain name?", "When is it evicted?"),
    ("What is a radix tree?", "How does it match a prompt?", "Why keep the answers?", "What does lpm order mean?"),
    ("What is a batch?", "What is time to first token?", "Why is decoding memory bound?", "What is a roofline?"),
)
# The pool sweep's chat (no model): benchmarks/bench_radix_chat.py's, 6 conversations of 3-6 turns, answers of 24
SWEEP_TRACE = {"num_conversations": 6, "turns": (3, 6), "system_len": 64, "user_len": (8, 32), "vocab": (100, 20000)}
SWEEP_ANSWER, SWEEP_POOLS = 24, (512, 64, 48, 40, 32, 24)


def chat_policy(cache: str) -> Any:
    """LongestPrefixFirst (SGLang's lpm) for ``radix_lpm``, else the scheduler's first come, first served."""
    from kvcourse.kernels.engine.policy import LongestPrefixFirst

    return LongestPrefixFirst() if cache == "radix_lpm" else None


@dataclass(frozen=True)
class TurnCount:
    """One turn served by the scheduler and the KV-cache manager alone."""

    conversation: int
    turn: int
    prompt_len: int
    found: int  # prompt tokens found in the prefix cache when first admitted
    waited_steps: int  # scheduler steps the turn waited before its first admission


@dataclass(frozen=True)
class ChatCounts:
    """``count_chat``'s result: each turn, the evictions and preemptions, and the tree after every round."""

    turns: list[TurnCount]
    evictions: int
    preemptions: int
    trees: list[list[tuple[bytes, bytes | None, int]]]  # per round, radix only: (node's key, parent's, tokens)

    def found_later_turns(self) -> int:
        return sum(t.found for t in self.turns if t.turn > 0)

    def prompt_tokens_later_turns(self) -> int:
        return sum(t.prompt_len for t in self.turns if t.turn > 0)


def count_chat(
    trace: ChatTrace,
    cache: str,
    num_blocks: int,
    block_size: int,
    answer: Callable[[int, int], list[int]],
    max_num_seqs: int = 64,
) -> ChatCounts:
    """Serve ``trace`` round by round on the engine's scheduler and KV-cache manager alone, no model:
    ``answer(conversation, turn)`` gives each turn's answer (a seeded run of ids, or what a model said)."""
    from kvcourse.kernels.engine.sampling import SamplingParams
    from kvcourse.kernels.engine.scheduler import Scheduler
    from kvcourse.kernels.engine.sequence import Sequence
    from kvcourse.kernels.memory.events import EventKind

    manager = chat_manager(cache, num_blocks, block_size)
    scheduler = Scheduler(manager, max_num_seqs, 2048, 10**9, frozenset(), chat_policy(cache))
    histories = [list(trace.system) for _ in trace.conversations]
    turns: list[TurnCount] = []
    trees: list[list[tuple[bytes, bytes | None, int]]] = []
    for turn in range(max(len(c) for c in trace.conversations)):
        seqs, answers, owner = [], {}, {}  # owner: seq_id -> conversation
        for i, conversation in enumerate(trace.conversations):
            if turn < len(conversation):
                prompt = histories[i] + conversation[turn]
                answers[i] = answer(i, turn)
                params = SamplingParams(max_new_tokens=len(answers[i]), stop_on_eos=False)
                seqs.append(Sequence(scheduler.next_seq_id(), prompt, len(prompt), block_size, params, request_id=i))
                owner[seqs[-1].seq_id] = i
                scheduler.add(seqs[-1])
        first: dict[int, tuple[int, int]] = {}  # seq_id -> (tokens computed when first admitted, step)
        step = 0
        while scheduler.has_work:
            batch = scheduler.schedule()
            live = scheduler.live(batch)
            for part in batch.seqs:
                first.setdefault(part.seq_id, (part.start_position, step))
            sampled = [live[k] for k in batch.sampled]
            scheduler.update(batch, [[answers[owner[s.seq_id]][s.num_completion_tokens]] for s in sampled])
            step += 1
        for seq in seqs:
            histories[owner[seq.seq_id]] = list(seq.token_ids)
            found, waited = first[seq.seq_id]
            turns.append(TurnCount(owner[seq.seq_id], turn, seq.num_prompt_tokens, found, waited))
        index = getattr(manager, "index", None)
        if index is not None:
            trees.append([(n.key, index.parent_key(n), len(n.tokens)) for n in index.nodes.values()])
    evictions = len(manager.events.of_kind(EventKind.EVICT))
    return ChatCounts(turns, evictions, len(manager.events.of_kind(EventKind.PREEMPT)), trees)


def seeded_answers(answer_len: int, vocab: tuple[int, int], seed: int = 0) -> Callable[[int, int], list[int]]:
    """``answer`` for ``count_chat``: each (conversation, turn) a fixed, seeded run of ``answer_len`` ids."""

    def answer(conversation: int, turn: int) -> list[int]:
        rng = random.Random(f"{seed}-{conversation}-{turn}")
        return [rng.randrange(*vocab) for _ in range(answer_len)]

    return answer


def text_chat(tokenizer: Any, system: str, conversations: Sequence[Sequence[str]]) -> ChatTrace:
    """A chat trace of real tokens: the system prompt, then each message as ``"\\nUser: ...\\nAssistant:"``."""

    def ids(text: str) -> list[int]:
        return list(tokenizer(text, add_special_tokens=False)["input_ids"])

    return ChatTrace(ids(system), [[ids(f"\nUser: {m}\nAssistant:") for m in c] for c in conversations])


def serve_one(
    model: Any, trace: ChatTrace, cache: str, num_blocks: int, block_size: int, answer_len: int
) -> list[ChatTurn]:
    """Every turn of ``trace`` served on a fresh engine with one prefix cache (``SERVED`` or ``radix_lpm``)."""
    from kvcourse.kernels.engine.config import EngineConfig
    from kvcourse.kernels.engine.llm_engine import LLMEngine
    from kvcourse.kernels.engine.sampling import SamplingParams

    config = EngineConfig(
        block_size=block_size,
        num_blocks=num_blocks,
        enable_prefix_caching=cache != "none",
        prefix_index="radix" if cache.startswith("radix") else "hash",
    )
    block_manager = prompt_only_manager if cache == "hash_prompt_only" else None
    engine = LLMEngine(model, config, block_manager=block_manager, scheduling_policy=chat_policy(cache))
    params = SamplingParams(max_new_tokens=answer_len, stop_on_eos=False)
    return serve_chat(lambda prompts: engine.generate(prompts, params), trace)


def serve_indexes(
    model: Any, trace: ChatTrace, num_blocks: int, block_size: int, answer_len: int, caches: Sequence[str] = SERVED
) -> tuple[pd.DataFrame, dict[str, list[ChatTurn]]]:
    """One row per cache: prompt tokens found in later turns (of how many), median TTFT of later turns, answers
    equal to the first cache's (``none``). Also each cache's turns."""
    runs = {cache: serve_one(model, trace, cache, num_blocks, block_size, answer_len) for cache in caches}
    reference = [t.answer for t in runs[caches[0]]]
    rows = {}
    for cache, turns in runs.items():
        later = [t for t in turns if t.turn > 0]
        ttfts = [t.ttft_s for t in later if t.ttft_s is not None]
        rows[cache] = {
            "prompt tokens found (later turns)": sum(t.num_cached_tokens for t in later),
            "prompt tokens (later turns)": sum(t.prompt_len for t in later),
            "median TTFT of later turns (ms)": 1000 * statistics.median(ttfts) if ttfts else float("nan"),
            "answers equal to no cache": [t.answer for t in turns] == reference,
        }
    return pd.DataFrame.from_dict(rows, orient="index"), runs


def replayed(turns: Sequence[ChatTurn]) -> Callable[[int, int], list[int]]:
    """``answer`` for ``count_chat``: the answers an engine run gave."""
    answers = {(t.conversation, t.turn): t.answer for t in turns}
    return lambda conversation, turn: answers[(conversation, turn)]


def pool_sweep(
    trace: ChatTrace,
    pools: Sequence[int],
    block_size: int,
    answer: Callable[[int, int], list[int]],
    caches: Sequence[str] = ("hash", "radix", "radix_lpm"),
) -> pd.DataFrame:
    """Per pool size (rows) and cache: prompt tokens found in later turns; per cache also the longest wait (in
    scheduler steps) of a turn before it was first admitted, and the evictions."""
    rows = {}
    for pool in pools:
        row: dict[str, float] = {}
        for cache in caches:
            counts = count_chat(trace, cache, pool, block_size, answer)
            row[f"found: {cache}"] = counts.found_later_turns()
            row[f"longest wait: {cache}"] = max(t.waited_steps for t in counts.turns)
            row[f"evictions: {cache}"] = counts.evictions
        rows[pool] = row
    table = pd.DataFrame.from_dict(rows, orient="index")
    table.index.name = "pool (blocks)"
    return table


def turn_table(runs: dict[str, list[ChatTurn]], conversation: int = 0) -> pd.DataFrame:
    """One conversation's turns (rows): its prompt length, the tokens its previous turn computed (that prompt
    and its answer but the answer's last token, which was sampled, never fed), and each cache's tokens found."""
    caches = [c for c in runs if c != "none"]
    turns = [t for t in runs[caches[0]] if t.conversation == conversation]
    rows = {}
    for k, turn in enumerate(turns):
        computed = turns[k - 1].prompt_len + len(turns[k - 1].answer) - 1 if k else 0
        row = {"prompt tokens": turn.prompt_len, "computed by the previous turn": computed}
        for cache in caches:
            mine = [t for t in runs[cache] if t.conversation == conversation]
            row[f"found: {cache}"] = mine[k].num_cached_tokens
        rows[f"turn {turn.turn + 1}"] = row
    return pd.DataFrame.from_dict(rows, orient="index")


def admission_order(cache: str, cached: list[int], prompts: Sequence[list[int]], block_size: int) -> list[int]:
    """Serve ``cached`` first, then ``prompts`` all waiting at once, one running at a time: the order (indexes
    into ``prompts``) in which they were admitted, under ``cache``'s scheduling policy."""
    from kvcourse.kernels.engine.sampling import SamplingParams
    from kvcourse.kernels.engine.scheduler import Scheduler
    from kvcourse.kernels.engine.sequence import Sequence as Seq

    longest = max(len(p) for p in [cached, *prompts])
    manager = chat_manager(cache, 4 * (longest // block_size + 2), block_size)
    scheduler = Scheduler(manager, 1, 2048, 10**9, frozenset(), chat_policy(cache))
    params = SamplingParams(max_new_tokens=1, stop_on_eos=False)

    def run() -> list[int]:
        admitted: list[int] = []
        while scheduler.has_work:
            batch = scheduler.schedule()
            admitted += [index[s.seq_id] for s in scheduler.live(batch) if index[s.seq_id] not in admitted]
            scheduler.update(batch, [[0] for _ in batch.sampled])
        return admitted

    index: dict[int, int] = {}  # seq_id -> the prompt's index (-1: the cached one)
    for k, prompt in [(-1, cached), *enumerate(prompts)]:
        index[seq_id := scheduler.next_seq_id()] = k
        scheduler.add(Seq(seq_id, list(prompt), len(prompt), block_size, params))
        if k == -1:
            run()
    return run()
