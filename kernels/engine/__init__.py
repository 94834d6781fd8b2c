"""The serving loop (lessons 02, 05, 08, 12-14): sequences, scheduler, runner, LLMEngine, sampling, beams, generate."""
