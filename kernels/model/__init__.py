"""The decoder itself (lessons 01, 04, 07, 15, 16): config, the table of real configs and what they cost in memory,
layers, the transformer, HF conversion, and how far its keys and values drift when recomputed."""
