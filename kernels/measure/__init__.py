"""What lessons measure on the engine itself (lessons 08, 14-16), kept beside it so any lesson imports it.

``serving`` a request trace fed to LLMEngine one step at a time (lesson 14); ``stream`` paging
against reservation on a stream of requests, in rounds, as tidy tables (lesson 14); ``batch_sweep``
decode steps timed across batch sizes beside the roofline (lesson 14); ``spread`` a few timed
ratios and the verdict they allow (lessons 14, 15), and a nearest-rank percentile (labs 18-20);
``prefill`` a prompt's first read, timed and split by the cost model (lesson 15); ``windows`` one
user's context window on real cards (lesson 15); ``event_log`` each request's path and the pool over time, read from the engine's event log
(lessons 08, 15); ``agreement`` what a change to the model costs in next-token predictions
(lesson 16). Nothing here imports the simulators or the course: simulators and lessons import it.
"""
