"""Where paged K/V live (lessons 08, 10-13, labs A-B): block pool, cache manager, KV pool, budgets, events, eviction."""
