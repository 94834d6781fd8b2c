"""The course's engine, one sub-package per layer, that the lessons and labs run (docs/architecture.md).

``model/`` the decoder; ``attention/`` attention and every attention backend, contiguous and paged;
``memory/`` the block pool, the KV-cache manager and the paged KV tensors; ``engine/`` sequences,
scheduler, model runner, LLMEngine and generate; ``costs`` the analytic formulas; ``workload`` the
request trace that lessons 09, 11 and 16 replay (lesson 14 serves a scaled copy); ``baselines/`` what
paging replaced; ``measure/`` what lessons measure on the engine at work (a trace served, the event
log read back, steps timed). Imports run one way: measure -> baselines -> engine -> memory ->
attention -> model, each layer's modules naming the lessons that use them
(tests/test_import_contracts.py checks the order).
"""

from kvcourse.kernels import costs, workload
from kvcourse.kernels.attention.backend import AttentionBackend, StepMetadata
from kvcourse.kernels.attention.backends.int8 import quantize_int8
from kvcourse.kernels.attention.cpu_paged import cpu_paged_decode, in_place_decode
from kvcourse.kernels.attention.paged import (
    gather_kv,
    paged_attention_reference,
    paged_decode_attention,
    write_kv,
)
from kvcourse.kernels.attention.reference import AttentionStats, naive_attention, tiled_attention
from kvcourse.kernels.baselines.fragmentation import (
    MemoryReport,
    PagingReplay,
    ReservationReplay,
    simulate_paging,
    simulate_reservation,
)
from kvcourse.kernels.baselines.reservation import ReservationAllocator
from kvcourse.kernels.engine.beam_search import BeamSearchResult, beam_search
from kvcourse.kernels.engine.config import EngineConfig
from kvcourse.kernels.engine.generate import CACHE_MODES, GenerationResult, Phase, StepStats, generate
from kvcourse.kernels.engine.latency import LatencySummary, LatencyTargets, RequestLatency, latency_summary
from kvcourse.kernels.engine.llm_engine import LLMEngine
from kvcourse.kernels.engine.ngram_drafts import SpeculativeConfig
from kvcourse.kernels.engine.policy import FCFSPolicy, Refuse, SchedulingPolicy, SeqView
from kvcourse.kernels.engine.request import RequestOutput, RequestStatus
from kvcourse.kernels.engine.sampling import SamplingParams, sample
from kvcourse.kernels.engine.sequence import FinishReason, Sequence
from kvcourse.kernels.measure.agreement import (
    MERGE_TEXTS,
    Agreement,
    all_logits,
    first_difference,
    next_token_agreement,
)
from kvcourse.kernels.measure.event_log import RequestStory, occupancy, request_stories
from kvcourse.kernels.measure.serving import (
    ServedTrace,
    TraceServer,
    reservation_start_steps,
    serve_interleaved,
    serve_trace,
    trace_prompts,
)
from kvcourse.kernels.memory.block_pool import BlockPool, block_hash
from kvcourse.kernels.memory.budget import MemoryBudget, num_blocks_for_budget
from kvcourse.kernels.memory.events import EventKind
from kvcourse.kernels.memory.eviction import EvictionCandidate, EvictionPolicy, LRUEviction
from kvcourse.kernels.memory.kv_cache_manager import KVCacheManager
from kvcourse.kernels.model.config import ModelConfig
from kvcourse.kernels.model.config_table import EXAMPLE_13B, MODEL_CONFIGS, get_model_config
from kvcourse.kernels.model.merge_heads import regroup_kv_heads
from kvcourse.kernels.model.transformer import Transformer
from kvcourse.kernels.workload import LIBRARY_QUESTIONS, LIBRARY_SYSTEM_PROMPT

__all__ = [
    "CACHE_MODES",
    "EXAMPLE_13B",
    "LIBRARY_QUESTIONS",
    "LIBRARY_SYSTEM_PROMPT",
    "MERGE_TEXTS",
    "MODEL_CONFIGS",
    "Agreement",
    "AttentionBackend",
    "AttentionStats",
    "BeamSearchResult",
    "BlockPool",
    "EngineConfig",
    "EventKind",
    "EvictionCandidate",
    "EvictionPolicy",
    "FCFSPolicy",
    "FinishReason",
    "GenerationResult",
    "KVCacheManager",
    "LLMEngine",
    "LRUEviction",
    "MemoryBudget",
    "MemoryReport",
    "ModelConfig",
    "PagingReplay",
    "Phase",
    "Refuse",
    "RequestOutput",
    "RequestLatency",
    "LatencySummary",
    "LatencyTargets",
    "latency_summary",
    "RequestStatus",
    "RequestStory",
    "ReservationAllocator",
    "ReservationReplay",
    "SamplingParams",
    "SchedulingPolicy",
    "SeqView",
    "Sequence",
    "ServedTrace",
    "SpeculativeConfig",
    "StepMetadata",
    "StepStats",
    "TraceServer",
    "Transformer",
    "all_logits",
    "beam_search",
    "block_hash",
    "costs",
    "cpu_paged_decode",
    "first_difference",
    "gather_kv",
    "generate",
    "get_model_config",
    "in_place_decode",
    "naive_attention",
    "next_token_agreement",
    "num_blocks_for_budget",
    "occupancy",
    "paged_attention_reference",
    "paged_decode_attention",
    "quantize_int8",
    "regroup_kv_heads",
    "request_stories",
    "reservation_start_steps",
    "sample",
    "serve_interleaved",
    "serve_trace",
    "simulate_paging",
    "simulate_reservation",
    "tiled_attention",
    "trace_prompts",
    "workload",
    "write_kv",
]
