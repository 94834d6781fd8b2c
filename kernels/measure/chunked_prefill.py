"""A long prompt arriving among chatting users, served at several token budgets (lesson 21 and its benchmark).

A few users chat (short prompts, steady decoding); after a few steps one long document arrives. The engine
schedules the running decodes first and fills the rest of each step's token budget
(``EngineConfig.max_num_batched_tokens``) with prompt chunks, as vLLM V1 does: a budget that holds the whole
document prefills it in one step, a small one cuts it into chunks that ride along with the decodes.
``serve_chat_and_document`` serves that trace once and returns every request's latency (kernels/engine/latency.py,
vLLM's definitions) and tokens; ``figures`` reads the chatting users' gaps and the document's time to first token
from it; ``budget_table`` sets several budgets side by side, with goodput against ``LatencyTargets``.
benchmarks/bench_chunked_prefill.py and lesson 21 both serve the trace through here.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

import pandas as pd

from kvcourse.kernels.engine.config import EngineConfig
from kvcourse.kernels.engine.latency import LatencyTargets, RequestLatency, latency_summary, percentile
from kvcourse.kernels.engine.llm_engine import LLMEngine
from kvcourse.kernels.engine.sampling import SamplingParams
from kvcourse.kernels.model.transformer import Transformer

DOCUMENT = "document"
CHAT_ANSWER_TOKENS = 40
DOCUMENT_ARRIVES_AT_STEP = 4


@dataclass(frozen=True)
class BudgetRun:
    """One serving of the trace: each request's latency and tokens, by name ("chat 0", ..., "document")."""

    budget: int
    latencies: dict[str, RequestLatency]
    tokens: dict[str, list[int]]

    @property
    def chat_gaps_s(self) -> list[float]:
        """Every inter-token gap of every chatting user, pooled as vLLM's benchmark pools ITL."""
        return [gap for name, lat in self.latencies.items() if name != DOCUMENT for gap in lat.itl_s]


def serve_chat_and_document(
    model: Transformer,
    budget: int,
    document: list[int],
    chats: list[list[int]],
    answer: int = CHAT_ANSWER_TOKENS,
    arrives_at: int = DOCUMENT_ARRIVES_AT_STEP,
) -> BudgetRun:
    """The chats from step 0, the document after ``arrives_at`` steps, under a token budget of ``budget`` per step."""
    engine = LLMEngine(model, EngineConfig(max_num_batched_tokens=budget))
    params = SamplingParams(max_new_tokens=answer, stop_on_eos=False)
    ids = {f"chat {i}": engine.add_request(chat, params) for i, chat in enumerate(chats)}
    for _ in range(arrives_at):
        engine.step()
    ids[DOCUMENT] = engine.add_request(document, SamplingParams(max_new_tokens=2, stop_on_eos=False))
    while engine.has_unfinished_requests:
        engine.step()
    outputs = {name: engine.requests[rid].output() for name, rid in ids.items()}
    latencies = {name: out.latency for name, out in outputs.items() if out.latency is not None}
    if len(latencies) != len(outputs):
        raise RuntimeError(f"a request did not finish at a budget of {budget} tokens: {sorted(outputs)}")
    return BudgetRun(budget, latencies, {name: out.tokens for name, out in outputs.items()})


def figures(served: BudgetRun, plain_gap_s: float | None = None) -> dict[str, float]:
    """The chatting users' worst gap, p99/p95/p50 ITL and gaps over twice a plain step; the document's TTFT.

    ``plain_gap_s`` is a plain decode step's gap (default: the median gap of this run); a gap over twice it
    counts as slowed."""
    gaps = served.chat_gaps_s
    typical = statistics.median(gaps) if plain_gap_s is None else plain_gap_s
    return {
        "chat_worst_gap_s": max(gaps),
        "chat_p99_itl_s": percentile(gaps, 99),
        "chat_p95_itl_s": percentile(gaps, 95),
        "chat_p50_itl_s": percentile(gaps, 50),
        "chat_gaps_over_2x_median": sum(gap > 2 * typical for gap in gaps),
        "document_ttft_s": served.latencies[DOCUMENT].ttft_s,
    }


def targets_from(unchunked: BudgetRun, ttft_factor: float = 1.2, gap_share: float = 0.25) -> LatencyTargets:
    """Targets scaled to the machine: a first token within ``ttft_factor`` times the document's TTFT without
    chunking, and no gap longer than ``gap_share`` of it (a chatting user never waits for most of the prefill)."""
    document_ttft = unchunked.latencies[DOCUMENT].ttft_s
    return LatencyTargets(ttft_s=ttft_factor * document_ttft, itl_s=gap_share * document_ttft)


def budget_table(runs: list[BudgetRun], targets: LatencyTargets | None = None) -> pd.DataFrame:
    """One row per budget (the first run's budget holds the whole document): the chats' gaps in ms, how many
    were slowed (over twice the first run's median gap, a plain decode step), their mean TPOT, the document's
    TTFT; and with ``targets``, goodput: the requests that met every target, and vLLM's goodput, those
    requests per second of the run."""
    plain = statistics.median(runs[0].chat_gaps_s)
    rows = []
    for served in runs:
        got = figures(served, plain)
        tpots = [lat.tpot_s for name, lat in served.latencies.items() if name != DOCUMENT and lat.tpot_s is not None]
        row: dict[str, float | int | None] = {
            "budget (tokens)": served.budget,
            "worst chat gap ms": got["chat_worst_gap_s"] * 1e3,
            "p99 ITL ms": got["chat_p99_itl_s"] * 1e3,
            "p95 ITL ms": got["chat_p95_itl_s"] * 1e3,
            "p50 ITL ms": got["chat_p50_itl_s"] * 1e3,
            "chat gaps slowed": int(got["chat_gaps_over_2x_median"]),
            "chat TPOT ms": statistics.mean(tpots) * 1e3,
            "document TTFT steps": served.latencies[DOCUMENT].ttft_steps,
            "document TTFT s": got["document_ttft_s"],
        }
        if targets is not None:
            summary = latency_summary(list(served.latencies.values()), targets)
            row["requests meeting both"] = summary.num_good
            row["goodput req/s"] = summary.goodput_per_s
        rows.append(row)
    return pd.DataFrame(rows).set_index("budget (tokens)")


def tokens_equal(runs: list[BudgetRun]) -> tuple[int, int]:
    """(requests whose tokens match the first run's at every budget, requests)."""
    first = runs[0].tokens
    same = sum(all(run.tokens[name] == tokens for run in runs[1:]) for name, tokens in first.items())
    return same, len(first)


def tiled(token_ids: list[int], length: int) -> list[int]:
    """``token_ids`` repeated and cut to ``length`` tokens: a long document from a short text."""
    if not token_ids:
        raise ValueError("token_ids is empty")
    return [token_ids[i % len(token_ids)] for i in range(length)]
