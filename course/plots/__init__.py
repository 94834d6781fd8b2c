"""Drawing for lessons: one call per figure, so a cell shows the idea, not matplotlib.

Every figure follows the course's rules (shared/LESSONS.md): a title that states the finding,
labelled axes with units, at most two panels, log axes where a quantity doubles. A lesson imports
``from kvcourse import plots`` and never matplotlib; each kind of figure is a module here, one concept
each, re-exported below.
"""

from kvcourse.plots.charts import bars, chain, decorate, lines, mark, panels

__all__ = ["bars", "chain", "decorate", "lines", "mark", "panels"]
