from kvcourse.labs import EvictionBase


class MyEviction(EvictionBase):
    """Least recently used among the blocks nobody is likely to ask for again, first: a tail no prompt has found
    yet (no hits) and shallow in its prefix, as a one-off batch prompt's blocks are. A block that prompts found, or
    one deep in a conversation that may go on, is kept while it was used in the last 40 ticks of the pool's clock
    (ageing: a popular prompt of the morning goes once the afternoon stops asking for it). Tails before heads."""

    def choose(self, candidates):
        tails = [c for c in candidates if not c.has_cached_children] or candidates
        now = max(c.last_used for c in candidates)

        def worth_keeping(c):
            return (c.num_hits > 0 or c.depth >= 4) and now - c.last_used < 40

        return min(tails, key=lambda c: (worth_keeping(c), c.last_used)).block_id
