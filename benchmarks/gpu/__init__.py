"""The GPU checks of issue 29 (lessons 10 and 14), one file per check; `python -m benchmarks.gpu_check` runs them."""
