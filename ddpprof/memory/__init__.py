"""``ddpprof memory``: bytes per rank under DDP and ZeRO."""
