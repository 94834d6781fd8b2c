from kvcourse.labs import BlockCopy, BlockManagerBase


class MyBlockManager(BlockManagerBase):
    """Reference counts per block and a free list; fork shares, append_slots copies on write."""

    def __init__(self, num_blocks, block_size):
        super().__init__(num_blocks, block_size)
        self.ref_counts = [0] * num_blocks
        self.free_list = list(range(num_blocks))

    def _take(self):
        block = self.free_list.pop()
        self.ref_counts[block] = 1
        return block

    def _release(self, block):
        self.ref_counts[block] -= 1
        if self.ref_counts[block] == 0:
            self.free_list.append(block)

    def can_allocate(self, seq):
        return seq.num_blocks <= len(self.free_list)

    def allocate(self, seq):
        seq.block_table = [self._take() for _ in range(seq.num_blocks)]
        seq.num_computed_tokens = 0

    def _first_written(self, seq):
        return seq.num_computed_tokens // self.block_size

    def can_append(self, seq):
        shared = sum(1 for b in seq.block_table[self._first_written(seq) :] if self.ref_counts[b] > 1)
        return seq.num_blocks - len(seq.block_table) + shared <= len(self.free_list)

    def append_slots(self, seq):
        copies = []
        for i in range(self._first_written(seq), len(seq.block_table)):
            old = seq.block_table[i]
            if self.ref_counts[old] > 1:
                new = self._take()
                self._release(old)
                seq.block_table[i] = new
                copies.append(BlockCopy(old, new))
        while len(seq.block_table) < seq.num_blocks:
            seq.block_table.append(self._take())
        return copies

    def fork(self, parent, child):
        for block in parent.block_table:
            self.ref_counts[block] += 1
        child.block_table = list(parent.block_table)
        child.num_computed_tokens = parent.num_computed_tokens

    def free(self, seq):
        for block in reversed(seq.block_table):
            self._release(block)
        seq.block_table = []
        seq.num_computed_tokens = 0

    @property
    def num_free_blocks(self):
        return len(self.free_list)
