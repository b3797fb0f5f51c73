"""``ddpprof bench``: the scaling table."""
