"""Runs one submission's grading notebook inside the sandbox (see sandbox.py); nbformat and nbclient only.

    python sandbox_runner.py IN.ipynb OUT.ipynb --timeout 30 --output-cap 1000000 --prelude 2

Every code cell runs with a time limit: on time-out the kernel is interrupted, and if it does not
answer within a few seconds (a loop that swallows KeyboardInterrupt) it is killed and started
again. A kernel that dies (os._exit) is started again too. After a restart the first ``--prelude``
cells (the set-up and the collector) run again, then the next cell. Each cell keeps at most
``--output-cap`` bytes of output, then one line saying how much was cut. OUT is rewritten after
every cell, so a sandbox killed from outside still leaves the outputs so far.

``--feeder SOCKET,TRACES_FD,LOG_FD`` (labs B and C) starts the feeder (kvcourse.labs.feeder) before the first
kernel, hands it the two descriptors the grader passed in (the traces to read, the log to write), closes its own
copies and waits until the feeder listens: no kernel, and so no student code, ever holds either.

``--caps`` (JSON: the caps in words, and the cgroup counters bound in read-only) lets it say which
cap a cell reached: a cgroup counter that went up during the cell (the memory cap killed a
process, a fork or a thread was refused), or the error the cell ended with (MemoryError under
RLIMIT_DATA, "No space left on device" in its scratch space, "File too large"). The note is an
error output, CapReached, that the grader turns into a line of its log and of the export.
"""

import argparse
import json
import os
import select
import subprocess
import sys
import time

# jsonschema builds an IRI grammar at import when rfc3987_syntax is installed (4 s on a busy machine);
# nbformat never validates IRIs, so the runner goes without it.
sys.modules.setdefault("rfc3987_syntax", None)

import nbformat  # noqa: E402
from nbclient import NotebookClient  # noqa: E402
from nbclient.exceptions import CellTimeoutError, DeadKernelError  # noqa: E402
from nbclient.util import run_sync  # noqa: E402

TIMEOUT_NOTE = "Stopped: this cell ran for more than {limit:g} s (the grader's time limit per cell)."
MAX_KERNELS = 20  # restarts are for a cell that kills or hangs its kernel, not a way to run forever
CAP_NOTE = "Stopped: {what} reached (the grader's cap per submission){after}."
CAP_ERRORS = (
    ("memory", ("MemoryError",), ""),
    ("disk", ("OSError",), "[Errno 28]"),
    ("file", ("OSError",), "[Errno 27]"),
    ("processes", ("BlockingIOError",), "[Errno 11]"),
    ("processes", ("RuntimeError",), "can't start new thread"),
)
CUT_NOTE = "\n[... output cut: this cell printed more than {cap:,} bytes; the rest was dropped by the grader ...]\n"


class CappedClient(NotebookClient):
    """A notebook client that drops a cell's output beyond a byte cap, with one line saying so."""

    output_cap = 1_000_000

    def output(self, outs, msg, display_id, cell_index):
        sizes = self.__dict__.setdefault("_sizes", {})
        size = len(json.dumps(msg.get("content", {}), default=str))
        used = sizes.get(cell_index, 0)
        sizes[cell_index] = used + size
        if used > self.output_cap:
            return None
        if used + size > self.output_cap:
            outs.append(nbformat.v4.new_output("stream", name="stdout", text=CUT_NOTE.format(cap=self.output_cap)))
            return None
        return super().output(outs, msg, display_id, cell_index)


def _client(nb, timeout, cap, cwd):
    client = CappedClient(
        nb,
        timeout=timeout,
        allow_errors=True,
        interrupt_on_timeout=False,
        kernel_name="python3",
        startup_timeout=120,
        record_timing=False,
        shutdown_kernel="immediate",
        resources={"metadata": {"path": cwd}},
    )
    client.output_cap = cap
    return client


def _error(name, text):
    return nbformat.v4.new_output("error", ename=name, evalue=text, traceback=[text])


async def _answers(kc, seconds):
    msg_id = kc.execute("", store_history=False)
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            reply = await kc.get_shell_msg(timeout=0.5)
        except Exception:  # queue.Empty: keep waiting until the deadline
            continue
        if reply["parent_header"].get("msg_id") == msg_id:
            return True
    return False


def _counts(caps):
    """cap -> the current value of its cgroup counter (a file like memory.events: 'oom_kill 2').

    The runner's own reading of what cgroups.Group.count reads outside: it is bound into the
    sandbox alone, where the quizzes package is hidden, so it imports nothing of ours.
    """
    counts = {}
    for cap, (path, key) in caps.get("counters", {}).items():
        counts[cap] = 0
        try:
            with open(path) as f:
                lines = f.read().splitlines()
            if key:
                counts[cap] = next((int(line.split()[1]) for line in lines if line.split()[:1] == [key]), 0)
            else:  # a bare number (memory.failcnt, where the kernel counts no oom_kill)
                counts[cap] = int(lines[0].split()[0])
        except (OSError, ValueError, IndexError):
            pass
    return counts


