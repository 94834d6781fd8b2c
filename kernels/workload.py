"""The request trace that lessons 09, 11 and 16 replay (lesson 14 a scaled copy): who arrives when, how long they talk.

(And the help-desk requests that lessons 13, 16 and 21 send the real model: ``LIBRARY_SYSTEM_PROMPT``
and ``LIBRARY_QUESTIONS``.)

One seeded, deterministic workload, kept here so every lesson that replays it replays the same requests:

* **Arrivals** form a Poisson process (exponential gaps between requests), the usual model of
  many independent users; the vLLM paper drives its experiments the same way.
* **Lengths** are log-normal: most prompts and answers are short, a few are very long. Chat
  logs look like that; the defaults put the *means* near ShareGPT's as the vLLM paper reports
  them (prompts about 161 tokens, answers about 338; Kwon et al., 2023, Fig. 11). With
  ``sigma = 1`` a log-normal's mean is ``e^0.5`` (about 1.65) times its median.
* **Answers end early.** Every client asks for at most ``answer_limit`` new tokens, and a
  system that reserves memory up front must reserve that many; the answer actually drawn is
  usually much shorter (the model says "end of text"), and never longer than the limit.

Time is counted in engine steps: one step gives each running request one token.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, replace

from kvcourse.kernels.checks import check_positive_int


@dataclass(frozen=True)
class TraceRequest:
    """One request of a trace: when it arrives, its prompt, its (future) answer, what it may reserve."""

    arrival_step: int
    num_prompt_tokens: int
    num_output_tokens: int
    max_len: int  # prompt + the answer limit the client asked for: what a reservation must hold

    def __post_init__(self) -> None:
        if min(self.num_prompt_tokens, self.num_output_tokens) < 1 or self.arrival_step < 0:
            raise ValueError(f"invalid trace request {self}")
        if self.final_len > self.max_len:
            raise ValueError(f"final length {self.final_len} exceeds max_len {self.max_len}")

    @property
    def final_len(self) -> int:
        return self.num_prompt_tokens + self.num_output_tokens

    @property
    def ends_early(self) -> bool:
        """The answer stopped before the limit the client asked for."""
        return self.final_len < self.max_len


def _positive_float(name: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise ValueError(f"{name} must be a finite number > 0, got {value!r}")


@dataclass(frozen=True)
class TraceConfig:
    """The knobs of the workload (lesson 09 shows which of them move the waste)."""

    num_requests: int = 200
    arrivals_per_step: float = 0.25  # mean of the Poisson process
    prompt_mean: float = 161.0  # tokens; ShareGPT's mean prompt in the vLLM paper
    answer_mean: float = 338.0  # tokens; ShareGPT's mean answer, before the limit cuts it
    sigma: float = 1.0  # spread of the log-normal lengths (0 < sigma; larger = longer tail)
    answer_limit: int = 1024  # max_tokens every client asks for
    max_prompt_len: int = 1024  # longer prompts are truncated to this
    seed: int = 0

    def __post_init__(self) -> None:
        for name in ("num_requests", "answer_limit", "max_prompt_len"):
            check_positive_int(name, getattr(self, name))
        for name in ("arrivals_per_step", "prompt_mean", "answer_mean", "sigma"):
            _positive_float(name, getattr(self, name))
        if isinstance(self.seed, bool) or not isinstance(self.seed, int):
            raise ValueError(f"seed must be a whole number, got {self.seed!r}")

    def scaled(self, factor: float) -> TraceConfig:
        """The same shape with every length times ``factor`` (a short trace for a real-model run)."""
        _positive_float("factor", factor)
        return TraceConfig(
            self.num_requests,
            self.arrivals_per_step,
            self.prompt_mean * factor,
            self.answer_mean * factor,
            self.sigma,
            max(1, round(self.answer_limit * factor)),
            max(1, round(self.max_prompt_len * factor)),
            self.seed,
        )

    def shrunk(self, factor: float, num_requests: int | None = None) -> TraceConfig:
        """Lengths times ``factor`` and arrivals 1/``factor`` as often, so as many conversations overlap: the
        trace for a real-model run (lesson 14 serves lesson 09's trace this way, with factor 1/32)."""
        scaled = self.scaled(factor)
        return replace(
            scaled,
            arrivals_per_step=self.arrivals_per_step / factor,
            num_requests=self.num_requests if num_requests is None else num_requests,
        )


LESSON_TRACE = TraceConfig()
"""The trace lessons 09, 11 and 16 replay; lesson 14 serves it scaled down on the real model (``lesson_stream``)."""

LESSON_POOL_SLOTS = 16_384
"""The pool they replay it on, in token slots (1,024 blocks of 16): about 14 reservations' worth."""


def lesson_stream(num_requests: int, scale: float = 1 / 32, arrivals_per_step: float = 2.0) -> TraceConfig:
    """Lesson 09's trace for a real-model run (lesson 14): every length times ``scale``, requests in a stream.

    A request holds its place for about its answer's length in steps (338 / 32, about 10.6), so at
    two arrivals per step about 21 conversations want to run at once (Little's law): more than the
    13 reservations a 32-block pool holds, fewer than paging fits in it. Arrivals keep coming for
    many steps (17 for 40 requests, 32 for 64), not in a burst of one or two.
    """
    return replace(LESSON_TRACE.scaled(scale), num_requests=num_requests, arrivals_per_step=arrivals_per_step)


def _lognormal(rng: random.Random, mean: float, sigma: float) -> float:
    return rng.lognormvariate(math.log(mean) - sigma**2 / 2, sigma)  # a log-normal with this mean


def request_trace(config: TraceConfig = LESSON_TRACE) -> list[TraceRequest]:
    """The requests of ``config``, in arrival order; the same config always gives the same trace."""
    rng = random.Random(config.seed)
    trace, clock = [], 0.0
    for _ in range(config.num_requests):
        clock += rng.expovariate(config.arrivals_per_step)
        prompt = min(config.max_prompt_len, max(1, round(_lognormal(rng, config.prompt_mean, config.sigma))))
        answer = min(config.answer_limit, max(1, round(_lognormal(rng, config.answer_mean, config.sigma))))
        trace.append(TraceRequest(int(clock), prompt, answer, prompt + config.answer_limit))
    return trace


def trace_summary(trace: list[TraceRequest]) -> dict[str, float]:
    """Means and shares a lesson prints about a trace."""
    if not trace:
        raise ValueError("the trace is empty")
    n = len(trace)
    return {
        "num_requests": n,
        "mean_prompt": sum(r.num_prompt_tokens for r in trace) / n,
        "mean_answer": sum(r.num_output_tokens for r in trace) / n,
        "mean_reserved": sum(r.max_len for r in trace) / n,
        "share_ending_early": sum(r.ends_early for r in trace) / n,
        "last_arrival_step": max(r.arrival_step for r in trace),
    }


# Lesson 13's system prompt: a library's help desk, several hundred tokens once SmolLM2's chat
# template wraps it. The lesson serves requests that open with it; lesson 16 and the tests rebuild them from here.
# A backslash at a line's end continues the line: the text has no line break there.
LIBRARY_SYSTEM_PROMPT = """\
You are Juniper, the help-desk assistant of the Riverside Public Library. Follow these rules in every reply.
1. Be brief: answer in at most three sentences unless the reader asks for more detail.
2. Opening hours: Monday to Friday 9:00 to 20:00, Saturday 10:00 to 17:00, closed on Sunday and public holidays.
3. Borrowing: a library card is free for residents. Books may be borrowed for three weeks, films and games for \
one week. Up to twenty items at a time.
4. Renewals: items may be renewed twice online, by phone or at the desk, unless another reader has reserved them.
5. Late returns: there are no fines for children's items. Adult items cost 20 cents per day, capped at 5 euros per item.
6. Lost or damaged items: the reader pays the replacement price shown in the catalogue plus a 3 euro handling fee.
7. Rooms: the two study rooms can be booked for up to three hours per day, at most one week ahead.
8. Printing and copying cost 10 cents per black-and-white page and 50 cents per colour page. Scanning is free.
9. Wi-Fi is free; the network is called Riverside-Guest and needs no password.
10. Never guess: if you do not know the answer, say so and suggest asking a librarian at the front desk.
11. Never ask for or repeat a reader's card number, address or other personal details.
12. Events: story time for children every Wednesday at 16:00, a book club on the first Thursday of each month at 19:00.
13. Accessibility: the building has step-free access, a lift to every floor and large-print books on the ground floor.
14. Donations: we accept books in good condition published in the last ten years, at the front desk only.
Reply in the language the reader writes in, and stay friendly and calm."""
LIBRARY_QUESTIONS = (
    "Can I renew a book twice?",
    "How much does colour printing cost?",
    "Are you open on Sunday?",
    "Is there story time for kids?",
)
