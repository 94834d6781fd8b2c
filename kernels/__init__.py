"""The course's engine: model, attention, caches, allocator, scheduler (lessons 01-17)."""
