"""What lessons measure on the engine itself (lessons 08, 14-16), kept beside it so any lesson imports it.

``serving`` a request trace fed to LLMEngine one step at a time (lesson 14); ``event_log`` each
request's path and the pool over time, read from the engine's event log (lessons 08, 15);
``agreement`` what a change to the model costs in next-token predictions (lesson 16). Nothing here
imports the simulators or the course: simulators and lessons import it.
"""
