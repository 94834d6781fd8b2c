"""The scheduler asks its SchedulingPolicy (lab C): the view a policy sees, each choice checked before it is done."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Collection

from kvcourse.kernels.engine.policy import FCFSPolicy, Refuse, SchedulingPolicy, SchedulingPolicyError, SeqView
from kvcourse.kernels.engine.sequence import Sequence, SequenceStatus
from kvcourse.kernels.memory.block_manager import BlockManager, FindsPrefixes


def seq_view(manager: BlockManager, seq: Sequence, preempted: Collection[Sequence] = (), now: int = 0) -> SeqView:
    """What the policy sees of a sequence (blocks needed: to admit it when waiting, to append when running)."""
    waiting = seq.status is SequenceStatus.WAITING
    count = getattr(manager, "num_blocks_to_allocate" if waiting else "num_blocks_to_append", None)
    # A manager without the count (a learner's, lab A) is read as one without sharing or prefix hits.
    needed = count(seq) if count is not None else seq.num_blocks - len(seq.block_table)
    return SeqView(
        seq.seq_id,
        seq.request_id,
        seq.arrival,
        seq.num_prompt_tokens,
        seq.num_tokens,
        seq.num_computed_tokens,
        seq.params.max_new_tokens or 0,
        seq.params.n,
        len(seq.block_table),
        needed,
        seq.num_preemptions,
        any(seq is p for p in preempted),
        now,
        manager.prefix_hit_tokens(seq) if waiting and isinstance(manager, FindsPrefixes) else 0,
    )


def chosen_victim(
    policy: SchedulingPolicy,
    manager: BlockManager,
    running: list[Sequence],
    needy: Sequence,
    scheduled: list[Sequence],
    now: int = 0,
) -> Sequence:
    """The running sequence to preempt for ``needy``: one not given its tokens this step yet, or ``needy``."""
    if type(policy) is FCFSPolicy:  # the default needs no views: the newest running sequence
        return running[-1]
    candidates = [s for s in running if not any(s is done for done in scheduled)]
    choice = policy.choose_victim(
        [seq_view(manager, s, now=now) for s in candidates], seq_view(manager, needy, now=now)
    )
    for seq in candidates:
        if seq.seq_id == choice and not isinstance(choice, bool):
            return seq
    raise SchedulingPolicyError(
        f"choose_victim returned {choice!r}: not the seq_id of a running sequence "
        f"still to run this step (candidates: {[s.seq_id for s in candidates]})"
    )


def chosen_admission(
    policy: SchedulingPolicy,
    manager: BlockManager,
    waiting: deque[Sequence],
    preempted: list[Sequence],
    refuse: Callable[[Sequence, str], None],
    now: int = 0,
) -> int | None:
    """The policy's next admission as an index into ``waiting``, after carrying out its refusals.

    ``refuse(seq, reason)`` turns a waiting sequence away for good (it leaves ``waiting``).
    """
    if type(policy) is FCFSPolicy:  # the default needs no views: the head, unless just preempted
        return None if any(waiting[0] is p for p in preempted) else 0
    while waiting:
        views = [seq_view(manager, s, preempted, now) for s in waiting]
        choice = policy.choose_admission(views, manager.num_free_blocks)
        if isinstance(choice, Refuse):
            if not isinstance(choice.reason, str) or not choice.reason.strip():
                raise SchedulingPolicyError(
                    f"Refuse({choice.index!r}, {choice.reason!r}): a refusal needs a "
                    "reason, which the request's output shows"
                )
            seq = _waiting_at(waiting, choice.index)
            if seq.num_completion_tokens:
                raise SchedulingPolicyError(
                    f"Refuse({choice.index}): sequence {seq.seq_id} has begun its answer "
                    "(it was preempted); only a request not started can be refused"
                )
            refuse(seq, choice.reason.strip())
            continue
        if choice is None:
            return None
        _waiting_at(waiting, choice)
        return choice
    return None


def _waiting_at(waiting: deque[Sequence], index: object) -> Sequence:
    if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < len(waiting):
        raise SchedulingPolicyError(
            f"choose_admission returned {index!r}: not an index into the "
            f"{len(waiting)} waiting sequences (or None, or Refuse)"
        )
    return waiting[index]
