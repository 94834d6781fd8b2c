"""Lesson 27's model: restoring n tokens' K/V over a link against recomputing them, and where the two cross.

Restoring costs a fixed part (opening files, a transfer's setup) plus the bytes over the link:
``fixed + n x bytes_per_token / bandwidth``. Recomputing is a prefill: ``n / prefill rate``, the rate in tokens per
second. Both grow in proportion to n, so which wins per token does not depend on n: restoring does when a token's
bytes take less time on the link than its prefill takes (``bytes_per_token / bandwidth < 1 / rate``). The fixed
part decides the rest: restoring then wins above ``fixed / (1 / rate - bytes_per_token / bandwidth)`` tokens, the
crossover (0 with no fixed part: it wins at every n). A prefill's attention grows faster than n at long prompts,
which this straight line leaves out; it only makes recomputing dearer there.

A GPU server's prefill rate is computed, not quoted: a token costs about 2 x parameters FLOPs in a prefill (a
multiply and an add per weight), so at ``utilisation`` of a card's dense 16-bit peak the rate is
``peak x utilisation / (2 x parameters)`` (``prefill_rate``). The figures and their sources are the constants
below. ``MeasuredTier`` holds this machine's measured points (kernels/measure/tier.py's table), drawn beside the
lines. The view that draws it is tier.py.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import pandas as pd

from kvcourse.simulators.checks import InvalidInput, check_float, check_int
from kvcourse.simulators.hardware import CARDS

# PCIe 5.0 x16: 32 GT/s a lane x 16 lanes, 128b/130b encoding: about 63 GB/s each way (PCI-SIG's PCIe 5.0
# specification; vendors round it to 64 GB/s per direction, 128 GB/s both ways).
PCIE5_X16_GBS = 64.0
H100_TFLOPS = CARDS["H100 80GB"].tflops or 989.0  # dense BF16, NVIDIA's H100 SXM data sheet (1,979 "with sparsity")
UTILISATION = 0.5  # a stated assumption: half the dense peak in a long prefill
LLAMA_8B_PARAMS = 8.03e9  # Llama 3.1 8B (Meta's model card)
LLAMA_8B_BYTES_PER_TOKEN = 2 * 32 * 8 * 128 * 2  # K and V x 32 layers x 8 KV heads x 128 x 2 bytes (bf16): 131,072
MAX_TOKENS = 1 << 24


def prefill_rate(params: float, tflops: float, utilisation: float) -> float:
    """Tokens per second a prefill reaches at ``utilisation`` of ``tflops`` dense: 2 x params FLOPs a token."""
    return tflops * 1e12 * utilisation / (2 * params)


@dataclass(frozen=True)
class MeasuredTier:
    """This machine's measured seconds per n: recompute, restore from the device and from the page cache."""

    tokens: tuple[int, ...]
    recompute_s: tuple[float, ...]
    device_s: tuple[float, ...]
    page_cache_s: tuple[float, ...]

    def __post_init__(self) -> None:
        sizes = {len(self.tokens), len(self.recompute_s), len(self.device_s), len(self.page_cache_s)}
        if len(sizes) != 1 or not self.tokens:
            raise ValueError("one time of each kind per length, and at least one length")


def measured_from_table(table: pd.DataFrame) -> MeasuredTier:
    """kernels/measure/tier.py's ``restore_vs_recompute`` table as the simulator's measured points."""
    from kvcourse.kernels.measure.tier import DEVICE, PAGE_CACHE, RECOMPUTE

    return MeasuredTier(tuple(int(n) for n in table.index), tuple(map(float, table[RECOMPUTE])),
                        tuple(map(float, table[DEVICE])), tuple(map(float, table[PAGE_CACHE])))  # fmt: skip


def fitted(measured: MeasuredTier, bytes_per_token: int) -> dict[str, float]:
    """The model's settings from measured points: the link bandwidth and the fixed part from a straight line
    through the device restores (least squares), the prefill rate from the longest recompute."""
    n = pd.Series(measured.tokens, dtype=float)
    s = pd.Series(measured.device_s)
    slope = ((n - n.mean()) * (s - s.mean())).sum() / max(((n - n.mean()) ** 2).sum(), 1e-12)
    if slope <= 0:  # one length, or noise: the line through the origin and the longest point
        slope = s.iloc[-1] / n.iloc[-1]
    fixed = max(s.mean() - slope * n.mean(), 0.0)
    return {"bandwidth_gbs": float(bytes_per_token / slope / 1e9), "fixed_us": float(fixed * 1e6),
            "prefill_tokens_per_s": float(measured.tokens[-1] / measured.recompute_s[-1])}  # fmt: skip


@dataclass(frozen=True)
class TierConfig:
    tokens: int = 2048
    bytes_per_token: int = LLAMA_8B_BYTES_PER_TOKEN
    bandwidth_gbs: float = PCIE5_X16_GBS
    prefill_tokens_per_s: float = round(prefill_rate(LLAMA_8B_PARAMS, H100_TFLOPS, UTILISATION))
    fixed_us: float = 0.0  # a restore's fixed part, microseconds
    measured: MeasuredTier | None = None

    def __post_init__(self) -> None:
        check_int("Tokens", self.tokens, 1, MAX_TOKENS)
        check_int("Bytes per token", self.bytes_per_token, 1, 1 << 30)
        check_float("Link bandwidth (GB/s)", self.bandwidth_gbs, 1e-3, 1e5)
        check_float("Prefill rate (tokens/s)", self.prefill_tokens_per_s, 1e-3, 1e9)
        check_float("Fixed part of a restore (µs)", self.fixed_us, 0.0, 1e9)


class Tier:
    """Restore against recompute for one prompt; step() doubles the tokens."""

    def __init__(self, config: TierConfig) -> None:
        self.start = config
        self.config = config

    def reset(self) -> None:
        self.config = self.start

    @property
    def tokens(self) -> int:
        return self.config.tokens

    def step(self) -> int:
        """Double the tokens; return the new number."""
        if 2 * self.tokens > MAX_TOKENS:
            raise InvalidInput(f"{MAX_TOKENS:,} tokens is the most here; press Reset to start again.")
        self.config = dataclasses.replace(self.config, tokens=2 * self.tokens)
        return self.tokens

    def restore_s(self, n: int | None = None) -> float:
        """Seconds to restore n tokens (the config's by default): the fixed part plus the bytes over the link."""
        c = self.config
        n = c.tokens if n is None else n
        return c.fixed_us * 1e-6 + n * c.bytes_per_token / (c.bandwidth_gbs * 1e9)

    def recompute_s(self, n: int | None = None) -> float:
        """Seconds to recompute n tokens: a prefill at the config's rate."""
        return (self.config.tokens if n is None else n) / self.config.prefill_tokens_per_s

    def per_token_ratio(self) -> float:
        """How many times longer a token takes to recompute than to move over the link (the fixed part aside)."""
        c = self.config
        return (1 / c.prefill_tokens_per_s) / (c.bytes_per_token / (c.bandwidth_gbs * 1e9))

    def crossover(self) -> float | None:
        """Tokens above which restoring is faster (0: at every n), or None: recomputing is faster at every n."""
        c = self.config
        gap = 1 / c.prefill_tokens_per_s - c.bytes_per_token / (c.bandwidth_gbs * 1e9)
        if gap <= 0:
            return None
        return c.fixed_us * 1e-6 / gap

    def restore_wins(self, n: int | None = None) -> bool:
        return self.restore_s(n) < self.recompute_s(n)
