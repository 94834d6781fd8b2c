"""The instructor's grading pipeline: an nbgrader course from the bank, graded safely (quizzes/INSTRUCTORS.md).

nbgrader_export.py writes the course (`kvcourse grade init`, with student_helpers.py in each
notebook's set-up cell, and the instructor's settings that course.py reads back); autograde.py grades a
submission: recovery.py finds its answers, notebook.py builds the grading notebook (with collector.py),
sandbox.py runs it with sandbox_runner.py under the caps of caps.py (enforced by confine.py: cgroups.py
where the machine allows, else resource limits, entered by enter_caps.py), decide.py gives the points and
gradebook.py records and exports them; report.py reads the class's answers back to say what it got
wrong (`kvcourse grade report`, drawn by report_page.py). The labs (lessons 18-20) are graded the
same way: the sandbox records each run of the learner's policy, decide.py replays it (kvcourse.labs).
cli.py registers `kvcourse grade`. What a learner uses (bank, widget, progress) stays in quizzes/.
"""
