"""Run every benchmark in turn (`make bench`); each writes benchmarks/results/NAME.json."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


def main() -> int:
    names = sorted(p.stem for p in Path(__file__).parent.glob("bench_*.py"))
    failed = []
    for name in names:
        print(f"== {name}", flush=True)
        if subprocess.run([sys.executable, "-m", f"benchmarks.{name}"]).returncode != 0:
            failed.append(name)
    if failed:
        print(f"failed: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
