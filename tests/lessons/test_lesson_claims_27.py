"""Lesson 27's claims that do not need the real model, checked on a tiny model and on planted tables.

The lesson times restoring n tokens from the engine's disk tier against recomputing them on SmolLM2
(kernels/measure/tier.py); its expects on the real model run with the notebook (tests/lessons/test_notebooks.py).
Here: the sweep's sizes; the table's rows on a tiny model (every full block restored, the same first token, a
tier file per block of lesson 07's bytes); a prompt served again from the tier writes the tokens recomputing wrote;
the crossover rule on planted tables.
"""

from __future__ import annotations

import pandas as pd
import pytest
from factories import make_tiny_model

from kvcourse.kernel_env import HEADLESS_ENV
from kvcourse.kernels import costs
from kvcourse.kernels.measure import tier
from kvcourse.tier_sweep import tier_sweep_size

pytestmark = pytest.mark.usefixtures("one_cpu_thread")
TEXT = [(7 * i) % 90 + 3 for i in range(200)]


@pytest.fixture(scope="module")
def model():
    return make_tiny_model(max_position_embeddings=256)


@pytest.mark.parametrize("headless", [True, False])
def test_the_sweep_is_three_lengths_headless_and_up_to_2048_for_people(headless, monkeypatch):
    if headless:
        monkeypatch.setenv(HEADLESS_ENV, "1")
    else:
        monkeypatch.delenv(HEADLESS_ENV, raising=False)
        monkeypatch.delenv("NBGRADER_EXECUTION", raising=False)
    sweep = tier_sweep_size()
    assert all(n % tier.BLOCK_SIZE == 0 for n in sweep.lengths)
    assert sweep.lengths == (16, 64, 256) if headless else sweep.lengths[-1] == 2048
    assert 2048 + sweep.repeats < 2938  # the held-out text holds every prompt of the longest length


def test_the_table_restores_every_block_and_writes_the_same_first_token(model, tmp_path):
    table = tier.restore_vs_recompute(model, TEXT, (16, 48), 2, tmp_path)
    assert list(table.index) == [16, 48]
    assert (table["tokens restored"] == table.index).all() and table["same first token"].all()
    assert (table[[tier.RECOMPUTE, tier.DEVICE, tier.PAGE_CACHE]] > 0).all().all()
    assert list(tmp_path.iterdir()) == [] or all(not any(d.iterdir()) for d in tmp_path.iterdir())  # files removed


def test_a_block_file_is_16_tokens_of_lesson_07s_bytes(model, tmp_path):
    engine = tier.tier_engine(model, 32, tmp_path)
    per_token = costs.kv_bytes_per_token(model.config, model.dtype.itemsize)
    assert tier.the_tier(engine).block_bytes == tier.BLOCK_SIZE * per_token
    tier.the_tier(engine).close()


def test_served_again_from_the_tier_writes_the_tokens_recomputing_wrote(model, tmp_path):
    again = tier.served_again(model, TEXT[:65], new_tokens=8, directory=tmp_path)
    assert again.restored == again.cold and len(again.cold) == 8
    assert again.tokens_restored == 64 and again.tier_restores == 4


def _planted(recompute: list[float], device: list[float]) -> pd.DataFrame:
    return pd.DataFrame({tier.RECOMPUTE: recompute, tier.DEVICE: device}, index=pd.Index([16, 64, 256], name="tokens"))


def test_the_crossover_rule():
    assert tier.crossover(_planted([1.0, 2.0, 3.0], [0.1, 0.2, 0.3])) == 16  # restoring won everywhere
    assert tier.crossover(_planted([0.1, 2.0, 3.0], [0.5, 0.2, 0.3])) == 64
    assert tier.crossover(_planted([1.0, 0.1, 3.0], [0.5, 0.2, 0.3])) == 256  # it must stay faster
    assert tier.crossover(_planted([1.0, 2.0, 0.1], [0.5, 0.2, 0.3])) is None


def test_lengths_not_in_whole_blocks_are_refused(model, tmp_path):
    with pytest.raises(ValueError, match="whole blocks"):
        tier.measure(model, TEXT, 20, 1, tmp_path)
