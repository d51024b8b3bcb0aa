"""Unity builds: many per-variant sources compiled as one translation unit.

Every emitted variant keeps its definitions in a namespace of its own, so sources of one kind
concatenate.  The compiler's per-source cost outside the kernels (parsing the headers, and for
nvcc host preprocessing, cudafe and the host compile: about 0.8 s a source) is then paid once
per unit.  A unit only #includes its members by absolute path; the caller hashes the members'
text for its object cache."""
from __future__ import annotations

import hashlib
import os
import threading
from pathlib import Path
from typing import Callable, Optional


def unity_units(sources: list[Path], group: Callable[[Path], Optional[str]], unit_dir: Path, per_unit: int,
                suffix: str, named_by_members: bool = False) -> dict[Path, tuple[Path, ...]]:
    """Map each translation unit to the sources it holds.  `group` names the unit family of a
    source (sources of one family share flags and target), or None for one that stays alone (it
    maps to an empty tuple).  At most `per_unit` sources per unit, in the order given.
    named_by_members: a unit's name ends in a hash of its members' names rather than its number in
    the family, so that builds of different sets of sources into one folder (the pieces of a sweep,
    compiled at once by the workers of `gemmgen tune --gpus`) never write the same unit or object."""
    families: dict[str, list[Path]] = {}
    units: dict[Path, tuple[Path, ...]] = {}
    for source in sources:
        label = group(source)
        if label is None:
            units[source] = ()
        else:
            families.setdefault(label, []).append(source)
    unit_dir.mkdir(parents=True, exist_ok=True)
    for label, members in sorted(families.items()):
        for i in range(0, len(members), per_unit):
            chunk = tuple(members[i:i + per_unit])
            text = "".join(f'#include "{m}"\n' for m in chunk)
            tag = (hashlib.sha1("\n".join(m.name for m in chunk).encode()).hexdigest()[:16] if named_by_members
                   else str(i // per_unit))
            unit = unit_dir / f"{label}_{tag}{suffix}"
            if not unit.exists() or unit.read_text() != text:   # unchanged units keep their mtime
                # through a name of this process and thread, renamed into place: a compiler reading
                # the unit (another worker's) sees the old text or the new, never a part
                partial = unit.with_name(f".{unit.name}.{os.getpid()}.{threading.get_ident()}")
                partial.write_text(text)
                partial.replace(unit)
            units[unit] = chunk
    return units


def largest_first(units: dict[Path, tuple[Path, ...]]) -> list[Path]:
    """The translation units by the bytes they compile, largest first: submitted in this order to
    a pool, the last ones to finish are short."""
    return sorted(units, key=lambda u: -sum(m.stat().st_size for m in (units[u] or (u,))))
