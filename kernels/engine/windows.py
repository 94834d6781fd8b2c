"""The engine with a window per layer (``EngineConfig.layer_windows``, issue 45): KV-cache groups on one pool.

``windowed_parts`` builds what the engine needs instead of its one-table manager and runner: a
``KVCacheGroupsManager`` (kernels/memory/kv_cache_groups.py: one block table per group of layers with the same
window, local groups give back the blocks that slid out of the window) and a ``GroupedModelRunner`` whose pool's
blocks each hold one group's layers, so a block id means the same bytes in every group. Without windows the
engine is what it always was: one group of every layer, and none of this is built.
"""

from __future__ import annotations

from dataclasses import replace

import torch

from kvcourse.kernels.attention.backend import AttentionBackend
from kvcourse.kernels.attention.paged_windows import GroupedPagedBackend
from kvcourse.kernels.engine.batch import ScheduledBatch
from kvcourse.kernels.engine.config import DEFAULT_NUM_BLOCKS, EngineConfig
from kvcourse.kernels.engine.model_runner import ModelRunner
from kvcourse.kernels.memory.budget import num_blocks_for_budget
from kvcourse.kernels.memory.events import EventLog
from kvcourse.kernels.memory.kv_cache_groups import (
    NOT_WITH_WINDOWS,
    KVCacheGroup,
    KVCacheGroupsManager,
    kv_cache_groups,
)
from kvcourse.kernels.memory.kv_pool import KVPool
from kvcourse.kernels.model.transformer import Transformer


class GroupedModelRunner(ModelRunner):
    """The model runner on a pool of (layers per group, num_blocks, block_size, kv_heads, D): one table per group."""

    def __init__(
        self, model: Transformer, pool: KVPool, groups: tuple[KVCacheGroup, ...], use_triton: bool | None = None
    ) -> None:
        super().__init__(model, pool, use_triton)
        self.groups = groups

    def backend(self, batch: ScheduledBatch) -> tuple[torch.Tensor, AttentionBackend]:
        backend = GroupedPagedBackend(
            self.pool,
            self.groups,
            [s.block_tables for s in batch.seqs],
            [s.start_position for s in batch.seqs],
            list(batch.num_scheduled_tokens),
            self.decode_kernel,
            self.in_place_from,
        )
        return backend.positions, backend


def num_group_blocks(model: Transformer, config: EngineConfig, groups: tuple[KVCacheGroup, ...]) -> int:
    """Blocks of one group's layers: ``num_blocks`` as given, else the bytes of the one-group default or budget."""
    if config.num_blocks is not None:
        return config.num_blocks
    layers_per_block = len(groups[0].layers)
    if config.memory_budget is None:
        return DEFAULT_NUM_BLOCKS * len(groups)  # the bytes of the default pool of every layer
    bytes_per_value = torch.finfo(model.dtype).bits // 8
    group_config = replace(model.config, num_layers=layers_per_block)
    num = num_blocks_for_budget(group_config, config.memory_budget, config.block_size, bytes_per_value)
    if num < 1:
        raise ValueError(f"the memory budget leaves {config.memory_budget.kv_bytes:,} bytes: not one block")
    return num


def windowed_parts(
    model: Transformer, config: EngineConfig, events: EventLog, block_manager: object, eviction: object
) -> tuple[KVCacheGroupsManager, GroupedModelRunner]:
    """The grouped manager and runner of an engine whose ``config.layer_windows`` is set."""
    windows = config.layer_windows or ()
    if len(windows) != model.config.num_layers:
        raise ValueError(f"layer_windows gives {len(windows)} windows for {model.config.num_layers} layers")
    if block_manager is not None or eviction is not None:
        raise ValueError(f"{NOT_WITH_WINDOWS}: a block_manager or an eviction policy (the engine's groups own both)")
    groups = kv_cache_groups(windows)
    num_blocks = num_group_blocks(model, config, groups)
    manager = KVCacheGroupsManager(num_blocks, config.block_size, groups, events)
    mc = model.config
    shape = (len(groups[0].layers), num_blocks, config.block_size, mc.num_kv_heads, mc.head_dim)
    pool = KVPool(*(torch.zeros(shape, dtype=model.dtype, device=model.device) for _ in "kv"))
    return manager, GroupedModelRunner(model, pool, groups, config.use_triton)


def windows_refusal(manager: KVCacheGroupsManager, longest: int, n: int) -> str | None:
    """Why a request could never be served by an engine with windows, or None."""
    if n > 1:
        return f"{NOT_WITH_WINDOWS}: n = {n} samples (forked sequences share blocks)"
    needed = manager.min_blocks(longest)
    if needed > manager.num_blocks:
        return (
            f"a sequence of {longest} tokens needs {needed} blocks of {manager.block_size} tokens over its "
            f"{len(manager.groups)} groups of layers, but the whole KV pool holds {manager.num_blocks}"
        )
    return None