def _caps_reached(cell, before, after, caps):
    """Which caps this cell reached: its cgroup counters, or the error it ended with."""
    reached = [cap for cap in after if after[cap] > before.get(cap, 0)]
    for out in cell.outputs:
        if out.get("output_type") != "error":
            continue
        name, value = str(out.get("ename", "")), str(out.get("evalue", ""))
        for cap, names, marker in CAP_ERRORS:
            counted = cap == "processes" and "processes" in caps.get("counters", {})  # its counter decides
            if any(n in name for n in names) and marker in value and cap not in reached and not counted:
                reached.append(cap)
    return [cap for cap in ("memory", "processes", "disk", "file") if cap in reached and cap in caps]


def _note_caps(cell, before, caps, died):
    after = _counts(caps)
    for cap in _caps_reached(cell, before, after, caps):
        after_text = "; the kernel was stopped and started again for the next cell" if died else ""
        cell.outputs.append(_error("CapReached", CAP_NOTE.format(what=caps[cap], after=after_text)))
    return after


def _responsive(client, seconds=5.0):
    """Whether the kernel answers a trivial request within `seconds` (after a time-out)."""
    try:
        return run_sync(_answers)(client.kc, seconds)
    except Exception:  # a dead or broken channel: not responsive
        return False


def run(nb, out_path, timeout, cap, prelude, cwd, caps=None):
    """Execute every code cell of nb in turn, restarting the kernel where it dies or will not stop."""
    code = [i for i, cell in enumerate(nb.cells) if cell.cell_type == "code"]
    caps = caps or {}
    counts = _counts(caps)
    start = 0
    for _ in range(MAX_KERNELS):
        if start >= len(code):
            return
        client = _client(nb, timeout, cap, cwd)
        with client.setup_kernel():
            if start:  # a restarted kernel: the set-up and the collector again, quietly
                try:
                    for i in code[:prelude]:
                        client.execute_cell(nbformat.from_dict(nb.cells[i]), i)
                except (DeadKernelError, CellTimeoutError):
                    return  # a kernel that cannot even be set up again (something kills it on start)
            for position in range(start, len(code)):
                index = code[position]
                start = position + 1
                cell = nb.cells[index]
                try:
                    client.execute_cell(cell, index)
                except DeadKernelError:
                    cell.outputs.append(_error("DeadKernel", "the kernel died in this cell; it was started again"))
                    counts = _note_caps(cell, counts, caps, died=True)
                    nbformat.write(nb, out_path)
                    break
                except CellTimeoutError:
                    cell.outputs.append(_error("TimeoutError", TIMEOUT_NOTE.format(limit=timeout)))
                    counts = _note_caps(cell, counts, caps, died=False)
                    nbformat.write(nb, out_path)
                    run_sync(client.km.interrupt_kernel)()
                    if not _responsive(client):
                        break  # the kernel ignores interrupts: a fresh one for the next cell
                    continue
                counts = _note_caps(cell, counts, caps, died=False)
                nbformat.write(nb, out_path)
            else:
                return


FEEDER_START_S = 120.0  # the feeder imports the engine before it listens


def start_feeder(spec):
    """The feeder for labs B and C (see the module docstring), or None where it would not start."""
    address, traces_fd, log_fd = spec.rsplit(",", 2)
    fds = (int(traces_fd), int(log_fd))
    ready_r, ready_w = os.pipe()
    try:
        process = subprocess.Popen(
            [sys.executable, "-m", "kvcourse.labs.feeder", address, *map(str, fds), str(ready_w)],
            pass_fds=(*fds, ready_w),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
        )
    except OSError as err:
        print(f"the feeder did not start: {err}", file=sys.stderr)
        process = None
    for fd in (*fds, ready_w):
        os.close(fd)  # the kernels this runner starts must not inherit them
    if process is not None and not (select.select([ready_r], [], [], FEEDER_START_S)[0] and os.read(ready_r, 1)):
        print("the feeder did not start listening", file=sys.stderr)
    os.close(ready_r)
    return process


def main(argv=None):
    parser = argparse.ArgumentParser()
    parser.add_argument("notebook")
    parser.add_argument("out")
    parser.add_argument("--timeout", type=float, default=30.0)
    parser.add_argument("--output-cap", type=int, default=1_000_000)
    parser.add_argument("--prelude", type=int, default=2)
    parser.add_argument("--caps", type=json.loads, default={})
    parser.add_argument("--feeder", default="")
    args = parser.parse_args(argv)
    feeder = start_feeder(args.feeder) if args.feeder else None
    try:
        nb = nbformat.read(args.notebook, as_version=4)
        run(nb, args.out, args.timeout, args.output_cap, args.prelude, cwd=".", caps=args.caps)
    finally:
        if feeder is not None:
            feeder.kill()
            feeder.wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
