"""``ddpprof record``: launch profiled training through torchrun and write a run manifest.

``config`` (the run configuration), ``launcher`` (validation, torchrun, run.json),
``process`` (the run's processes live and die together), ``folders`` (locks and replacing an
earlier recording), ``failure`` (which rank failed first), ``measurements`` (step records).
"""
