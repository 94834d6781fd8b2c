"""Speed and memory measurements against peers; each module runs with `python -m benchmarks.NAME`."""
