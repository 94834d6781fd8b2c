"""Puts itself under one submission's caps, then becomes the sandbox: the standard library only.

    python -I -S enter_caps.py '{"join": [...], "rlimits": {...}, "cores": [0]}' -- bwrap ...

It joins the submission's cgroups (writes its own pid to each cgroup.procs), sets the resource
limits, pins itself to the given cores, and execs the command: everything the command starts
inherits all three, before any student code runs. The grader starts it with subprocess instead
of a preexec_fn because several submissions are graded from threads at once (--jobs), where a
preexec_fn is not safe.
"""

import json
import os
import resource
import sys


def main(argv):
    spec, command = json.loads(argv[1]), argv[3:]
    for procs in spec.get("join", []):
        with open(procs, "w") as f:
            f.write(str(os.getpid()))
    for name, value in spec.get("rlimits", {}).items():
        resource.setrlimit(getattr(resource, name), (value, value))
    if spec.get("cores") and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, spec["cores"])
    os.execvp(command[0], command)


if __name__ == "__main__":
    main(sys.argv)
