"""The decoder itself (lessons 01, 04, 07): config, the table of real configs, layers, the transformer, HF conversion."""
