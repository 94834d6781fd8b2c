"""The baseline paging replaced: one contiguous max-length region per request, first fit (lesson 09).

Memory is a line of token slots. A request reserves ``max_len`` contiguous slots at admission
(it cannot know how long its answer will be) in the first gap large enough. Slots it never fills
are internal waste; free slots that no waiting request can use because no single gap is large
enough are external waste.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvcourse.kernels.checks import check_positive_int


@dataclass(frozen=True)
class Region:
    """A reservation: ``num_slots`` contiguous slots starting at ``start``."""

    start: int
    num_slots: int

    @property
    def end(self) -> int:
        return self.start + self.num_slots


class ReservationAllocator:
    """First-fit contiguous reservations in a line of ``num_slots`` token slots (lesson 09)."""

    def __init__(self, num_slots: int) -> None:
        check_positive_int("num_slots", num_slots)
        self.num_slots = num_slots
        self.regions: dict[int, Region] = {}  # request id -> its region

    @property
    def num_reserved_slots(self) -> int:
        return sum(r.num_slots for r in self.regions.values())

    @property
    def num_free_slots(self) -> int:
        return self.num_slots - self.num_reserved_slots

    def gaps(self) -> list[Region]:
        """The free stretches between reservations, in address order."""
        gaps, cursor = [], 0
        for region in sorted(self.regions.values(), key=lambda r: r.start):
            if region.start > cursor:
                gaps.append(Region(cursor, region.start - cursor))
            cursor = region.end
        if cursor < self.num_slots:
            gaps.append(Region(cursor, self.num_slots - cursor))
        return gaps

    @property
    def largest_gap(self) -> int:
        return max((g.num_slots for g in self.gaps()), default=0)

    def can_allocate(self, num_slots: int) -> bool:
        return self._first_fit(num_slots) is not None

    def _first_fit(self, num_slots: int) -> Region | None:
        return next((g for g in self.gaps() if g.num_slots >= num_slots), None)

    def allocate(self, request_id: int, num_slots: int) -> Region:
        """Reserve the first gap that fits; ask ``can_allocate`` first."""
        if request_id in self.regions:
            raise ValueError(f"request {request_id} already holds a region")
        gap = self._first_fit(num_slots)
        if gap is None:
            raise MemoryError(f"no contiguous gap of {num_slots} slots (largest is {self.largest_gap})")
        self.regions[request_id] = Region(gap.start, num_slots)
        return self.regions[request_id]

    def free(self, request_id: int) -> None:
        del self.regions[request_id]
