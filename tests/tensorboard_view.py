"""Load a recorded run with TensorBoard's PyTorch profiler plugin, as TensorBoard does, and
print what it sees as JSON. Run as a script: the plugin starts worker processes by spawning,
which re-imports the main module."""

from __future__ import annotations

import json
import logging
import sys


def main(run_dir: str) -> None:
    logging.disable(logging.WARNING)
    from torch_tb_profiler import io
    from torch_tb_profiler.profiler.loader import RunLoader
    from torch_tb_profiler.run import DistributedRunProfile

    run = RunLoader("run", run_dir, io.Cache()).load()
    seen: dict = {"workers": {}, "distributed": None}
    for profile in run.get_profiles():
        if isinstance(profile, DistributedRunProfile):
            seen["distributed"] = {
                "workers": sorted(profile.steps_to_overlap["data"]["all"]),
                "comm_ops": sorted(profile.comm_ops["data"]) if profile.comm_ops else []}
        else:
            seen["workers"][profile.worker] = {
                "views": [view.display_name for view in profile.views],
                "steps": [row[0] for row in profile.overview["steps"]["rows"]],
                "has_communication": profile.has_communication}
    print(json.dumps(seen))


if __name__ == "__main__":
    main(sys.argv[1])
