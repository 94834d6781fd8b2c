"""What lessons measure on the engine at work (lessons 06, 08, 10, 11, 13-16, labs), above every layer it reads.

Where a measurement helper lives: where a contributor looking for it opens first. One that measures the
engine at work stays here: it serves requests on an LLMEngine or reads one back (its requests, block
tables, event log), times the engine's steps or kernels, or compares the answers of two runs; it reads
several layers and some of it imports the engine, so it sits above them all. One that computes a single
feature's numbers without running the engine lives in that feature's folder and layer: the keys' and
values' drift on recompute with the model (model/recompute.py), attention weights with attention
(attention/sinks.py), the real configs' memory and context windows with the config table
(model/memory_table.py, model/context_windows.py).

Served and read back: ``serving`` a request trace fed to LLMEngine one step at a time (lesson 14);
``stream`` paging against reservation on a stream of requests, in rounds, as tidy tables (lesson 14);
``chunked_prefill`` a long prompt among chatting users at several token budgets, their gaps and goodput
(lesson 21 and benchmarks/bench_chunked_prefill.py);
``batching`` static batching (a group at a time) against the engine's continuous batching (lesson 14);
``conversation`` a chat served turn by turn, the cache kept or started afresh (lesson 06);
``event_log`` each request's path and the pool over time (lessons 08, 15); ``wall_tables`` the
scheduler's decisions and the requests' paths as tables (lesson 08); ``prefix_evictions`` whose cached
prefix each eviction took (lesson 13); ``block_tables`` every sequence's block table after every step
(lesson 11). Timed: ``decode_growth`` one decode step as the context grows (lesson 06);
``batch_sweep`` decode steps across batch sizes beside the roofline (lesson 14); ``prefill`` a
prompt's first read, split by the cost model (lesson 15); ``block_sizes`` the paged decode kernels on
each block size, under the engine's thread policy, beside the sweep's memory (lesson 11); ``spread`` a
few timed ratios and the verdict they allow (lessons 14, 15), and a nearest-rank percentile (labs
18-20). Answers compared: ``answers`` two runs token by token (lesson 10); ``agreement`` what a change
to the model or its cache costs in next-token predictions (lesson 16); ``latent_rank`` what a latent of each
rank costs in perplexity and agreement on a held-out text, beside int8 and MQA (lesson 23); ``texts`` the course's two
public-domain texts, the held-out one to evaluate on and the calibration one to fit on (lessons 23-25). Of the machine
itself: ``roofline`` its peak FLOP/s and memory bandwidth, and the floors they put under a pass (lesson 01,
for lesson 14 too).
Nothing here imports the simulators or the course: simulators and lessons import it.
"""
