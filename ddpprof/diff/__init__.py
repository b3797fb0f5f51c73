"""``ddpprof diff``: why two runs' steps differ. ``profile`` (a run's steps as parts, and the
analyze JSON's ``profile`` section), ``compare`` (the changes, what moved, the configuration),
``noise`` (the run-to-run model), ``inputs`` (the sides and their pairing), ``explain`` (the
gate's contributors). See ``docs/diff.md``."""
