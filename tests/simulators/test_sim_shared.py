"""The layer every simulator shares (issue 28): one card table, one label style, presets that turn
custom when a figure is typed, enums instead of string sentinels, and the engine-side measurements
kept in kvcourse.kernels.measure."""

from __future__ import annotations

import pytest

from kvcourse.kernels import MODEL_CONFIGS
from kvcourse.simulators.cache_growth import CacheGrowthView
from kvcourse.simulators.context_window import ContextWindowView
from kvcourse.simulators.controls import CUSTOM, Preset
from kvcourse.simulators.hardware import CARDS, GPU_PRESETS, HARDWARE, SXM_BOARDS
from kvcourse.simulators.kv_size import KVSizeView
from kvcourse.simulators.labels import BYTES_PER_VALUE_LABELS, ModelFact, model_label, plain_number, plural
from kvcourse.simulators.memory_wall import Admission, MemoryWall, MemoryWallConfig, MemoryWallView
from kvcourse.simulators.shrink import KVHeads, ShrinkConfig, ShrinkView
from kvcourse.simulators.throughput import ThroughputView


# -- one card table ------------------------------------------------------------------------------
def test_every_card_is_listed_once_and_lesson_14s_boards_are_those_cards():
    assert {name: card.memory_gib for name, card in CARDS.items()} == GPU_PRESETS
    assert set(HARDWARE) == {"A100 80GB SXM", "H100 SXM", "H200 SXM"}
    for board, name in SXM_BOARDS.items():
        assert HARDWARE[board] is CARDS[name] and CARDS[name].bandwidth_gbs and CARDS[name].tflops


# -- presets: a typed figure turns the dropdown to custom, in every view that has one --------------
@pytest.mark.parametrize("view_class", [MemoryWallView, ContextWindowView])
def test_regression_a_typed_card_size_turns_the_gpu_preset_to_custom(view_class):
    """Lesson 08's view kept naming an A100 80GB while the box showed 60 GB (lesson 15's did not)."""
    view = view_class("A100 80GB")
    view.controls["card_gib"].value = 80.0  # the preset's own size: still that card
    assert view.values["gpu"] == "A100 80GB"
    view.controls["card_gib"].value = 60.0
    assert view.values["gpu"] == CUSTOM and view.model.config.card_gib == 60.0 and view.error is None
    view.controls["gpu"].value = "H200"  # a card again fills in its memory
    assert view.values["card_gib"] == 141.0 and view.model.config.card_gib == 141.0
    view.reset_button.click()
    assert (view.values["gpu"], view.values["card_gib"]) == ("A100 80GB", 80.0)


def test_each_change_rebuilds_once_when_a_preset_fills_other_controls():
    view = MemoryWallView("A100 80GB")
    renders = view.num_renders
    view.controls["gpu"].value = "H200"  # fills card_gib too: one rebuild, not two
    assert view.num_renders == renders + 1


def test_preset_start_names_custom_for_given_figures_and_refuses_unknown_names():
    preset = Preset("gpu", {"small": {"card_gib": 16.0}, "big": {"card_gib": 80.0}})
    assert preset.start(None, {"card_gib": None}, "big", "GPU") == ("big", {"card_gib": 80.0})
    assert preset.start(None, {"card_gib": 24.0}, "big", "GPU") == (CUSTOM, {"card_gib": 24.0})
    assert preset.start("small", {"card_gib": None}, "big", "GPU") == ("small", {"card_gib": 16.0})
    with pytest.raises(ValueError, match="unknown GPU 'huge'"):
        preset.start("huge", {"card_gib": None}, "big", "GPU")


# -- one label style ------------------------------------------------------------------------------
def test_every_bytes_per_value_control_uses_the_one_label_style():
    views = [MemoryWallView(), ContextWindowView(), ThroughputView(), ShrinkView(), CacheGrowthView(), KVSizeView()]
    for view in views:
        options = view.controls["bytes_per_value"].options
        assert options and all(label == BYTES_PER_VALUE_LABELS[value] for label, value in options), type(view)


def test_model_labels_name_the_fact_each_lesson_turns_on():
    assert model_label("llama-2-13b", ModelFact.PARAMETERS) == "llama-2-13b (13B parameters)"
    assert model_label("smollm2-135m", ModelFact.KV_HEADS) == "smollm2-135m (9 query, 3 KV heads)"
    assert model_label("smollm2-135m", ModelFact.ATTENTION) == "smollm2-135m (GQA 9:3)"
    assert model_label("llama-2-7b", ModelFact.ATTENTION) == "llama-2-7b (MHA)"
    context = MODEL_CONFIGS["llama-3-8b"].max_position_embeddings
    assert model_label("llama-3-8b", ModelFact.CONTEXT) == f"llama-3-8b (reads {context:,} tokens)"


def test_log_ticks_are_plain_numbers_and_counts_take_their_plural():
    assert [plain_number(v) for v in (0, 0.5, 1, 200, 1024, 1e6, -300)] == [
        "0",
        "0.5",
        "1",
        "200",
        "1,024",
        "1,000,000",
        "-300",
    ]
    assert (plural(1, "block"), plural(2, "block"), plural(1024, "user")) == ("1 block", "2 blocks", "1,024 users")


# -- enums, not string sentinels ------------------------------------------------------------------
def test_admission_and_kv_heads_are_enums():
    full = MemoryWall(MemoryWallConfig(80.0, "llama-2-13b", num_users=17))  # 17 fit in 80 GiB
    assert full.next_action is Admission.QUEUE and MemoryWall(MemoryWallConfig(80.0)).next_action is Admission.ADMIT
    assert ShrinkConfig(kv_heads="mqa").kv_heads is KVHeads.MQA  # a typed name becomes the member
    assert str(KVHeads.MHA) == "mha" and f"{Admission.REFUSE}" == "refuse"  # the words a learner reads


def test_model_labels_keep_three_figures():
    """70.6B, not 71B: a label does not round a model's size to two figures."""
    assert model_label("llama-3-70b", ModelFact.PARAMETERS) == "llama-3-70b (70.6B parameters)"
    assert model_label("smollm2-135m", ModelFact.PARAMETERS) == "smollm2-135m (0.135B parameters)"
