"""The serving engine's settings as one frozen, validated dataclass (lessons 08, 14)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from kvcourse.kernels.checks import check_positive_int
from kvcourse.kernels.engine.ngram_drafts import SpeculativeConfig
from kvcourse.kernels.engine.threads import check_num_threads
from kvcourse.kernels.memory.budget import MemoryBudget
from kvcourse.kernels.memory.disk_tier import DEFAULT_TIER_BYTES
from kvcourse.kernels.memory.events import DEFAULT_MAX_EVENTS
from kvcourse.kernels.model.cpu_fast import check_fast_paths

DEFAULT_NUM_BLOCKS = 512
PREFIX_INDEXES = ("hash", "radix")  # the prefix cache's index: the hash chain (lesson 13) or a radix tree


@dataclass(frozen=True)
class EngineConfig:
    """Pool and batching limits; the pool is ``num_blocks`` or sized from ``memory_budget`` (lesson 08).

    ``eos_token_id`` None means the model's own stop tokens (``model.config.eos_token_ids``).
    ``num_threads`` is the CPU thread policy, held during each ``step`` and ``generate`` and
    restored after (None: leave torch's setting). ``fast_paths`` "auto" or "off" sets the model's
    CPU fast paths when the engine is made (Transformer.accelerate); None runs the model as it is
    given. ``max_events`` bounds the event log (0 keeps none; counts are always kept).
    ``layer_windows`` gives each layer an attention window (None: global), as ``local_global_windows`` lays them
    out: layers with the same window share block tables, and a local layer's blocks that slide out of its window
    go back to the pool (windows.py). With windows ``num_blocks`` counts blocks of one group's layers; left
    None it is the default pool's bytes. Prefix caching and n > 1 samples are not supported with windows.
    ``prefix_index`` "radix" finds cached prefixes in a radix tree over tokens (to the token, answers included)
    instead of the hash chain of full blocks; it needs ``enable_prefix_caching``.
    ``speculation`` turns on n-gram speculative decoding for greedy requests (speculation.py; None: off); not
    with ``layer_windows``.
    ``disk_tier`` a directory: cached prefix blocks the pool evicts are written to files in a fresh folder there and
    read back on a later prefix hit instead of recomputed, up to ``disk_tier_bytes`` (disk_tier.py; None: off). It
    needs ``enable_prefix_caching`` with the hash chain, and the engine's own KV-cache manager; not with windows.
    Which features combine, and the refusals of those that do not: tests/kernels/test_engine_combinations.py.
    """

    block_size: int = 16
    num_blocks: int | None = None
    memory_budget: MemoryBudget | None = None
    max_num_seqs: int = 64
    max_num_batched_tokens: int = 2048  # the token budget of one step
    max_model_len: int | None = None  # defaults to the model's max_position_embeddings
    enable_prefix_caching: bool = False
    use_triton: bool | None = None  # None: on CUDA yes, on the CPU the PyTorch path
    eos_token_id: int | None = None
    num_threads: int | None = None
    fast_paths: str | None = None
    max_events: int = DEFAULT_MAX_EVENTS
    layer_windows: tuple[int | None, ...] | None = None
    prefix_index: str = "hash"  # "radix": a radix tree over tokens instead of the hash chain (radix_manager.py)
    speculation: SpeculativeConfig | None = None
    disk_tier: str | Path | None = None
    disk_tier_bytes: int = DEFAULT_TIER_BYTES

    def __post_init__(self) -> None:
        for name in ("block_size", "max_num_seqs", "max_num_batched_tokens"):
            check_positive_int(name, getattr(self, name))
        if self.num_blocks is not None and self.memory_budget is not None:
            raise ValueError("give num_blocks or memory_budget, not both")
        check_positive_int("num_blocks", self.num_blocks, optional=True)
        check_positive_int("max_model_len", self.max_model_len, optional=True)
        if self.eos_token_id is not None and (
            isinstance(self.eos_token_id, bool) or not isinstance(self.eos_token_id, int) or self.eos_token_id < 0
        ):
            raise ValueError(f"eos_token_id must be a token id or None, got {self.eos_token_id!r}")
        check_num_threads(self.num_threads)
        check_fast_paths(self.fast_paths, optional=True)
        if isinstance(self.max_events, bool) or not isinstance(self.max_events, int) or self.max_events < 0:
            raise ValueError(f"max_events must be an integer >= 0, got {self.max_events!r}")
        if self.prefix_index not in PREFIX_INDEXES:
            raise ValueError(f"prefix_index must be one of {PREFIX_INDEXES}, got {self.prefix_index!r}")
        if self.prefix_index == "radix" and (not self.enable_prefix_caching or self.layer_windows is not None):
            raise ValueError(
                "prefix_index='radix' is a prefix cache: it needs enable_prefix_caching=True"
                if not self.enable_prefix_caching
                else "prefix_index='radix' is not supported with layer_windows (a block holds one group's layers)"
            )
        if self.speculation is not None and self.layer_windows is not None:
            raise ValueError(
                "speculation is not supported with layer_windows: a rollback would have to give back blocks "
                "in every group's table, and a local layer's blocks slide out of its window (windows.py)"
            )
        check_positive_int("disk_tier_bytes", self.disk_tier_bytes)
        if self.disk_tier is not None and self.layer_windows is not None:
            raise ValueError("not supported with windows: disk_tier (it keeps prefix-cache blocks; windows have none)")
        if self.disk_tier is not None and (not self.enable_prefix_caching or self.prefix_index != "hash"):
            raise ValueError(
                "disk_tier keeps evicted prefix blocks: it needs enable_prefix_caching=True and prefix_index='hash' "
                "(the radix tree's partly filled blocks have no hash to name a file by)"
            )
        if self.layer_windows is not None:
            for window in self.layer_windows:
                check_positive_int("a layer's window", window, optional=True)
            if self.enable_prefix_caching:
                raise ValueError("not supported with windows: prefix caching (a cached block holds one group's layers)")
