"""Where paged K/V live (lessons 08, 10-13, labs A-B): block pool, KV-cache manager, KV pool, byte budgets, events, eviction."""
