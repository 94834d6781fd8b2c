"""Drawing for lessons: one call per figure, so a cell shows the idea, not matplotlib.

Every figure follows the course's rules (docs/lessons.md): a title that states the finding,
labelled axes with units, at most two panels, log axes where a quantity doubles. A lesson imports
``from kvcourse import plots`` and never matplotlib; each kind of figure is a module here, one concept
each, re-exported below.
"""

from kvcourse.plots.blocks import allocators_side_by_side, block_size_trade, blocks_on_demand
from kvcourse.plots.charts import bars, chain, decorate, lines, mark, panels
from kvcourse.plots.heatmap import token_grid
from kvcourse.plots.histogram import log_histogram
from kvcourse.plots.sweeps import plain_ticks, sweep_lines

__all__ = [
    "allocators_side_by_side",
    "bars",
    "block_size_trade",
    "blocks_on_demand",
    "chain",
    "decorate",
    "lines",
    "log_histogram",
    "mark",
    "panels",
    "plain_ticks",
    "sweep_lines",
    "token_grid",
]
