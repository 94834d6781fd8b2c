"""The attention backends that keep one sequence's K/V in contiguous memory (lessons 02, 05, 06, 16).

``contiguous`` no cache at all, and the contiguous cache that doubles when full; ``int8`` the same
cache stored as int8 with a scale per token and KV head, ``fp8`` as E4M3 with a scale per layer, ``kivi``
in 2 bits (keys per channel, values per token, the newest tokens in full precision); ``sliding`` a ring
buffer of the last ``window`` tokens. Each answers ``SequenceCache`` (attention/backend.py), as ``generate`` drives it.
The paged backend, which reads a block pool through block tables, is attention/paged_backend.py,
beside the paged kernels it calls.
"""
