"""Solution snippets run under the harness, out of sight; the everyday charts label what they draw."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402

from kvcourse import plots  # noqa: E402
from kvcourse.kernel_env import STRICT_ENV  # noqa: E402
from kvcourse.notebook import SolutionFailed, solution  # noqa: E402


@pytest.fixture
def strict(monkeypatch):
    monkeypatch.setenv(STRICT_ENV, "1")


def test_a_solution_that_raises_fails_the_harness_naming_its_code(strict) -> None:
    with pytest.raises(SolutionFailed, match=r"ZeroDivisionError.*\n1 / 0"):
        solution("Divide.", code="1 / 0")


def test_a_solution_runs_silently_and_leaves_no_figure(strict, capsys) -> None:
    before = plt.get_fignums()
    solution("Print and draw.", code="print('the answer is 42')\nimport matplotlib.pyplot as plt\nplt.figure()")
    assert "42" not in capsys.readouterr().out  # the site is built from executed notebooks: no answer shows
    assert plt.get_fignums() == before


def test_outside_the_harness_a_solution_is_only_shown(monkeypatch) -> None:
    monkeypatch.delenv(STRICT_ENV, raising=False)
    box = solution("Not run.", code="1 / 0")
    assert "1 / 0" in box.children[0].value


def test_bars_write_their_values_and_leave_room_for_them() -> None:
    ax = plots.bars(["a", "b", "c"], [1.0, 10.0, 100.0], logy=True, value_format="{:.1f} GB", title="t", ylabel="GB")
    assert [t.get_text() for t in ax.texts] == ["1.0 GB", "10.0 GB", "100.0 GB"]
    assert ax.get_ylim()[1] > 100.0
    plt.close("all")


def test_bars_label_every_nth_bar_and_the_x_axis() -> None:
    ax = plots.bars([str(i) for i in range(1, 13)], [1.0] * 12, tick_every=4, xlabel="step", title="t", ylabel="n")
    assert [t.get_text() for t in ax.get_xticklabels()] == ["1", "5", "9"] and ax.get_xlabel() == "step"
    plt.close("all")
