"""The request traces a lab's policy is run on: public ones for feedback, hidden ones drawn per student.

A trace is a small serving day for the tiny lab model: requests with their arrival step, their
answer length, their samples (n) and, for lab A, beam searches; for lab B, conversations whose
next turn extends the previous prompt and answer. Each lab draws its traces from one family here, from a
seed; which family, which seeds a learner sees and how many more the grader draws per student is the lab's
spec (spec.py). A trace travels into the grading sandbox as plain JSON (``to_plain``/``from_plain``) and is
validated on the way back in.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

VOCAB = 96  # the lab model's vocabulary (model.py)
MAX_TOKENS_PER_SEQ = 120  # below the lab model's 128 positions


@dataclass(frozen=True)
class LabRequest:
    """One request: its prompt, when it arrives, how it is sampled. ``follows`` names an earlier request
    (its index) whose prompt and answer this prompt continues: the next turn of a conversation."""

    prompt: tuple[int, ...]
    max_new_tokens: int
    arrival: int = 0
    n: int = 1
    temperature: float = 0.0
    seed: int | None = None
    follows: int | None = None


@dataclass(frozen=True)
class BeamRun:
    """A beam search on the learner's manager (lab A)."""

    prompt: tuple[int, ...]
    beam_width: int
    max_new_tokens: int


@dataclass(frozen=True)
class LabTrace:
    """A named trace: requests, the pool they share, and (lab A) beam searches."""

    name: str
    lab: str  # the key of the lab it was drawn for (its LabSpec, spec.py)
    requests: tuple[LabRequest, ...]
    num_blocks: int
    block_size: int = 4
    max_num_seqs: int = 8
    beams: tuple[BeamRun, ...] = field(default=())
    public: bool = True

    def __post_init__(self) -> None:
        for i, r in enumerate(self.requests):
            if not r.prompt or min(r.prompt) < 0 or max(r.prompt) >= VOCAB:
                raise ValueError(f"{self.name}: request {i} needs a prompt of token ids in [0, {VOCAB})")
            if r.follows is not None and not 0 <= r.follows < i:
                raise ValueError(f"{self.name}: request {i} follows {r.follows}, not an earlier request")

    def describe(self) -> str:
        """One line a learner reads: what the trace holds."""
        n = sum(r.n > 1 for r in self.requests)
        turns = sum(r.follows is not None for r in self.requests)
        parts = [f"{len(self.requests)} requests", f"a pool of {self.num_blocks} blocks of {self.block_size}"]
        if n:
            parts.append(f"{n} with n > 1")
        if self.beams:
            parts.append(f"{len(self.beams)} beam search(es)")
        if turns:
            parts.append(f"{turns} follow-up turns")
        return ", ".join(parts)

    def to_plain(self) -> dict:
        return {
            "name": self.name,
            "lab": self.lab,
            "num_blocks": self.num_blocks,
            "block_size": self.block_size,
            "max_num_seqs": self.max_num_seqs,
            "public": self.public,
            "requests": [
                [list(r.prompt), r.max_new_tokens, r.arrival, r.n, r.temperature, r.seed, r.follows]
                for r in self.requests
            ],
            "beams": [[list(b.prompt), b.beam_width, b.max_new_tokens] for b in self.beams],
        }

    @classmethod
    def from_plain(cls, data: dict) -> LabTrace:
        requests = tuple(LabRequest(tuple(p), m, a, n, t, s, f) for p, m, a, n, t, s, f in data["requests"])
        beams = tuple(BeamRun(tuple(p), w, m) for p, w, m in data["beams"])
        return cls(
            data["name"],
            data["lab"],
            requests,
            data["num_blocks"],
            data["block_size"],
            data["max_num_seqs"],
            beams,
            data["public"],
        )


def _prompt(rng: random.Random, length: int) -> tuple[int, ...]:
    return tuple(rng.randrange(VOCAB) for _ in range(length))


