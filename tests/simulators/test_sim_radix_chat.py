"""Lesson 26's simulator: its counts are the engine's. The model-free serving it draws (count_chat: the engine's
scheduler and KV-cache manager with the answers given) finds, turn by turn, the prompt tokens LLMEngine finds when
it serves the same chat on a tiny model (its answers replayed), with room for everything and under pressure; with
room for everything the counts are the hand counts (radix: the previous turn's prompt and answer less its last
token; hash: that rounded down to whole blocks); and the view steps, refuses bad input and draws."""

from __future__ import annotations

import pytest
from factories import make_tiny_model

from kvcourse.kernels.measure.chat_prefix import count_chat, replayed, serve_one
from kvcourse.kernels.memory.radix_chat import chat_trace
from kvcourse.simulators.checks import InvalidInput
from kvcourse.simulators.radix_chat import RadixChat, RadixChatConfig, RadixChatView

pytestmark = pytest.mark.usefixtures("one_cpu_thread")


@pytest.mark.parametrize("num_blocks", [256, 16, 12])
@pytest.mark.parametrize("cache", ["hash_prompt_only", "hash", "radix", "radix_lpm"])
def test_model_free_counts_equal_the_engine_turn_by_turn(cache, num_blocks):
    trace = chat_trace(3, turns=(2, 3), system_len=10, user_len=(3, 7), vocab=(3, 96), seed=4)
    turns = serve_one(make_tiny_model("auto"), trace, cache, num_blocks, 4, answer_len=5)
    counts = count_chat(trace, cache, num_blocks, 4, replayed(turns))
    assert (counts.evictions > 0) == (num_blocks < 256)  # the small pools press
    engine = sorted((t.turn, t.conversation, t.num_cached_tokens) for t in turns)
    assert sorted((t.turn, t.conversation, t.found) for t in counts.turns) == engine


def test_with_room_for_everything_the_counts_are_the_hand_counts():
    m = RadixChat(RadixChatConfig(conversations=3, turns=4, block_size=4, pool_blocks=256, answer_len=6))
    assert m.hash.evictions == m.radix.evictions == 0
    by_key = {(t.conversation, t.turn): t for t in m.radix.turns}
    for t_hash, t_radix in zip(m.hash.turns, m.radix.turns, strict=True):
        if t_radix.turn == 0:
            continue
        computed = by_key[(t_radix.conversation, t_radix.turn - 1)].prompt_len + 6 - 1  # the last answer token unfed
        assert t_radix.found == computed
        assert t_hash.found == computed // 4 * 4


def test_a_pressed_pool_evicts_leaves_and_the_view_steps_to_the_end():
    view = RadixChatView(conversations=3, turns=3, pool_blocks=20)
    assert view.error is None and view.model.radix.evictions > 0
    view.step()
    view.step()
    assert view.model.rounds_shown == 3 and view.model.evicted() > 0
    view.step()  # the run has ended: information, not an error
    assert "Reset" in view.message.value and view.error is None
    assert len(view.model.found(view.model.radix)) == 9


def test_bad_input_is_refused_with_the_reason():
    with pytest.raises(InvalidInput, match="pool"):
        RadixChatConfig(pool_blocks=3)
    with pytest.raises(InvalidInput, match="block size"):
        RadixChatConfig(block_size=5)
    view = RadixChatView()
    view.controls["turns"].value = 9
    assert view.error is not None and "turns" in view.error
