"""What ``ddpprof diff`` compares: each side's profiles, from traces analyzed now or from an
``analyze --json`` document, and which recordings of the two sides go together.

A side's recordings of one configuration (the same variant, model, world size, batch,
accumulation and bucket size in ``run.json``) are repeats of it. Sides are paired:

1. when each side holds one configuration, the two (what changed may be the configuration);
2. otherwise by configuration, then by variant where a variant is alone on each side, then
   by run name; a recording left without a partner is an error.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Sequence
from pathlib import Path

from ..analysis.document import ANALYZE_SCHEMA, analyzed_runs
from ..analysis.profile import RunProfile
from ..core.errors import UsageError
from ..core.io import open_regular
from ..core.json_input import read_json_bytes
from ..core.storage import Location, location_of
from ..run.config_key import ConfigKey


def is_analysis_document(path: Location) -> bool:
    """A local file whose JSON says it is an ``analyze --json`` document. A file that cannot
    be read (or is not a regular file) is a ``UsageError`` naming it, never a wait."""
    if not isinstance(path, Path) or not path.is_file():
        return False
    fd, _ = open_regular(path)
    try:
        head = os.pread(fd, 4096, 0)
    finally:
        os.close(fd)
    return b'"schema"' in head and ANALYZE_SCHEMA.encode() in head


def profiles_of_document(path: Path) -> list[RunProfile]:
    """The profiles of an ``analyze --json`` document's runs, checked against the document's
    schema (``gate.analyzed_runs``: lengths that agree, parts in range, numbers finite and
    bounded)."""
    try:
        document = json.loads(read_json_bytes(path))
    except (ValueError, RecursionError) as error:
        raise UsageError(f"{path}: not JSON ({error})") from None
    decoded, runs = analyzed_runs(document, str(path))
    profiles = []
    for run in runs:
        if run.profile is None:
            raise UsageError(f"{path}: run {run.run!r} has no profile section (analyze "
                             f"schema version {decoded.version}, from an older ddpprof): run "
                             "`ddpprof analyze --json` again")
        profiles.append(run.profile)
    if not profiles:
        raise UsageError(f"{path}: no run")
    return profiles


def load_side(path: str, analyze: Callable[[list[Location]], list[RunProfile]]
              ) -> list[RunProfile]:
    """One side's profiles: an analyze document read, anything else analyzed by
    ``analyze``."""
    location = location_of(path)
    if is_analysis_document(location):
        return profiles_of_document(Path(location))
    return analyze([location])


def configuration(profile: RunProfile) -> ConfigKey | str:
    """What makes recordings repeats of one another: the configuration of a ddpprof
    recording, the run's name otherwise (a foreign trace repeats nothing)."""
    config = profile.config
    if config is None or config.variant is None:
        return profile.run
    return ConfigKey(config.variant, config.model, config.world_size, config.global_batch,
                     config.grad_accum, config.bucket_cap_mib)


def _groups(profiles: Sequence[RunProfile]) -> dict[ConfigKey | str, list[RunProfile]]:
    groups: dict[ConfigKey | str, list[RunProfile]] = {}
    for profile in profiles:
        groups.setdefault(configuration(profile), []).append(profile)
    return groups


def _variant(group: list[RunProfile]) -> str | None:
    config = group[0].config
    return config.variant if config is not None else None


def pair(before: Sequence[RunProfile], after: Sequence[RunProfile]
         ) -> list[tuple[list[RunProfile], list[RunProfile]]]:
    """The sides' recordings grouped and paired (see the module's docstring)."""
    a, b = _groups(before), _groups(after)
    if len(a) == 1 and len(b) == 1:
        return [(next(iter(a.values())), next(iter(b.values())))]
    pairs = [(a.pop(key), b.pop(key)) for key in list(a) if key in b]
    for name in (_variant, lambda group: group[0].run):
        left: dict[str | None, list[ConfigKey | str]] = {}
        for key, group in a.items():
            left.setdefault(name(group), []).append(key)
        right: dict[str | None, list[ConfigKey | str]] = {}
        for key, group in b.items():
            right.setdefault(name(group), []).append(key)
        for value, keys in left.items():
            if value is not None and len(keys) == 1 and len(right.get(value, [])) == 1:
                pairs.append((a.pop(keys[0]), b.pop(right[value][0])))
    if a or b:
        alone = next(iter(a.values() or b.values()))
        side = "first" if a else "second"
        raise UsageError(f"run {alone[0].run!r} of the {side} side has no partner on the "
                         "other side (runs pair by configuration, then variant, then name)")
    return pairs
