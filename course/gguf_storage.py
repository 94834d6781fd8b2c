"""What the model's GGUF file holds, format by format (lesson 00): why "4-bit" averages more than 4 bits.

A GGUF file stores each tensor in one of several formats. SmolLM2's file keeps most weights in
``Q4_1`` (blocks of 32 four-bit integers with a 16-bit scale and a 16-bit offset: 5 bits per weight),
its embedding table in ``Q8_0`` (blocks of 32 eight-bit integers with a 16-bit scale: 8.5 bits) and
the norms in ``F32``; the header and metadata add a little more.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

__all__ = ["storage_by_format"]


def storage_by_format(path: Path) -> pd.DataFrame:
    """One row per storage format in the GGUF file at ``path``: parameters, bytes, bits per parameter.

    A last row, ``whole file``, divides the file's size (metadata included) by every parameter.
    """
    import gguf

    reader = gguf.GGUFReader(str(path))
    rows: dict[str, list[int]] = {}
    for tensor in reader.tensors:
        counts = rows.setdefault(tensor.tensor_type.name, [0, 0])
        counts[0] += int(tensor.n_elements)
        counts[1] += int(tensor.n_bytes)
    table = pd.DataFrame([(name, n, b) for name, (n, b) in rows.items()], columns=["format", "parameters", "bytes"])
    table = table.sort_values("parameters", ascending=False, ignore_index=True)
    whole = pd.DataFrame([("whole file", table["parameters"].sum(), path.stat().st_size)], columns=table.columns)
    table = pd.concat([table, whole], ignore_index=True)
    table["bits per parameter"] = (8 * table["bytes"] / table["parameters"]).round(2)
    return table
