"""The serving loop (lessons 02, 05, 08, 12-14): sequences, scheduler, model runner, LLMEngine, sampling, beam search, generate."""
