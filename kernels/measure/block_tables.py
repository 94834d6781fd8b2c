"""Every sequence's block table after every engine step, read back as tidy tables (lesson 11).

A lesson steps the engine itself and calls ``BlockTableWatch.look`` after each step; the watch keeps
one row per sequence per step, and answers the lesson's questions as pandas DataFrames: how many
blocks each sequence held against how many its tokens need, how many slots stood empty, and who
held a freed block next.
"""

from __future__ import annotations

import math

import pandas as pd

from kvcourse.kernels.engine.llm_engine import LLMEngine


class BlockTableWatch:
    """One row per sequence per engine step: tokens stored, blocks held, blocks needed, empty slots."""

    def __init__(self, block_size: int) -> None:
        self.block_size = block_size
        self.rows: list[dict] = []
        self.last_blocks: dict[int, list[int]] = {}  # each request's block table when it last held blocks
        self.first_done: int | None = None  # the first request seen finished, and the step it was seen in
        self.first_done_step: int | None = None

    def look(self, engine: LLMEngine) -> None:
        """Read every request's (first) sequence after a step: its tokens in the pool and its block table."""
        for request in engine.requests.values():
            seq = request.seqs[0]
            table = list(seq.block_table)
            self.rows.append(
                {
                    "step": engine.num_steps,
                    "request": request.request_id,
                    "stored": seq.num_computed_tokens,
                    "blocks": len(table),
                    "table": table,
                }
            )
            if table:
                self.last_blocks[request.request_id] = table
            if request.is_done and self.first_done is None:
                self.first_done, self.first_done_step = request.request_id, engine.num_steps

    def table(self) -> pd.DataFrame:
        """Every look so far; ``needed`` = ceil(stored / block_size), ``empty`` = slots in its blocks - stored."""
        looks = pd.DataFrame(self.rows, columns=["step", "request", "stored", "blocks", "table"])
        looks["needed"] = [math.ceil(n / self.block_size) for n in looks["stored"]]
        looks["empty"] = looks["blocks"] * self.block_size - looks["stored"]
        return looks[["step", "request", "stored", "blocks", "needed", "empty", "table"]]

    def requests(self, engine: LLMEngine) -> pd.DataFrame:
        """One row per request: prompt and answer tokens, why it stopped, and its last look holding blocks."""
        looks = self.table()
        holding = looks[looks["blocks"] > 0]
        rows = []
        for rid, request in engine.requests.items():
            last = holding[holding["request"] == rid].iloc[-1]
            out = request.output()
            rows.append(
                {
                    "request": rid,
                    "prompt tokens": len(request.prompt_token_ids),
                    "answer tokens": len(out.tokens),
                    "stopped by": out.finish_reasons[0],
                    "last seen storing": int(last["stored"]),
                    "in blocks": int(last["blocks"]),
                }
            )
        return pd.DataFrame(rows).set_index("request")

    def next_holders(self, blocks: list[int], after_step: int) -> pd.DataFrame:
        """For each of ``blocks``: the first request seen holding it after ``after_step``, and from which step."""
        rows: dict[int, dict[str, int]] = {}
        for row in self.rows:
            for block in row["table"]:
                if row["step"] > after_step and block in blocks and block not in rows:
                    rows[block] = {"block": block, "next held by request": row["request"], "from step": row["step"]}
        in_order = sorted(rows.values(), key=lambda r: r["block"])
        return pd.DataFrame(in_order, columns=["block", "next held by request", "from step"]).set_index("block")
