"""Lab A's judge: answer the engine's calls from a recorded run, checking every answer against the rules.

The rules are listed in block_manager.py's docstring. The replay keeps the block tables itself and
derives who holds which block from them, so nothing the learner's manager says about its own
bookkeeping is believed: a leak shows as a free count that disagrees with the tables.
"""

from __future__ import annotations

from kvcourse.kernels.memory.kv_pool import BlockCopy

from .common import Cursor, LabViolation, ReplayMismatch, int_list


class ReplayManager:
    """Answers the engine's calls from a recorded run and checks every answer (outside the learner's code)."""

    def __init__(self, entries: list, num_blocks: int, block_size: int) -> None:
        self.cursor = Cursor(entries)
        self.num_blocks, self.block_size = num_blocks, block_size
        self.tables: dict[int, list[int]] = {}

    def _holders(self) -> dict[int, int]:
        """Block id -> a sequence holding it."""
        return {b: sid for sid, table in self.tables.items() for b in table}

    @property
    def num_free_blocks(self) -> int:
        return self.num_blocks - len(self._holders())

    @property
    def num_used_blocks(self) -> int:
        return len(self._holders())

    def _reported(self, reported: object, after: str) -> None:
        free = self.num_free_blocks
        if reported == free and isinstance(reported, int):
            return
        if isinstance(reported, int) and 0 <= reported < free:
            raise LabViolation(
                f"after {after} your manager counts {reported} free blocks, but {free} are free: "
                f"it leaks {free - reported}"
            )
        raise LabViolation(
            f"after {after} your manager counts {reported} free blocks, but only {free} are free: "
            "it counts blocks that a sequence holds"
        )

    def _fresh(self, blocks: list[int], where: str) -> None:
        holders, seen = self._holders(), set()
        for b in blocks:
            if not 0 <= b < self.num_blocks:
                raise LabViolation(f"{where} used block {b}, but the pool has blocks 0 to {self.num_blocks - 1}")
            if b in seen:
                raise LabViolation(f"{where} put block {b} twice into one block table")
            if b in holders:
                raise LabViolation(
                    f"{where} handed out block {b}, which sequence {holders[b]} still holds: two "
                    "tables would own a block that was never shared"
                )
            seen.add(b)

    def _needed_to_append(self, seq) -> int:
        table = self.tables.get(seq.seq_id, [])
        first = seq.num_computed_tokens // self.block_size
        others = {b for sid, t in self.tables.items() if sid != seq.seq_id for b in t}
        return max(0, seq.num_blocks - len(table)) + sum(1 for b in table[first:] if b in others)

    def can_allocate(self, seq) -> bool:
        (ok,) = self.cursor.next("can_allocate", seq.seq_id)
        if not isinstance(ok, bool):
            raise ReplayMismatch("a recorded answer of can_allocate is not a bool")
        if ok and seq.num_blocks > self.num_free_blocks:
            raise LabViolation(
                f"can_allocate(sequence {seq.seq_id}) said yes to {seq.num_blocks} blocks with "
                f"{self.num_free_blocks} free"
            )
        return ok

    def allocate(self, seq) -> None:
        where = f"allocate(sequence {seq.seq_id})"
        table, computed, reported = self.cursor.next("allocate", seq.seq_id)
        table = int_list(table, f"the block table after {where}")
        if len(table) != seq.num_blocks:
            raise LabViolation(
                f"{where} gave {len(table)} blocks for {seq.num_tokens} tokens: it needs "
                f"{seq.num_blocks} blocks of {self.block_size}"
            )
        if computed != 0:
            raise LabViolation(f"{where} set num_computed_tokens to {computed}: a new sequence has computed nothing")
        self._fresh(table, where)
        self.tables[seq.seq_id] = list(table)
        seq.block_table = list(table)
        self._reported(reported, where)

    def can_append(self, seq) -> bool:
        (ok,) = self.cursor.next("can_append", seq.seq_id)
        if not isinstance(ok, bool):
            raise ReplayMismatch("a recorded answer of can_append is not a bool")
        needed = self._needed_to_append(seq)
        if ok and needed > self.num_free_blocks:
            raise LabViolation(
                f"can_append(sequence {seq.seq_id}) said yes, but its step needs {needed} blocks "
                f"(new and copies) with {self.num_free_blocks} free"
            )
        return ok

    def append_slots(self, seq) -> list[BlockCopy]:
        where = f"append_slots(sequence {seq.seq_id})"
        table, pairs, reported = self.cursor.next("append", seq.seq_id)
        table = int_list(table, f"the block table after {where}")
        if not isinstance(pairs, list) or not all(isinstance(p, list) and len(p) == 2 for p in pairs):
            raise ReplayMismatch(f"the copies recorded for {where} are not pairs")
        old = self.tables.get(seq.seq_id, [])
        first = seq.num_computed_tokens // self.block_size
        if len(table) != seq.num_blocks:
            raise LabViolation(
                f"after {where} the sequence has {len(table)} blocks for {seq.num_tokens} tokens: "
                f"it needs {seq.num_blocks}"
            )
        if table[:first] != old[:first]:
            raise LabViolation(f"{where} changed blocks that hold computed tokens: their K/V would be lost")
        others = {b: sid for sid, t in self.tables.items() if sid != seq.seq_id for b in t}
        fresh, changed = [], []
        for i in range(first, len(table)):
            if i < len(old) and table[i] == old[i]:
                if old[i] in others:
                    raise LabViolation(
                        f"sequence {seq.seq_id} writes its next tokens into block {old[i]}, which "
                        f"sequence {others[old[i]]} also holds: copy on write missed (the write "
                        "would change the other sequence's tokens)"
                    )
                continue
            fresh.append(table[i])
            if i < len(old):
                changed.append([old[i], table[i]])
        self._fresh(fresh, where)
        if sorted(map(list, pairs)) != sorted(changed):
            missing = [p for p in changed if p not in pairs]
            if missing:
                raise LabViolation(
                    f"{where} replaced block {missing[0][0]} by {missing[0][1]} without returning the "
                    "copy: the tokens already in it would be lost"
                )
            raise LabViolation(f"{where} returned copies {pairs} for the blocks it replaced, {changed}")
        self.tables[seq.seq_id] = list(table)
        seq.block_table = list(table)
        self._reported(reported, where)
        return [BlockCopy(src, dst) for src, dst in changed]

    def fork(self, parent, child) -> None:
        where = f"fork(sequence {parent.seq_id}, sequence {child.seq_id})"
        table, computed, reported = self.cursor.next("fork", parent.seq_id, child.seq_id)
        if table != self.tables.get(parent.seq_id, []):
            raise LabViolation(
                f"{where} gave the child blocks {str(table)[:60]}, not the parent's "
                f"{self.tables.get(parent.seq_id, [])}: forked sequences share every block"
            )
        if computed != parent.num_computed_tokens:
            raise LabViolation(
                f"{where} left the child at {computed} computed tokens; the parent has computed "
                f"{parent.num_computed_tokens}, and so has the child, whose blocks are the parent's"
            )
        self.tables[child.seq_id] = list(table)
        child.block_table = list(table)
        child.num_computed_tokens = parent.num_computed_tokens
        self._reported(reported, where)

    def free(self, seq) -> None:
        where = f"free(sequence {seq.seq_id})"
        computed, reported = self.cursor.next("free", seq.seq_id)
        if computed != 0:
            raise LabViolation(
                f"{where} left num_computed_tokens at {computed}: a preempted sequence recomputes "
                "from the start, so it must be 0"
            )
        self.tables.pop(seq.seq_id, None)
        seq.block_table, seq.num_computed_tokens, seq.num_cached_tokens = [], 0, 0
        self._reported(reported, where)

    def cache_full_blocks(self, seq) -> None:
        pass

    def finish(self, what: str) -> None:
        if self.cursor.index != len(self.cursor.entries):
            raise ReplayMismatch(f"the recorded run of {what} goes on after the engine stopped")
        held = sorted(sid for sid, table in self.tables.items() if table)
        if held:
            raise LabViolation(f"when {what} was over, sequence(s) {held[:5]} still held blocks: a leak")
