"""A pytest plugin (``-p sanitized_scan``, used by ``scripts/sanitize-scan.sh``): the native
scan is the build named by ``DDPPROF_SANITIZED_SCAN`` (with AddressSanitizer and
UndefinedBehaviorSanitizer), put in place of the installed one before anything imports it."""

from __future__ import annotations

import importlib.util
import os
import sys

_path = os.environ["DDPPROF_SANITIZED_SCAN"]
_spec = importlib.util.spec_from_file_location("ddpprof.trace._scan", _path)
assert _spec is not None and _spec.loader is not None
_module = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_module)
sys.modules["ddpprof.trace._scan"] = _module

from ddpprof.trace import scanned  # noqa: E402  (after the build is in place)

assert scanned._scan is _module.scan, "the installed scan was imported before the plugin"
with open("/proc/self/maps") as _maps:     # the sanitizers' runtime is really in place
    assert "libasan" in _maps.read(), "run with LD_PRELOAD of libasan (sanitize-scan.sh)"
