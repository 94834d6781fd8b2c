"""kvcourse.plots.token_grid: the token-by-token heatmap lessons 03 and 04 draw."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

from kvcourse import plots  # noqa: E402


def test_token_grid_labels_both_axes_and_blanks_the_future_when_asked():
    tokens = ["The", " cat", " sat"]
    grid = np.arange(9.0).reshape(3, 3)
    ax = plots.token_grid(grid, tokens, title="t", colorbar="score", hide_future=True)
    shown = ax.images[0].get_array()
    assert np.ma.is_masked(shown[0, 1]) or np.isnan(shown[0, 1])  # above the diagonal: blank
    assert shown[2, 0] == grid[2, 0] and shown[1, 1] == grid[1, 1]
    assert [t.get_text() for t in ax.get_xticklabels()] == tokens
    assert [t.get_text() for t in ax.get_yticklabels()] == tokens
    assert ax.get_title() == "t"
    plt.close(ax.figure)


def test_token_grid_refuses_a_grid_that_does_not_match_the_tokens():
    with pytest.raises(ValueError, match="tokens"):
        plots.token_grid(np.zeros((2, 3)), ["a", "b"], title="t", colorbar="c")
