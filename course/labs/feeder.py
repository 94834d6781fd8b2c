"""Labs B and C graded without the future: the engine serves each hidden trace in a process the policy cannot read.

A policy graded up to a reference gains from knowing what comes next (Belady's oracle evicts by next use), so
where labs B and C are graded, the learner's process never holds a trace. The sandbox runner starts this module,
the feeder, before the first kernel: it makes itself non-dumpable (``prctl(PR_SET_DUMPABLE, 0)``: a process of the
same user without capabilities can then read neither its memory through /proc/PID/mem nor its open files through
/proc/PID/fd, nor trace it), reads the traces from a file descriptor the grader passed in (nothing of them is in
the notebook or on the sandbox's disk), and listens on a Unix socket. The collector (``record_lab``) asks it to
serve each trace; the feeder runs the engine and asks the learner's process only the policy's questions, with the
arguments the policy is given (``EvictionCandidate``, ``SeqView``: what an online policy may see now), and writes
each choice to the log the grader replays, through a second descriptor. The policy's process sees a request only
once the engine has it, and a choice is committed when it is sent; each trace is served once, on first asking.

Messages are JSON lines (never pickle: the feeder runs nothing the learner's process sends). The learner's side
is ``feed_all``; the feeder's is ``main`` (``python -m kvcourse.labs.feeder SOCKET TRACES_FD LOG_FD READY_FD``).
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import sys
import time
from dataclasses import fields, is_dataclass

from kvcourse.kernels.engine.policy import Refuse, SeqView
from kvcourse.kernels.memory.eviction import EvictionCandidate
from kvcourse.time_limit import time_limit

from .common import LabViolation
from .run import TRACE_LIMIT_S
from .spec import lab_spec
from .traces import LabTrace

FED_LABS = ("eviction", "scheduler")  # graded up to a reference: served by the feeder (lab A is pass/fail)
MAX_LINE = 20_000  # characters of one message from the learner's process (a choice, or an error's text)
GRACE_S = 10.0  # the feeder waits this much longer than the learner's own limit per trace
PR_SET_DUMPABLE = 4  # linux/prctl.h
_TYPES = {"EvictionCandidate": EvictionCandidate, "SeqView": SeqView}


class Stopped(BaseException):  # noqa: N818 - not an error of the engine: the run ends here, whatever it catches
    """The learner's process stopped the run (its limit, its exit) or stopped answering."""


class Channel:
    """JSON lines over a connected Unix socket, each read within the time left."""

    def __init__(self, conn: socket.socket, deadline: float) -> None:
        self.conn, self.deadline = conn, deadline
        self.reader = conn.makefile("rb")

    def send(self, message: dict) -> None:
        self.conn.sendall(json.dumps(message, allow_nan=False).encode() + b"\n")

    def receive(self) -> dict:
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise Stopped(f"the trace ran for more than {TRACE_LIMIT_S:g} s")
        self.conn.settimeout(left)
        try:
            line = self.reader.readline(MAX_LINE + 1)
        except TimeoutError:
            raise Stopped(f"the trace ran for more than {TRACE_LIMIT_S:g} s") from None
        except OSError as err:
            raise Stopped(f"the run stopped: the notebook's process closed the connection ({err})") from None
        if not line:
            raise Stopped("the run stopped: the notebook's process closed the connection")
        try:
            message = json.loads(line) if len(line) <= MAX_LINE else None
        except (ValueError, RecursionError):
            message = None
        if not isinstance(message, dict):
            raise Stopped("the run stopped: the notebook's process sent something that is not a message")
        return message


def encode(value: object) -> object:
    """A policy's argument as JSON: a snapshot dataclass by its fields in order, lists item by item."""
    if is_dataclass(value) and not isinstance(value, type):
        return {"t": type(value).__name__, "f": [getattr(value, f.name) for f in fields(value)]}
    if isinstance(value, (list, tuple)):
        return [encode(item) for item in value]
    return value


