from kvcourse.labs import TTFT_TARGET_STEPS, SchedulerBase


class MyScheduler(SchedulerBase):
    """Shortest job first among the requests that can still meet their first-token target; the rest after them.
    The running sequence with the most tokens still to write gives way: it would hold its blocks longest."""

    def choose_admission(self, waiting, free_blocks):
        candidates = [i for i, seq in enumerate(waiting) if not seq.preempted_this_step]
        if not candidates:
            return None

        def order(i):
            seq = waiting[i]
            started = seq.num_tokens > seq.num_prompt_tokens  # preempted after its first token: TTFT is behind it
            missed = not started and seq.now - seq.arrival >= TTFT_TARGET_STEPS  # too late for its first token
            return (missed, seq.num_prompt_tokens + seq.max_new_tokens, seq.arrival)

        return min(candidates, key=order)

    def choose_victim(self, running, needy):
        def left(seq):
            return seq.num_prompt_tokens + seq.max_new_tokens - seq.num_tokens

        return max(running, key=lambda seq: (left(seq), seq.arrival)).seq_id
