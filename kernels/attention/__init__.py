"""Attention (lessons 03, 04, 10): reference implementations, paged attention in torch, the Triton kernel, the backend protocol."""