def decode(value: object) -> object:
    if isinstance(value, dict):
        return _TYPES[value["t"]](*value["f"])
    if isinstance(value, list):
        return [decode(item) for item in value]
    return value


class Shown:
    """A choice neither an index nor a refusal, standing in for it by its repr (which the engine's refusal shows)."""

    def __init__(self, text: str) -> None:
        self.text = text

    def __repr__(self) -> str:
        return self.text


def plain_choice(choice: object) -> object:
    """A choice as JSON: an int or None as itself, a refusal as ["refuse", index, reason], else ["bad", its repr]."""
    if isinstance(choice, Refuse) and type(choice.index) is int:
        return ["refuse", choice.index, str(choice.reason)[:200] if isinstance(choice.reason, str) else ""]
    if choice is None or (isinstance(choice, int) and not isinstance(choice, bool)):
        return choice
    return ["bad", repr(choice)[:60]]


def choice_from(plain: object) -> object:
    """What the engine is handed for a plain choice (anything malformed as a text, which the engine refuses)."""
    if plain is None or (isinstance(plain, int) and not isinstance(plain, bool)):
        return plain
    if isinstance(plain, list) and len(plain) == 3 and plain[0] == "refuse" and type(plain[1]) is int:
        return Refuse(plain[1], plain[2] if isinstance(plain[2], str) else "")
    if isinstance(plain, list) and len(plain) == 2 and plain[0] == "bad" and isinstance(plain[1], str):
        return Shown(plain[1][:60])
    return Shown(repr(plain)[:60])


class Asker:
    """The policy as the feeder's engine sees it: each question sent to the learner's process, its answer read."""

    def __init__(self, channel: Channel) -> None:
        self.channel = channel

    def _ask(self, method: str, *args: object) -> object:
        self.channel.send({"call": method, "args": encode(list(args))})
        reply = self.channel.receive()
        if "choice" in reply:
            return choice_from(reply["choice"])
        if "error" in reply:
            raise LabViolation(str(reply["error"])[:400])
        raise Stopped(str(reply.get("stop", "the run stopped"))[:400])

    def choose(self, candidates: list) -> object:
        return self._ask("choose", candidates)

    def choose_admission(self, waiting: list, free_blocks: int) -> object:
        return self._ask("choose_admission", waiting, free_blocks)

    def choose_victim(self, running: list, needy: object) -> object:
        return self._ask("choose_victim", running, needy)


def _session(conn: socket.socket, plan: dict, served: set, log) -> None:
    """One trace, served once: the learner's process names it, makes its policy, then answers the engine."""
    channel = Channel(conn, time.monotonic() + GRACE_S)
    hello = channel.receive()
    question, index = hello.get("q"), hello.get("trace")
    traces = plan.get(question, {}).get("traces", []) if isinstance(question, str) else []
    if type(index) is not int or not 0 <= index < len(traces) or (question, index) in served:
        channel.send({"refused": "no such trace, or it was served already"})
        return
    served.add((question, index))
    trace, spec = LabTrace.from_plain(traces[index]), lab_spec(plan[question]["lab"])
    channel.deadline = time.monotonic() + TRACE_LIMIT_S + GRACE_S
    try:
        channel.send({"start": trace.name})
        ready = channel.receive()
        if "ready" not in ready:
            raise Stopped(str(ready.get("stop", "the run stopped"))[:400])
        record = spec.record(Asker(channel), trace)
    except Stopped as why:
        record = {"entries": [], "beams": [], "error": str(why)}
    log.write(json.dumps({"q": question, "trace": index, "log": record}) + "\n")
    log.flush()
    with contextlib.suppress(OSError):  # a process that stopped the run may be gone
        channel.send({"done": record.get("error")})


