"""A radix tree over token ids: the prefix cache that matches to the token and keeps answers (issue 46).

The hash chain (kv_cache_manager.py, lesson 13) names each FULL block by its tokens and its parent's
name, so a prompt finds its cached prefix one whole block at a time. The radix tree keeps the same
blocks as nodes of a tree over token ids, as SGLang's RadixAttention does with pages:

- a node is one block's run of tokens (1 to ``block_size`` of them) and the block id that holds their
  K/V; its parent is the node one block earlier on the path, its children are keyed by their tokens;
- a leaf may hold fewer than ``block_size`` tokens: the last, partly filled block of a finished request
  (its answer included), so the next turn of a chat finds the answer instead of recomputing it;
- ``match`` walks whole blocks as the hash chain does, then takes the longest common prefix among the
  next block's children: a match may end inside a block. That block is shared, so the caller copies it
  before writing the rest of it (copy on write), and the matched tokens are not recomputed.

The index keeps no reference counts of its own: a node is in use while a block table holds its block,
which the block pool counts. Eviction is the pool's (radix_manager.py): it shows the policy only the
blocks without cached children (leaves), and when a block goes, ``remove`` drops its node and any
nodes below it, so every node's parent stays cached.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kvcourse.kernels.checks import check_positive_int
from kvcourse.kernels.memory.block_pool import block_hash


class RadixInvariantError(AssertionError):
    """The tree contradicts itself: a bug, never a user error."""


@dataclass
class RadixNode:
    """One cached block on a path of the tree."""

    block_id: int
    tokens: tuple[int, ...]  # the block's computed tokens: block_size of them, or fewer in a leaf
    parent: int | None  # the block id of the node one block earlier (None: a prompt's first block)
    depth: int  # the block's index in the sequence
    key: bytes  # block_hash(parent's key, tokens): the node's name in the block pool
    children: dict[tuple[int, ...], int] = field(default_factory=dict)  # tokens -> block id

    @property
    def is_leaf(self) -> bool:
        return not self.children


@dataclass(frozen=True)
class RadixMatch:
    """The longest cached prefix of a prompt: whole blocks, then maybe part of one more."""

    blocks: list[int]  # block ids matched in full, in order
    partial_block: int | None  # a block whose first ``partial_len`` tokens match (it must be copied)
    partial_len: int
    block_size: int

    @property
    def num_tokens(self) -> int:
        return len(self.blocks) * self.block_size + self.partial_len


def common_prefix_len(a: tuple[int, ...], b: tuple[int, ...]) -> int:
    """How many leading tokens ``a`` and ``b`` share."""
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


class RadixIndex:
    """The tree of cached blocks, keyed by block id (issue 46)."""

    def __init__(self, block_size: int) -> None:
        check_positive_int("block_size", block_size)
        self.block_size = block_size
        self.nodes: dict[int, RadixNode] = {}
        self.roots: dict[tuple[int, ...], int] = {}  # the root's children: a prompt's first blocks

    def __len__(self) -> int:
        return len(self.nodes)

    def __contains__(self, block_id: object) -> bool:
        return block_id in self.nodes

    def children(self, parent: int | None) -> dict[tuple[int, ...], int]:
        return self.roots if parent is None else self.nodes[parent].children

    def num_cached_tokens(self) -> int:
        return sum(len(node.tokens) for node in self.nodes.values())

    def match(self, token_ids: list[int], limit: int) -> RadixMatch:
        """The longest cached prefix of ``token_ids[:limit]``, to the token."""
        bs = self.block_size
        parent: int | None = None
        blocks: list[int] = []
        start = 0
        while start < limit:
            want = tuple(token_ids[start : min(start + bs, limit)])
            children = self.children(parent)
            if len(want) == bs and want in children:
                parent = children[want]
                blocks.append(parent)
                start += bs
                continue
            best, best_len = None, 0  # the block stops matching inside, or the prompt ends in it
            for tokens, block_id in children.items():
                n = common_prefix_len(tokens, want)
                if n > best_len:
                    best, best_len = block_id, n
            return RadixMatch(blocks, best, best_len, bs)
        return RadixMatch(blocks, None, 0, bs)

    def insert(self, token_ids: list[int], block_table: list[int]) -> tuple[list[RadixNode], list[int]]:
        """Cache computed ``token_ids`` held in ``block_table`` (its last block may be partly filled).

        Walks the path, adding a node for each block not cached yet. Returns the nodes added or grown (the
        caller registers them in the block pool) and the block ids of partly filled leaves that a new node
        now covers (their tokens are a prefix of its tokens: the caller forgets them). A block another path
        already caches under the same tokens is left to its owner: the walk goes on through the cached node."""
        bs = self.block_size
        if len(block_table) * bs < len(token_ids):
            raise ValueError(f"{len(token_ids)} tokens need more than the {len(block_table)} blocks given")
        changed: list[RadixNode] = []
        covered: list[int] = []
        parent: int | None = None
        for depth, start in enumerate(range(0, len(token_ids), bs)):
            tokens = tuple(token_ids[start : start + bs])
            children = self.children(parent)
            if tokens in children:
                parent = children[tokens]
                continue
            block_id = block_table[depth]
            node = self.nodes.get(block_id)
            if node is not None:  # our own partly filled leaf, now holding more tokens: it grows
                if node.parent != parent or node.children or tokens[: len(node.tokens)] != node.tokens:
                    break  # cached on another path (cannot happen in the engine): stop here
                del children[node.tokens]
                node.tokens, node.key = tokens, self._key(parent, tokens)
            else:
                node = RadixNode(block_id, tokens, parent, depth, self._key(parent, tokens))
                self.nodes[block_id] = node
            for other in [b for t, b in children.items() if len(t) < len(tokens) and tokens[: len(t)] == t]:
                covered += self.remove(other)  # a partly filled leaf whose every match the new node gives
            children[tokens] = block_id
            changed.append(node)
            parent = block_id
            if len(tokens) < bs:
                break
        return changed, covered

    def _key(self, parent: int | None, tokens: tuple[int, ...]) -> bytes:
        return block_hash(None if parent is None else self.nodes[parent].key, list(tokens))

    def parent_key(self, node: RadixNode) -> bytes | None:
        return None if node.parent is None else self.nodes[node.parent].key

    def remove(self, block_id: int) -> list[int]:
        """Drop a node and every node below it; returns their block ids, the node's first."""
        node = self.nodes[block_id]
        del self.children(node.parent)[node.tokens]
        removed, stack = [], [block_id]
        while stack:
            gone = self.nodes.pop(stack.pop())
            removed.append(gone.block_id)
            stack.extend(gone.children.values())
        return removed

    def check(self) -> None:
        """Raise RadixInvariantError unless every node hangs from a cached parent under its own tokens."""
        seen = 0
        for parent in [None, *self.nodes]:
            for tokens, block_id in self.children(parent).items():
                node = self.nodes.get(block_id)
                if node is None or node.parent != parent or node.tokens != tokens:
                    raise RadixInvariantError(f"child {block_id} of {parent} is not a node with tokens {tokens}")
                depth = 0 if parent is None else self.nodes[parent].depth + 1
                if node.depth != depth or node.key != self._key(parent, tokens):
                    raise RadixInvariantError(f"node {block_id}: depth or key does not follow its parent")
                if not 0 < len(tokens) <= self.block_size or (len(tokens) < self.block_size and node.children):
                    raise RadixInvariantError(f"node {block_id} holds {len(tokens)} tokens and has children")
                seen += 1
        if seen != len(self.nodes):
            raise RadixInvariantError(f"{len(self.nodes) - seen} nodes hang from no cached parent")
