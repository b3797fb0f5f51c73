"""``ddpprof record``: launch profiled training through torchrun and write a run manifest."""

from .launcher import RecordOptions, RunOutcome, record

__all__ = ["RecordOptions", "RunOutcome", "record"]
