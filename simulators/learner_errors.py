"""What a learner's policy can do wrong in a lab's simulator (labs A-C, lessons 18-20), one error class each.

The learner's code may raise, or break a rule of the engine. Each such case is a ``LearnerError``
(an ``InvalidInput``, so the view shows it as a message, never a traceback), named as the grader would
name it: ``ManagerError`` for lab A's block manager, ``EvictionError`` for lab B's eviction policy,
``PolicyError`` for lab C's scheduling policy. ``policy_instance`` makes a policy given as a class, and
names what its constructor raised. The twins that raise them are learner_policy.py (labs A and B) and
learner_paging.py (lab C).
"""

from __future__ import annotations

from typing import Any

from kvcourse.simulators.checks import InvalidInput


class LearnerError(InvalidInput):
    """The learner's policy raised, or made a choice the engine refuses; the message says which."""


class ManagerError(LearnerError):
    """Lab A: the learner's block manager raised or broke a rule."""


class EvictionError(LearnerError):
    """Lab B: the learner's eviction policy raised, or chose a block the pool must not evict."""


class PolicyError(LearnerError):
    """Lab C: the learner's scheduling policy raised, made a choice the scheduler refuses, or starved a request."""


def policy_instance(policy: Any, error: type[LearnerError]) -> Any:
    """A policy given as a class is made here (a fresh one per run), one given as an object is used as it is."""
    if not isinstance(policy, type):
        return policy
    try:
        return policy()
    except Exception as err:  # noqa: BLE001 - the learner's code: its error is the message
        raise error(f"{policy.__name__}() raised {type(err).__name__}: {str(err)[:200]}") from None
