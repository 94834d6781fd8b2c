from kvcourse.labs import EvictionBase


class MyEviction(EvictionBase):
    """Least recently used first, and a tail before its head: a block whose child is still cached goes
    only when every candidate has one."""

    def choose(self, candidates):
        leaves = [c for c in candidates if not c.has_cached_children] or candidates
        return min(leaves, key=lambda c: (c.last_used, -c.depth)).block_id
