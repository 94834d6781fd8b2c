"""Lab B draws only traces that leave room above least recently used (issue 43: "traces that leave room").

A drawn trace is graded between LRU's hit rate (60 %) and the reference policy's (100 %). On about one trace in
seven of the family, the reference finds nothing LRU misses (bench_eviction_room: "reference above LRU" 0.85),
and there the scale has no length: reaching LRU's rate would be full marks, so re-implementing the baseline would
score above 60 % on average. Such a trace teaches nothing either, so it is not drawn: the family draws again,
from the same random stream, until the reference beats LRU by more than a tie (``eviction.TOLERANCE``). A seed
still gives one trace, the same for the grader and the benchmark, and the three rates computed here are the
ones the grader reads back (``eviction.rates`` keeps them). The public traces are drawn as they come: their
seeds were picked with room (a test holds them to it), and a learner's notebook draws them without the reference.
"""

from __future__ import annotations

import random
from collections.abc import Callable

from .eviction import TOLERANCE, rates
from .traces import LabTrace

ATTEMPTS = 20  # draws before giving up and returning the last (never reached: over seeds 0-599 the most taken was 4)

Family = Callable[[random.Random, str, bool], LabTrace]


def leaving_room(family: Family) -> Family:
    """``family``, drawing again while the reference policy does no better than LRU on the trace."""

    def draw(rng: random.Random, name: str, public: bool) -> LabTrace:
        if public:  # the public seeds are picked with room (spec.py, tested): a learner draws them with no reference
            return family(rng, name, public)
        for _ in range(ATTEMPTS):
            trace = family(rng, name, public)
            line = rates(trace)
            if line["reference"] > line["LRU"] + TOLERANCE:
                break
        return trace

    draw.__doc__ = family.__doc__
    return draw
