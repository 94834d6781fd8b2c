"""Where K/V live (lessons 05, 06, 08, 10-13, 16): block pool, KV-cache manager, KV tensors, byte budgets, events."""
