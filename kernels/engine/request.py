"""A request and what the engine reports about it after each step (lessons 08, 12, 13)."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

from kvcourse.kernels.engine.latency import RequestLatency, RequestTimes
from kvcourse.kernels.engine.sampling import SamplingParams
from kvcourse.kernels.engine.sequence import Sequence, SequenceStatus


class RequestStatus(Enum):
    """A request ends FINISHED or REFUSED, never lost (lesson 08)."""

    WAITING = "waiting"
    RUNNING = "running"
    FINISHED = "finished"
    REFUSED = "refused"


@dataclass
class Request:
    """A prompt, its sampling parameters, and the sequences (one per sample) that serve it."""

    request_id: int
    prompt_token_ids: list[int]
    params: SamplingParams
    seqs: list[Sequence] = field(default_factory=list)
    status: RequestStatus = RequestStatus.WAITING
    refusal: str | None = None
    first_token_step: int | None = None
    num_cached_tokens: int = 0  # prompt tokens found in the prefix cache at first admission
    times: RequestTimes = field(default_factory=lambda: RequestTimes(0, 0.0))  # the engine's latency stamps

    @property
    def num_samples(self) -> int:
        return self.params.n

    @property
    def all_finished(self) -> bool:
        return len(self.seqs) == self.num_samples and all(s.status is SequenceStatus.FINISHED for s in self.seqs)

    @property
    def is_done(self) -> bool:
        return self.status in (RequestStatus.FINISHED, RequestStatus.REFUSED)

    def output(self) -> RequestOutput:
        return RequestOutput(
            request_id=self.request_id,
            samples=[s.completion_token_ids for s in self.seqs] or [[] for _ in range(self.num_samples)],
            finished=self.is_done,
            refusal=self.refusal,
            finish_reasons=tuple(s.finish_reason.value if s.finish_reason else "" for s in self.seqs),
            num_cached_tokens=self.num_cached_tokens,
            latency=self.times.latency(),
        )


@dataclass(frozen=True)
class RequestOutput:
    """A request after a step: its completions so far and whether it is done."""

    request_id: int
    samples: list[list[int]]
    finished: bool
    refusal: str | None = None
    finish_reasons: tuple[str, ...] = ()
    num_cached_tokens: int = 0
    latency: RequestLatency | None = None  # once finished with a token: TTFT, TPOT, ITL (latency.py)

    @property
    def tokens(self) -> list[int]:
        """The first (for n == 1 the only) completion."""
        return self.samples[0] if self.samples else []
