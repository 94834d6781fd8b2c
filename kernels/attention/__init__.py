"""Attention and every attention backend (lessons 02-06, 10, 16): reference attention, the backend protocol, the
contiguous backends (backends/), paged attention in torch, its CPU and Triton kernels, the paged backend, sinks."""
