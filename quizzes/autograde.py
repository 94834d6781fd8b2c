"""Kept so courses made before the grading pipeline moved to quizzes/grading/ keep working.

`kvcourse grade init` wrote `kvcourse.quizzes.autograde.RefuseNbgraderAutograde` into each
course's nbgrader_config.py (and `kvcourse hub` into its course's), and nbgrader imports that path
whenever it loads the file. New courses name kvcourse.quizzes.grading.autograde; never remove
this module while a course of the old layout may be in use.
"""

from .grading.autograde import RefuseNbgraderAutograde

__all__ = ["RefuseNbgraderAutograde"]
