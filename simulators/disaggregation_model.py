"""Lesson 21's second simulator, its model: prefill and decode on separate GPUs, against both on every GPU.

A machine of ``num_gpus`` GPUs, each holding a whole copy of a model of 2026 in 16 bits, serves requests of
``prompt_tokens`` and ``answer_tokens`` arriving at ``arrival_rate`` per second, spread evenly. Every cost is
stated, so each number can be checked by hand (tests/simulators/test_sim_disaggregation.py does):

* **Prefill** of one prompt takes ``2 x parameters x prompt tokens`` FLOPs at ``PREFILL_UTILISATION`` of the
  card's dense 16-bit throughput, or one read of the weights if that is longer (the quadratic attention term is
  left out). Prompts queue for it as in an M/D/1 queue, as DistServe (OSDI '24) models its prefill instances:
  mean wait ``rho x t / (2 (1 - rho))`` at utilisation ``rho`` and prefill time ``t``.
* **Decode** steps are lesson 14's roofline: a step reads the weights once plus the K and V of every sequence
  in the batch (at the prompt plus half the answer), or computes ``2 x parameters`` FLOPs per sequence, whichever
  is longer. The batch is what Little's law says is decoding: ``rate x (answer - 1) x TPOT``. Solving
  ``TPOT = step(batch) / (1 - stall share)`` for TPOT gives ``weights / bandwidth / (1 - stall - rate x (answer
  - 1) x KV bytes / bandwidth)``; past that the batch grows without bound. The batch must also fit beside the
  weights in the card's memory, one whole sequence at least.
* **Colocated**, every GPU does both: a prompt's prefill runs as a step of its own and every decoding user waits
  for it (the stall lesson 21 measured), so decode has only ``1 - rho`` of the time, and a new prompt first
  waits for the decode step under way (half a step on average).
* **Disaggregated** (DistServe, Mooncake), ``prefill_gpus`` GPUs only prefill and the rest only decode, so
  neither waits for the other; the price is that every prompt's KV cache crosses the link between the pools:
  ``transfer_bytes`` (bytes per token x prompt tokens for full and latent layers, lesson 07; a window layer
  sends only its window) at ``link_gbs``. The transfer delays the second token, so it lands in TPOT, spread over
  the answer's ``answer - 1`` gaps; the link of each prefill GPU must keep up with its prompts.

Goodput is DistServe's: the highest arrival rate at which a request meets both targets (on average here; DistServe
asks it of 90 % of requests), found by bisection since every latency grows with the rate. The view is
disaggregation.py.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import pandas as pd

from kvcourse.kernels.cache_layout import CacheLayout
from kvcourse.kernels.model.cache_layouts import LAYOUTS_2026
from kvcourse.kernels.model.context_windows import PUBLISHED_2026
from kvcourse.simulators.checks import InvalidInput, check_choice, check_float, check_int
from kvcourse.simulators.hardware import HARDWARE, Card
from kvcourse.simulators.labels import GB, GIB

# The dense models of 2026 whose 16-bit weights fit one 80 GB card (PUBLISHED_2026): one copy per GPU, so a
# step reads all the weights. Mixture-of-experts models (DeepSeek-V3, gpt-oss) read only the experts routed to.
MODELS = ("llama-3.1-8b", "qwen3-8b", "mistral-small-3.1", "gemma-3-27b", "qwen3-32b")
DEFAULT_CARD = "H100 SXM"
# Each GPU's link to the other pool. NVLink 4: 900 GB/s per H100 (NVIDIA's data sheet); InfiniBand NDR:
# 400 Gb/s per port = 50 GB/s; 100 Gb Ethernet: 12.5 GB/s.
LINKS: dict[str, float] = {"NVLink 4": 900.0, "InfiniBand NDR": 50.0, "100 GbE": 12.5}
PREFILL_UTILISATION = 0.5  # the share of the data sheet's dense FLOP/s a long prefill reaches (an assumption)
MAX_GPUS = 1024
MAX_TOKENS = 131_072
MAX_RATE = 1e6
MAX_SECONDS = 1e4
MAX_LINK_GBS = 1e5


def transfer_table(models: list[str], prompt_tokens: int, links: dict[str, float] | None = None) -> pd.DataFrame:
    """One row per model of the 2026 table (``LAYOUTS_2026``, any of them): the bytes every prompt token adds, the
    bytes one prompt of ``prompt_tokens`` sends from a prefill GPU to a decode GPU, and the milliseconds that takes
    over each link (``LINKS`` by default); 16-bit caches."""
    rows = {}
    for name in models:
        layout = LAYOUTS_2026[name]
        sent = layout.bytes_at(prompt_tokens).total
        rows[name] = {
            "bytes per token": layout.per_token_bytes,
            "MB per request": round(sent / 1e6, 1),
            **{
                f"ms over {link} ({gbs:g} GB/s)": round(sent / (gbs * GB) * 1e3, 2)
                for link, gbs in (links or LINKS).items()
            },
        }
    return pd.DataFrame.from_dict(rows, orient="index")


@dataclass(frozen=True)
class DisaggregationConfig:
    """A machine, a model, a request mix and two latency targets (lesson 21)."""

    model: str = "llama-3.1-8b"
    card: str = DEFAULT_CARD
    num_gpus: int = 8
    prefill_gpus: int = 4
    arrival_rate: float = 40.0  # requests per second, the whole machine
    prompt_tokens: int = 2048
    answer_tokens: int = 256
    link_gbs: float = LINKS["InfiniBand NDR"]
    ttft_target_s: float = 0.5
    tpot_target_ms: float = 15.0

    def __post_init__(self) -> None:
        check_choice("Model", self.model, [(name, name) for name in MODELS])
        check_choice("GPU", self.card, [(name, name) for name in HARDWARE])
        check_int("GPUs", self.num_gpus, 2, MAX_GPUS)
        check_int("Prefill GPUs", self.prefill_gpus, 1, self.num_gpus - 1)
        check_float("Arrival rate (requests/s)", self.arrival_rate, 1e-6, MAX_RATE)
        check_int("Prompt (tokens)", self.prompt_tokens, 1, MAX_TOKENS)
        check_int("Answer (tokens)", self.answer_tokens, 2, MAX_TOKENS)
        if isinstance(self.link_gbs, (int, float)) and not isinstance(self.link_gbs, bool) and self.link_gbs == 0:
            raise InvalidInput(
                "Link bandwidth (GB/s) must be more than 0: prefill and decode apart means every prompt's KV "
                "cache crosses the link, and at 0 GB/s no request ever reaches a decode GPU."
            )
        check_float("Link bandwidth (GB/s)", self.link_gbs, 1e-3, MAX_LINK_GBS)
        check_float("TTFT target (s)", self.ttft_target_s, 1e-6, MAX_SECONDS)
        check_float("TPOT target (ms)", self.tpot_target_ms, 1e-3, MAX_SECONDS * 1e3)

    @property
    def decode_gpus(self) -> int:
        return self.num_gpus - self.prefill_gpus

    @property
    def hardware(self) -> Card:
        return HARDWARE[self.card]

    @property
    def layout(self) -> CacheLayout:
        return LAYOUTS_2026[self.model]


@dataclass(frozen=True)
class Latency:
    """One request's mean TTFT and TPOT in seconds (inf: the queue or the batch grows without bound)."""

    ttft_s: float
    tpot_s: float

    def meets(self, ttft_target_s: float, tpot_target_s: float) -> bool:
        return self.ttft_s <= ttft_target_s and self.tpot_s <= tpot_target_s


