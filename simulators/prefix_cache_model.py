"""Lesson 13's simulator, config and model: requests served one after another through a prefix cache.

Each prompt is cut into blocks of ``block_size`` tokens. Every full block is named by the engine's
own ``block_hash(parent block's hash, its tokens)``, so a block's name stands for every token up
to its end. A new request walks its chain from the first block and stops at the first name the
pool does not hold: those blocks are **hits**, shared instead of computed; everything after them
is computed (a **miss**). As in the engine, the block holding the prompt's last token is always
computed, because the first answer token needs that token's logits.

Requests are served to their first token, one after another (the engine with
``max_new_tokens=1``). The pool is the engine's ``BlockPool``: a finished request's blocks go
back to it, the full ones still holding their keys, values and names; when a request needs more
blocks than hold nothing, the pool reclaims cached blocks, least recently used first.
tests/simulators/test_sim_prefix_cache.py checks the hits and the evictions against ``LLMEngine``.
Lab B (lesson 19) serves them with the learner's eviction policy (``LearnerPrefixCache`` in learner_policy.py
builds on this module); the view is prefix_cache.py.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from kvcourse.kernels import BlockPool, block_hash
from kvcourse.kernels.checks import ceil_div
from kvcourse.simulators.checks import InvalidInput, check_int

MAX_REQUESTS = 8
MAX_PROMPT_TOKENS = 8192
MAX_BLOCK_SIZE = 1024
MAX_POOL_BLOCKS = 4096


def full_block_hashes(token_ids: Sequence[int], block_size: int) -> list[bytes]:
    """The chained names of every full block: hash(previous name, this block's tokens) (lesson 13)."""
    hashes: list[bytes] = []
    for start in range(0, len(token_ids) - block_size + 1, block_size):
        hashes.append(block_hash(hashes[-1] if hashes else None, list(token_ids[start : start + block_size])))
    return hashes


def words_to_ids(texts: Sequence[str]) -> list[list[int]]:
    """Whitespace-separated words as token ids: equal words get equal ids, in order of first appearance."""
    vocab: dict[str, int] = {}
    return [[vocab.setdefault(word, len(vocab)) for word in text.split()] for text in texts]


@dataclass(frozen=True)
class PrefixCacheConfig:
    """Prompts (token ids) served in order, the block size, and the pool's size in blocks (lesson 13)."""

    prompts: tuple[tuple[int, ...], ...]
    block_size: int = 16
    num_blocks: int = 64

    def __post_init__(self) -> None:
        if not isinstance(self.prompts, (tuple, list)) or not 1 <= len(self.prompts) <= MAX_REQUESTS:
            raise InvalidInput(f"give between 1 and {MAX_REQUESTS} requests.")
        prompts = []
        for number, prompt in enumerate(self.prompts, start=1):
            ids = tuple(prompt)
            if not ids:
                raise InvalidInput(f"Request {number}'s prompt is empty: type at least one token.")
            if len(ids) > MAX_PROMPT_TOKENS:
                raise InvalidInput(
                    f"Request {number}'s prompt has {len(ids):,} tokens; at most {MAX_PROMPT_TOKENS:,} are simulated."
                )
            if not all(isinstance(t, int) and not isinstance(t, bool) and t >= 0 for t in ids):
                raise InvalidInput(f"Request {number}'s token ids must be whole numbers >= 0.")
            prompts.append(ids)
        object.__setattr__(self, "prompts", tuple(prompts))
        check_int("Block size (tokens)", self.block_size, 1, MAX_BLOCK_SIZE)
        check_int("Pool size (blocks)", self.num_blocks, 1, MAX_POOL_BLOCKS)


@dataclass(frozen=True)
class BlockResult:
    """One block of one request: where it lives, its name, and whether it was found in the cache."""

    index: int  # logical block: the index-th block_size tokens of the prompt
    block_id: int  # physical block in the pool
    num_tokens: int
    block_hash: bytes | None  # None for a partial block, which is never named or cached
    hit: bool

    @property
    def short_hash(self) -> str:
        return self.block_hash.hex()[:4] if self.block_hash else ""


@dataclass(frozen=True)
class RequestResult:
    """What serving one request did: its blocks, hit or computed, and the cached blocks it evicted."""

    number: int  # 0-based position in the queue
    num_tokens: int
    blocks: tuple[BlockResult, ...] = ()
    evicted: tuple[tuple[int, int], ...] = ()  # (request, block index) of cached blocks reclaimed for it
    refusal: str | None = None

    @property
    def num_cached_tokens(self) -> int:
        """Prompt tokens whose keys and values came from the cache (the engine's ``num_cached_tokens``)."""
        return sum(b.num_tokens for b in self.blocks if b.hit)

    @property
    def num_computed_tokens(self) -> int:
        """Prompt tokens the model had to run: everything after the last hit."""
        return 0 if self.refusal else self.num_tokens - self.num_cached_tokens

    @property
    def hit_block_ids(self) -> list[int]:
        return [b.block_id for b in self.blocks if b.hit]


@dataclass(frozen=True)
class PoolBlock:
    """One physical block after the last request: the prefix it names (if any) and its eviction rank."""

    block_id: int
    origin: tuple[int, int] | None  # (request, block index) that computed it; None: holds nothing reusable
    eviction_rank: int | None  # 1 = the next cached block to be reclaimed


class PrefixCache:
    """Serve the prompts one by one through a prefix cache on the engine's BlockPool (lesson 13)."""

    def __init__(self, config: PrefixCacheConfig, num_served: int = 0) -> None:
        self.config = config
        self.reset()
        for _ in range(min(num_served, len(config.prompts))):
            self.step()

    def reset(self) -> None:
        self.pool = BlockPool(self.config.num_blocks)
        self.results: list[RequestResult] = []
        self._origin: dict[int, tuple[int, int]] = {}  # cached block -> (request, block index)
        self.evicted_by: dict[tuple[int, int], int] = {}  # (request, block index) -> the request that evicted it

    @property
    def num_served(self) -> int:
        return len(self.results)

    @property
    def done(self) -> bool:
        return self.num_served >= len(self.config.prompts)

    def step(self) -> RequestResult:
        """Serve the next request to its first token; its blocks go back to the pool afterwards."""
        if self.done:
            raise InvalidInput("every request has been served; press Reset to start again.")
        number, ids, bs = self.num_served, self.config.prompts[self.num_served], self.config.block_size
        needed = ceil_div(len(ids) + 1, bs)  # the prompt and its first answer token, as the engine checks
        if needed > self.config.num_blocks:
            result = RequestResult(
                number,
                len(ids),
                refusal=(
                    f"{len(ids):,} prompt tokens and the first answer token need {needed:,} blocks of {bs}, "
                    f"but the pool holds {self.config.num_blocks:,}: it could never fit"
                ),
            )
        else:
            result = self._serve(number, list(ids))
        self.results.append(result)
        return result

    def _serve(self, number: int, ids: list[int]) -> RequestResult:
        bs = self.config.block_size
        hashes = full_block_hashes(ids, bs)
        # 1. Walk the chain; stop at the first miss. The block holding the last token never hits.
        hits: list[int] = []
        for i in range((len(ids) - 1) // bs):
            block_id = self.pool.lookup(hashes[i], ids[i * bs : (i + 1) * bs])
            if block_id is None:
                break
            hits.append(block_id)
        # 2. Hold the hits first (so nothing evicts them), then take fresh blocks for the rest.
        for block_id in hits:
            self.pool.hit(block_id)  # counts the hit and when, as the engine's manager does
        eviction_order = [b for b in self.pool.free_block_ids if b in self._origin]
        table = hits + [self.pool.allocate(number) for _ in range(ceil_div(len(ids), bs) - len(hits))]
        evicted = []
        for block_id in eviction_order:
            if not self.pool.is_cached(block_id):  # allocate reclaimed it: its name is forgotten
                origin = self._origin.pop(block_id)
                self.evicted_by[origin] = number
                evicted.append(origin)
        # 3. The prompt is computed; every full block gets its name and becomes findable.
        for i, h in enumerate(hashes):
            if self.pool.cache_block(table[i], h, ids[i * bs : (i + 1) * bs], hashes[i - 1] if i else None, depth=i):
                self._origin[table[i]] = (number, i)
        # 4. The request ends: its blocks go back, the tail first, so tails are reclaimed before heads.
        for block_id in reversed(table):
            self.pool.release(block_id, number)
        blocks = tuple(
            BlockResult(i, block_id, min(bs, len(ids) - i * bs), hashes[i] if i < len(hashes) else None, i < len(hits))
            for i, block_id in enumerate(table)
        )
        return RequestResult(number, len(ids), blocks, tuple(evicted))

    # -- derived numbers -----------------------------------------------------------------------------
    @property
    def num_prompt_tokens(self) -> int:
        return sum(r.num_tokens for r in self.results if r.refusal is None)

    @property
    def num_cached_tokens(self) -> int:
        return sum(r.num_cached_tokens for r in self.results)

    @property
    def num_computed_tokens(self) -> int:
        return sum(r.num_computed_tokens for r in self.results)

    def pool_blocks(self) -> list[PoolBlock]:
        """Every physical block now: which request's prefix it holds, and its place in the eviction order."""
        cached_order = [b for b in self.pool.free_block_ids if b in self._origin]
        rank = {block_id: i + 1 for i, block_id in enumerate(cached_order)}
        return [PoolBlock(b, self._origin.get(b), rank.get(b)) for b in range(self.config.num_blocks)]