def block_manager_trace(rng: random.Random, name: str, public: bool) -> LabTrace:
    """Greedy requests, parallel samples (n > 1) and beam searches on a pool tight enough to preempt."""
    requests = []
    for _ in range(rng.randint(5, 8)):
        n = rng.choice([1, 1, 2, 3])
        requests.append(
            LabRequest(
                _prompt(rng, rng.randint(3, 14)),
                rng.randint(4, 14),
                arrival=rng.randint(0, 6),
                n=n,
                temperature=1.0 if n > 1 else 0.0,
                seed=rng.randrange(1000) if n > 1 else None,
            )
        )
    requests.sort(key=lambda r: r.arrival)
    beams = tuple(
        BeamRun(_prompt(rng, rng.randint(3, 9)), rng.randint(2, 3), rng.randint(4, 8)) for _ in range(rng.randint(1, 2))
    )
    return LabTrace(name, "block_manager", tuple(requests), rng.randint(14, 22), beams=beams, public=public)


def eviction_trace(rng: random.Random, name: str, public: bool) -> LabTrace:
    """A chat service's day beside a batch job, two requests at a time, on a pool with room for the longest
    conversation and a few cached blocks more. Four system prompts, two of them in use in each half of the day
    (so a count of hits from the morning outstays its use in the afternoon); bursts of one-off batch prompts of
    two to four blocks that nobody continues and nobody asks for again; and chats whose next turn comes back
    after a few other requests, its prompt the whole conversation so far. Least recently used forgets a popular
    prompt and a conversation that was about to continue while a burst passes; an online policy can tell them
    from the burst by their hits and their depth; only the future tells which conversations go on."""
    systems = [_prompt(rng, 4 * rng.randint(4, 6)) for _ in range(4)]
    order = rng.sample(range(4), 4)
    requests: list[LabRequest] = []
    totals: list[int] = []  # each request's prompt and answer, earlier turns included
    chats: list[int] = []  # the requests a later turn may continue
    step, burst = 0, 0
    count = rng.randint(28, 34)
    for i in range(count):
        step += rng.randint(2, 6)
        half = 2 * (2 * i // count)
        draw = rng.random()
        waiting = [j for j in chats if i - 10 <= j < i - 2 and totals[j] < 60]  # a conversation comes back later
        if burst or (not waiting and draw < 0.2) or 0.3 <= draw < 0.5:  # a one-off of whole blocks, in a burst
            burst = burst - 1 if burst else rng.randint(1, 3)
            request = LabRequest(_prompt(rng, 4 * rng.randint(2, 4)), rng.randint(3, 8), step)
            totals.append(len(request.prompt) + request.max_new_tokens)
        elif waiting and draw < 0.3:
            parent = rng.choice(waiting)
            chats.remove(parent)
            request = LabRequest(_prompt(rng, rng.randint(2, 6)), rng.randint(3, 8), step, follows=parent)
            totals.append(totals[parent] + len(request.prompt) + request.max_new_tokens)
            chats.append(i)
        else:
            head = systems[order[half]] if rng.random() < 0.6 else systems[order[half + 1]]
            request = LabRequest(head + _prompt(rng, rng.randint(2, 6)), rng.randint(3, 8), step)
            totals.append(len(request.prompt) + request.max_new_tokens)
            chats.append(i)
        requests.append(request)
    longest = -(-max(totals) // 4)  # blocks of 4 for the longest turn, earlier turns included
    return LabTrace(name, "eviction", tuple(requests), longest + rng.randint(5, 8), max_num_seqs=2, public=public)


def scheduler_trace(rng: random.Random, name: str, public: bool) -> LabTrace:
    """A rush of short and long requests on a pool too small for all of them at once: 16 to 22 requests, most
    arriving in the same step as another, nearly half of them long (prompts of 8-24 tokens, answers of 16-40).
    First come, first served makes every short request behind a long one miss its first-token target, and
    preempts whoever came last; an order that looks at the targets and at what each request still needs has
    room on every trace drawn (lab C's goodput, scheduler.py)."""
    requests = []
    step = 0
    for _ in range(rng.randint(16, 22)):
        step += rng.choice([0, 0, 1, 1, 3])
        long = rng.random() < 0.45
        requests.append(
            LabRequest(
                _prompt(rng, rng.randint(8, 24) if long else rng.randint(2, 8)),
                rng.randint(16, 40) if long else rng.randint(3, 10),
                step,
            )
        )
    return LabTrace(name, "scheduler", tuple(requests), rng.randint(16, 22), max_num_seqs=6, public=public)