def undumpable() -> str:
    """Make this process non-dumpable; '' when done, else why not (the grade's note says so)."""
    if not sys.platform.startswith("linux"):
        return f"no PR_SET_DUMPABLE on {sys.platform}"
    import ctypes

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0:
            return f"prctl failed: {os.strerror(ctypes.get_errno())}"
    except (OSError, AttributeError) as err:
        return f"prctl is not available: {err}"
    return ""


def main(argv: list[str]) -> int:
    address, traces_fd, log_fd, ready_fd = argv[0], int(argv[1]), int(argv[2]), int(argv[3])
    why = undumpable()  # before the traces are read
    with os.fdopen(traces_fd, "rb") as f:
        plan = json.loads(f.read())
    log = os.fdopen(log_fd, "w", encoding="utf-8")
    log.write(json.dumps({"feeder": {"protected": not why, "why": why, "pid": os.getpid()}}) + "\n")
    log.flush()
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(address)
    server.listen(8)
    os.write(ready_fd, b"1")
    os.close(ready_fd)
    served: set = set()
    while True:
        conn, _ = server.accept()
        try:
            _session(conn, plan, served, log)
        except (Stopped, OSError, ValueError, KeyError, TypeError) as err:  # a session that went wrong ends alone
            print(f"feeder: a session ended: {type(err).__name__}: {err}", file=sys.stderr)
        finally:
            conn.close()


# -- the learner's side: the collector in the learner's process ------------------------------------------------


def _why(err: BaseException, prefix: str = "the run stopped: ") -> str:
    try:
        return f"{prefix}{type(err).__name__}: {str(err)[:200]}"
    except BaseException:  # noqa: BLE001 - an exception whose str() fails
        return f"{prefix}{type(err).__name__}"


def _answer(channel: Channel, lab: str, answer: object) -> None:
    """Make the policy, then answer the engine's questions until the feeder says the trace is done."""
    try:
        with time_limit(TRACE_LIMIT_S):
            policy = lab_spec(lab).policy(answer)
            channel.send({"ready": True})
            while "done" not in (message := channel.receive()):
                method = str(message.get("call"))
                try:
                    choice = getattr(policy, method)(*decode(message.get("args", [])))
                except Exception as err:  # noqa: BLE001 - the learner's code: its error is the verdict
                    channel.send({"error": _why(err, f"{method} raised ")})
                    continue
                channel.send({"choice": plain_choice(choice)})
    except LabViolation as err:
        _stop(channel, str(err))
    except (TimeoutError, Stopped) as err:  # its limit, in the policy's own code or while the engine worked
        _stop(channel, f"the trace ran for more than {TRACE_LIMIT_S:g} s" if _late(err) else str(err))


def _stop(channel: Channel, why: str) -> None:
    """Tell the feeder the run stopped, and wait until it has written so (it says done)."""
    with contextlib.suppress(Stopped, OSError):
        channel.send({"stop": why})
        channel.deadline = min(channel.deadline, time.monotonic() + GRACE_S)
        channel.receive()


def _late(err: BaseException) -> bool:
    return isinstance(err, TimeoutError) or "ran for more than" in str(err)


def feed_all(address: str, question: str, lab: str, answer: object, count: int) -> None:
    """Serve the ``count`` traces of ``question`` on the learner's ``answer``, one by one; where the class stops the
    run (SystemExit, the cell's time limit), the traces left are reported stopped for the same reason."""
    why = ""
    for index in range(count):
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
                conn.connect(address)  # the runner started the kernel once the feeder listened
                channel = Channel(conn, time.monotonic() + TRACE_LIMIT_S + 2 * GRACE_S)
                channel.send({"q": question, "trace": index})
                if "start" not in channel.receive():
                    continue
                if why:
                    _stop(channel, why)
                    continue
                try:
                    _answer(channel, lab, answer)
                except OSError:
                    raise
                except BaseException as err:  # noqa: BLE001 - SystemExit from the class, KeyboardInterrupt
                    why = _why(err)
                    _stop(channel, why)
        except (Stopped, OSError):  # the feeder is gone: nothing more can be served
            return


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
