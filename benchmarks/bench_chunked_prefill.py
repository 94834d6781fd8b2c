"""What chunked prefill buys the users already decoding when a long prompt arrives (serving in 2026).

A few users chat (short prompts, steady decoding); after a few steps one long document (about 2,000
tokens) arrives. The engine schedules the running decodes first and fills the rest of each step's
token budget (``max_num_batched_tokens``) with prompt chunks, as vLLM V1 does. Without chunking the
whole document is prefilled in one step and every chatting user waits for it; with a small budget the
document is cut into chunks that ride along with the decodes, so each stall is short, and the document's
own first token comes later. Measured on the real model, each budget side by side in interleaved rounds:
the chatting users' longest inter-token gap (ITL), their p99 ITL, and the document's time to first token
(TTFT), with vLLM's definitions (kernels/engine/latency.py); the trace is served by
kernels/measure/chunked_prefill.py, which lesson 21 serves it through too. Printed as ratios, the worst gap's first.
Run: .venv/bin/python -m benchmarks.bench_chunked_prefill [--rounds 3] [--budgets 2560 512 128]
Writes benchmarks/results/chunked_prefill.json.
"""

from __future__ import annotations

import argparse

import torch

from benchmarks.common import interleaved, machine_header, summary, write_result
from benchmarks.engine_setup import load_engine_model, random_prompts
from kvcourse.kernels.measure.chunked_prefill import CHAT_ANSWER_TOKENS as CHAT_ANSWER
from kvcourse.kernels.measure.chunked_prefill import DOCUMENT_ARRIVES_AT_STEP, figures, serve_chat_and_document

BUDGETS = [2560, 512, 128]  # the first holds the whole document: no chunking
DOCUMENT_TOKENS = 2000
CHAT_USERS, CHAT_PROMPT = 4, (24, 48)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--budgets", type=int, nargs="*", default=BUDGETS)
    parser.add_argument("--document-tokens", type=int, default=DOCUMENT_TOKENS)
    args = parser.parse_args(argv)
    if args.budgets[0] < args.document_tokens + CHAT_USERS:
        parser.error("the first budget is the unchunked side: it must hold the whole document and the decodes")
    model, _, _ = load_engine_model(torch.float32)
    (document,) = random_prompts(1, args.document_tokens, args.document_tokens, seed=7)
    chats = random_prompts(CHAT_USERS, *CHAT_PROMPT, seed=8)
    runs: dict[int, list[dict[str, float]]] = {budget: [] for budget in args.budgets}

    def run(budget: int) -> float:
        runs[budget].append(figures(serve_chat_and_document(model, budget, document, chats)))
        return runs[budget][-1]["chat_worst_gap_s"]

    interleaved({f"budget {b}": lambda b=b: run(b) for b in args.budgets}, args.rounds, warmup=1, log=None)
    rows = []
    for budget in args.budgets:
        kept = runs[budget][-args.rounds :]  # the warm-up run first, then the timed rounds
        row = {"budget": budget, **{k: summary([r[k] for r in kept]) for k in kept[0]}}
        rows.append(row)
        print(
            f"  budget {budget:5d}: chat worst gap {row['chat_worst_gap_s']['median'] * 1e3:7.1f} ms, p99 ITL "
            f"{row['chat_p99_itl_s']['median'] * 1e3:7.1f} ms, p50 {row['chat_p50_itl_s']['median'] * 1e3:6.1f} ms, "
            f"gaps over 2x the median {row['chat_gaps_over_2x_median']['median']:.0f}; document TTFT "
            f"{row['document_ttft_s']['median'] * 1e3:7.1f} ms",
            flush=True,
        )
    whole, smallest = rows[0], rows[-1]

    def ratio(key: str) -> float:
        return whole[key]["median"] / smallest[key]["median"]

    result = {
        "workload": {
            "chat_users": CHAT_USERS,
            "chat_prompt_tokens": list(CHAT_PROMPT),
            "chat_answer_tokens": CHAT_ANSWER,
            "document_tokens": args.document_tokens,
            "document_arrives_at_step": DOCUMENT_ARRIVES_AT_STEP,
        },
        "rounds": args.rounds,
        "rows": rows,
        "worst_gap_unchunked_over_chunked": ratio("chat_worst_gap_s"),
        "p99_itl_unchunked_over_chunked": ratio("chat_p99_itl_s"),
        "document_ttft_chunked_over_unchunked": 1 / ratio("document_ttft_s"),
    }
    path = write_result("chunked_prefill", result)
    cpu = machine_header()["cpu_model"]
    print(
        f"budget {whole['budget']} (no chunking) against {smallest['budget']}, float32 on {cpu}: the chatting "
        f"users' worst gap is {result['worst_gap_unchunked_over_chunked']:.1f}x longer without chunking, their "
        f"p99 ITL {result['p99_itl_unchunked_over_chunked']:.1f}x; the document's TTFT is "
        f"{result['document_ttft_chunked_over_unchunked']:.2f}x with chunks\nwritten to {path}"
    )
    return result


if __name__ == "__main__":
    main()