def md1_wait(utilisation: float, service_s: float) -> float:
    """Mean wait in an M/D/1 queue: rho t / (2 (1 - rho)); inf from rho = 1 on."""
    return math.inf if utilisation >= 1 else utilisation * service_s / (2 * (1 - utilisation))


class Disaggregation:
    """Mean TTFT and TPOT and goodput, prefill and decode apart at every split and colocated; step() moves one
    GPU from decode to prefill (lesson 21)."""

    def __init__(self, config: DisaggregationConfig) -> None:
        self.config = config
        self.prefill_gpus = config.prefill_gpus

    def step(self) -> None:
        """Move one GPU from the decode pool to the prefill pool."""
        if self.prefill_gpus + 1 >= self.config.num_gpus:
            raise InvalidInput("every GPU but one prefills already: the decode pool cannot shrink; press Reset.")
        self.prefill_gpus += 1

    def reset(self) -> None:
        self.prefill_gpus = self.config.prefill_gpus

    # -- what one request costs ------------------------------------------------------------------------
    @property
    def weight_bytes(self) -> int:
        """The model's 16-bit weights as published (PUBLISHED_2026), read once per decode step."""
        return PUBLISHED_2026[self.config.model].weight_bytes

    @property
    def num_parameters(self) -> float:
        return self.weight_bytes / 2

    @property
    def bytes_per_token(self) -> int:
        """What every prompt token adds to the cache for good (full and latent layers, 16 bits; lesson 07)."""
        return self.config.layout.per_token_bytes

    @property
    def transfer_bytes(self) -> int:
        """The prompt's whole KV cache, which the prefill GPU sends to a decode GPU."""
        return self.config.layout.bytes_at(self.config.prompt_tokens).total

    @property
    def transfer_seconds(self) -> float:
        return self.transfer_bytes / (self.config.link_gbs * GB)

    @property
    def prefill_seconds(self) -> float:
        """One prompt's prefill: its FLOPs at PREFILL_UTILISATION of the card, or one read of the weights."""
        c, card = self.config, self.config.hardware
        assert card.tflops is not None and card.bandwidth_gbs is not None
        compute = 2 * self.num_parameters * c.prompt_tokens / (card.tflops * 1e12 * PREFILL_UTILISATION)
        return max(compute, self.weight_bytes / (card.bandwidth_gbs * GB))

    @property
    def kv_read_bytes(self) -> int:
        """One sequence's K and V that a decode step reads, at the prompt plus half the answer."""
        return self.config.layout.bytes_at(self.config.prompt_tokens + self.config.answer_tokens // 2).total

    @property
    def max_batch(self) -> float:
        """Sequences whose whole cache (prompt and answer) fits beside the weights on one card."""
        spare = self.config.hardware.memory_gib * GIB - self.weight_bytes
        full = self.config.layout.bytes_at(self.config.prompt_tokens + self.config.answer_tokens).total
        return max(spare, 0) / full

    def decode_tpot(self, rate_per_gpu: float, stall_share: float) -> float:
        """TPOT on a GPU decoding ``rate_per_gpu`` requests/s that spends ``stall_share`` of its time on prefill."""
        card, gaps = self.config.hardware, self.config.answer_tokens - 1
        assert card.tflops is not None and card.bandwidth_gbs is not None
        bandwidth, free = card.bandwidth_gbs * GB, 1 - stall_share
        kv_share = rate_per_gpu * gaps * self.kv_read_bytes / bandwidth
        compute_share = rate_per_gpu * gaps * 2 * self.num_parameters / (card.tflops * 1e12)
        if free - kv_share <= 0 or compute_share >= free or self.max_batch < 1:
            return math.inf
        tpot = self.weight_bytes / bandwidth / (free - kv_share)
        return tpot if rate_per_gpu * gaps * tpot <= self.max_batch else math.inf

    # -- the two deployments ------------------------------------------------------------------------------
    def split(self, rate: float, prefill_gpus: int | None = None) -> Latency:
        """Prefill and decode apart, ``prefill_gpus`` GPUs prefilling (default: the current split)."""
        p = self.prefill_gpus if prefill_gpus is None else prefill_gpus
        t, rate_p = self.prefill_seconds, rate / p
        ttft = t + md1_wait(rate_p * t, t)
        if rate_p * self.transfer_seconds >= 1:  # the link of a prefill GPU cannot keep up
            return Latency(ttft, math.inf)
        tpot = self.decode_tpot(rate / (self.config.num_gpus - p), 0.0)
        return Latency(ttft, tpot + self.transfer_seconds / (self.config.answer_tokens - 1))

    def colocated(self, rate: float) -> Latency:
        """Both on every GPU: prefills stall the decodes, and a prompt waits for the decode step under way."""
        t, rate_g = self.prefill_seconds, rate / self.config.num_gpus
        stall = rate_g * t
        tpot = self.decode_tpot(rate_g, stall)
        if math.isinf(tpot):
            return Latency(t + md1_wait(stall, t), math.inf)
        return Latency(t + md1_wait(stall, t) + tpot * (1 - stall) / 2, tpot)

    # -- goodput -------------------------------------------------------------------------------------------
    def _goodput(self, latency_at) -> float:  # type: ignore[no-untyped-def]
        c = self.config
        targets = (c.ttft_target_s, c.tpot_target_ms / 1e3)
        high = c.num_gpus / self.prefill_seconds  # every GPU prefilling all the time: no rate beyond
        if not latency_at(high * 1e-9).meets(*targets):
            return 0.0
        low = high * 1e-9
        for _ in range(60):
            mid = (low + high) / 2
            low, high = (mid, high) if latency_at(mid).meets(*targets) else (low, mid)
        return low

    def split_goodput(self, prefill_gpus: int | None = None) -> float:
        """DistServe's goodput with ``prefill_gpus`` prefilling: the highest rate (requests/s) meeting both targets."""
        return self._goodput(lambda rate: self.split(rate, prefill_gpus))

    @property
    def colocated_goodput(self) -> float:
        return self._goodput(self.colocated)

    def splits(self, most: int = 256) -> list[int]:
        """The prefill pool sizes drawn: every one from 1 to N - 1, or ``most`` of them spread evenly."""
        n = self.config.num_gpus
        if n - 1 <= most:
            return list(range(1, n))
        return sorted({round(1 + i * (n - 2) / (most - 1)) for i in range(most)} | {self.prefill_gpus})

    @property
    def best_split(self) -> tuple[int, float]:
        """(prefill GPUs, goodput) at the split with the most goodput among ``splits()``."""
        return max(((p, self.split_goodput(p)) for p in self.splits()), key=lambda pair: pair[1])
