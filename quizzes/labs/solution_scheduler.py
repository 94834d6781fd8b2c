from kvcourse.labs import SchedulerBase


class MyScheduler(SchedulerBase):
    """First come, first served: nobody overtakes the head of the queue; the sequence admitted last gives way."""

    def choose_admission(self, waiting, free_blocks):
        if not waiting or waiting[0].preempted_this_step:
            return None
        return 0

    def choose_victim(self, running, needy):
        return running[-1].seq_id  # running is in the order the sequences were admitted
