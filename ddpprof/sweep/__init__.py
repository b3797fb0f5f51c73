"""``ddpprof sweep``: the bucket-size valley."""
