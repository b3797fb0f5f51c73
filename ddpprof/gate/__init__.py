"""``ddpprof gate``: rules over analyze documents, and run-to-run noise."""
