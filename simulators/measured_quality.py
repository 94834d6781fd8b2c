"""What a measured curve of quality holds, and how a simulator reads it between two measured points (lessons 23, 24).

Quality cannot be computed from a shape: it is measured, at a few points of a sweep (ranks of a latent, windows of
local layers). Between two of them a simulator reads perplexity on a log scale (it grows by factors) and agreement on
a straight line, and says so; outside them it reads nothing.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class Quality:
    perplexity: float
    agreement: float  # next-token agreement with the model as shipped, 0..1

    @property
    def valid(self) -> bool:
        """A perplexity is at least 1 and an agreement between 0 and 1."""
        return self.perplexity >= 1 and 0 <= self.agreement <= 1


def between(low: Quality, high: Quality, t: float) -> Quality:
    """The quality a fraction ``t`` (0..1) of the way from ``low`` to ``high``: perplexity on a log scale."""
    log_ppl = (1 - t) * math.log(low.perplexity) + t * math.log(high.perplexity)
    return Quality(math.exp(log_ppl), (1 - t) * low.agreement + t * high.agreement)
