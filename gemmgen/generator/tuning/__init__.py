"""Tuning tables as data: one JSON file per GPU architecture (sm_90.json, ...) and per CPU ISA
(cpu_avx2.json, ...).

Each family's section is a list of rows, one per shape and precision, holding the chosen
parameters, the time that made them the choice and the device it was measured on.  The
generator reads these; `gemmgen tune` writes them.

The packaged tables (this folder) serve by default.  A folder of tables made by `gemmgen tune`
(`--results DIR`; `gemmgen generate --tables DIR` reads it) can take their place while
`tables_from(DIR)` is in force: there a GPU's table is named by its device
(`nvidia-h100-80gb-hbm3.json`) and says its architecture (`"arch": "sm_90"`), a CPU's is
`cpu_<isa>.json` as here.  Each section the folder's table has replaces the packaged table's
section of the same architecture; the sections it lacks stay the packaged ones, so a tuning of
one family changes only that family's choices.

Several folders (`--tables A --tables B`, each one device's tuning) may be in force at once: per
architecture the first folder holding a table of it serves as above (its device's rows are the
fallback for every GPU of the architecture), and each later folder's table adds its small rows as
rows for its own device (`for_device`), where they choose another kernel than the fallback's
(device_rows), and its tallskinny rows likewise (the generator keeps an entry for the device where
its choices differ).  A later table's wmma section, and a later folder's CPU tables, are not used:
those dispatches have no device key (stack_notes says so).
"""
from __future__ import annotations

import functools
import json
import re
from contextlib import contextmanager
from pathlib import Path

from ..arch import ARCHS

TABLE_DIR = Path(__file__).resolve().parent

# A small row may be narrower than its shape: `for_device` (a cudaDeviceProp.name: the row serves
# only that GPU, where its measurements found a faster kernel than the architecture's row) and
# `max_megabytes` (it serves launches whose A, B and C take at most that many MB, where a launch of
# a few tens of MB, no more than a few waves of blocks, favours another kernel than one far past L2).
# A shape's row without them serves every other call.
KEYED_ROW_FIELDS = ("for_device", "max_megabytes")


def row_key_label(row: dict) -> str:
    """'NVIDIA H200, launches up to 128 MB' for a keyed row ('' for a plain one)."""
    parts = [row["for_device"]] if "for_device" in row else []
    if "max_megabytes" in row:
        parts.append(f"launches up to {row['max_megabytes']} MB")
    return ", ".join(parts)
GPU_SECTIONS = ("small", "wmma", "tallskinny")

# The folders of tables in force (tables_from; the first is the one tuners write to), and the device
# whose table the tuners write there.
_folders: tuple[Path, ...] = ()
_folder: Path | None = None
_device: str | None = None


class TableError(ValueError):
    """A folder of tables that cannot serve: missing, unreadable, empty, or ambiguous."""


def table_path(arch: str) -> Path:
    """The packaged table of `arch` (or of a CPU ISA, `cpu_<isa>`)."""
    return TABLE_DIR / f"{arch}.json"


def device_table_name(device: str) -> str:
    """The file stem of a device's table: 'NVIDIA H100 80GB HBM3' -> 'nvidia-h100-80gb-hbm3'."""
    return re.sub(r"[^a-z0-9]+", "-", device.lower()).strip("-") or "gpu"


def _as_folders(folders) -> tuple[Path, ...]:
    """A folder, a sequence of folders (the order of `--tables`), or None/'' for none."""
    if not folders:
        return ()
    if isinstance(folders, (str, Path)):
        return (Path(folders),)
    return tuple(Path(f) for f in folders if f)


@contextmanager
def tables_from(folder, device: str | None = None):
    """Read (and write) tables in `folder` while in force; None: the packaged ones alone.  `device`:
    the GPU being tuned, whose table (`<device_table_name>.json`) is the folder's only GPU table
    read and the one written (another device's table of the same architecture stays untouched).
    `folder` may be a sequence of folders (`--tables` given more than once): the first serves, the
    later ones add rows for their devices (module docstring); tuners write to the first."""
    global _folders, _folder, _device
    saved = _folders, _folder, _device
    _folders = _as_folders(folder)
    _folder, _device = (_folders[0] if _folders else None), device
    try:
        yield
    finally:
        _folders, _folder, _device = saved


def _load(path: Path) -> dict:
    """A table's JSON ({} where the file does not exist); read anew each time, as tuners rewrite them."""
    if not path.is_file():
        return {}
    try:
        table = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as err:
        raise TableError(f"{path}: not a readable tuning table ({err})") from None
    if not isinstance(table, dict):
        raise TableError(f"{path}: not a tuning table (a JSON object)")
    return table


def folder_tables(folder: Path, device: str | None = None) -> dict[str, Path]:
    """The tables of a folder made by `gemmgen tune`, by name (sm_XX, cpu_<isa>): each GPU table under
    the architecture it says it is for (with `device`, that device's table alone).  TableError where
    the folder is missing, holds two devices' tables of one architecture, or none at all."""
    if not folder.is_dir():
        raise TableError(f"{folder}: no such folder of tuning tables")
    found: dict[str, Path] = {}
    for path in sorted(folder.glob("*.json")):
        if path.stem.startswith("cpu_"):
            found[path.stem] = path
            continue
        if device is not None and path.stem != device_table_name(device):
            continue
        table = _load(path)
        arch = table.get("arch")
        if arch not in ARCHS or not any(section in table for section in GPU_SECTIONS):
            continue   # tune's state file, or another JSON: not a GPU table
        if arch in found:
            raise TableError(f"{folder} holds tables of two devices for {arch} ({found[arch].name}, {path.name}); "
                             "give a folder with one")
        found[arch] = path
    return found


def usable_tables(folder: Path) -> dict[str, Path]:
    """folder_tables, with a TableError where there is none (for `--tables`)."""
    found = folder_tables(folder)
    for path in found.values():
        _load(path)   # a CPU table unreadable: say so now, not halfway through a manifest
    if not found:
        raise TableError(f"{folder} holds no tuning table (a <device>.json with \"arch\" in it, or cpu_<isa>.json, "
                         "as `gemmgen tune --results` writes)")
    return found


def _stack(name: str) -> list[tuple[Path, Path, dict]]:
    """(folder, file, table) of `name` in each folder in force that has one, in the order of the folders."""
    found = []
    for folder in _folders:
        path = folder_tables(folder, _device).get(name) if folder.is_dir() else None
        if path:
            found.append((folder, path, _load(path)))
    return found


def _shape(row: dict) -> tuple:
    return (row["precision"], row["m"], row["n"], row["k"])


def is_keyed_row(row: dict) -> bool:
    """A small row for one GPU model or for launches up to a size (KEYED_ROW_FIELDS), not the shape's own."""
    return any(f in row for f in KEYED_ROW_FIELDS)


def strided_kernel(row: dict):
    """The kernel a small row (or a timing of the small sweep) runs on strided batches, the only ones rows
    for a device serve: its tuple without the pointer-array ring (array_stages), which pointer arrays take
    from the shape's row."""
    from dataclasses import replace

    from ..small import SmallSpec

    return replace(SmallSpec.from_row(row), array_stages=0)


def row_order(row: dict) -> tuple:
    """The order of a table's small rows: precision, shape, then the plain row and the narrower ones
    (as `gemmgen tune small` writes them)."""
    from ..precision import PRECISION_ORDER

    return (PRECISION_ORDER.index(row["precision"]), row["m"], row["n"], row["k"], row.get("for_device", ""),
            -row.get("max_megabytes", 1 << 30))


def _own_device(table: dict, path: Path, section: str) -> tuple[str, list[dict]]:
    """A later --tables table's device and its rows of `section`, which may be keyed to that device only.
    TableError where it names no device, or has rows for another device."""
    device = table.get("device")
    rows = table.get(section) or []
    if not device:
        raise TableError(f"{path} names no device (\"device\"): its {section} rows cannot be keyed to one")
    others = sorted({r["for_device"] for r in rows if r.get("for_device", device) != device})
    if others:
        raise TableError(f"{path} has {section} rows for {', '.join(others)}, not its device {device}: "
                         "a later --tables folder adds rows for its own device only")
    return device, rows


def device_rows(table: dict, path: Path, fallback: list[dict]) -> list[dict]:
    """A later --tables table's small rows as rows for its own device: each plain row whose kernel
    differs from the fallback's plain row of its shape (or whose shape the fallback lacks), without its
    pointer-array ring; its own rows for its device (for_device, max_megabytes) as they are.  TableError
    where it names no device, or has rows for another device."""
    device, rows = _own_device(table, path, "small")
    plain = {_shape(r): r for r in fallback if not is_keyed_row(r)}
    own = [{**r, "for_device": device} for r in rows if is_keyed_row(r)]
    own_device = {_shape(r) for r in own if "max_megabytes" not in r}   # its own row for the device serves
    out = []
    for row in rows:
        if is_keyed_row(row) or _shape(row) in own_device:
            continue
        base = plain.get(_shape(row))
        if base is not None and strided_kernel(base) == strided_kernel(row):
            continue   # the fallback runs the same kernel there
        out.append({**{k: v for k, v in row.items() if k != "array_stages"}, "for_device": device})
    return out + own


def device_tallskinny_rows(table: dict, path: Path) -> list[dict]:
    """A later --tables table's tallskinny rows as rows for its own device (for_device).  TableError where
    it names no device, or has rows for another device."""
    device, rows = _own_device(table, path, "tallskinny")
    return [{**r, "for_device": device} for r in rows]


def _merged(arch: str, found: list[tuple[Path, Path, dict]]) -> dict:
    """`arch`'s table from its tables in several folders: the first one's, its small section (or the
    packaged one's, where it has none) with each later table's rows for its device (device_rows); those
    replace the fallback's rows for that device at the shapes the later table has.  Its tallskinny
    section likewise, each later table's rows replacing the fallback's rows for that device."""
    first_folder, _, base = found[0]
    later = found[1:]
    devices = [base.get("device")] + [t.get("device") for _, _, t in later]
    for i, (folder, _, table) in enumerate(later, 1):
        if table.get("device") and table["device"] in devices[:i]:
            other = found[devices.index(table["device"])][0]
            raise TableError(f"{other} and {folder} both hold tables of {table['device']} for {arch}; "
                             "give one --tables folder per device")
    merged = dict(base)
    later_small = [(f, p, t) for f, p, t in later if t.get("small")]
    if later_small:
        fallback = base["small"] if "small" in base else _load(table_path(arch)).get("small", [])
        rows = list(fallback)
        for _, path, table in later_small:
            shapes = {_shape(r) for r in table["small"]}
            rows = [r for r in rows if not (r.get("for_device") == table["device"] and _shape(r) in shapes)]
            rows += device_rows(table, path, fallback)
        merged["small"] = sorted(rows, key=row_order)
    later_ts = [(f, p, t) for f, p, t in later if t.get("tallskinny")]
    if later_ts:
        rows = list(base["tallskinny"] if "tallskinny" in base else _load(table_path(arch)).get("tallskinny", []))
        for _, path, table in later_ts:
            own = device_tallskinny_rows(table, path)
            rows = [r for r in rows if r.get("for_device") != table["device"]] + own
        merged["tallskinny"] = rows
    return merged


def _own(name: str) -> dict:
    """The table of `name` in the folders in force ({} where none has one, or none is in force): the
    first folder's, with the small rows of the later folders' tables of a GPU architecture (_merged)."""
    found = _stack(name)
    if not found:
        return {}
    if len(found) == 1 or name.startswith("cpu_"):
        return found[0][2]
    return _merged(name, found)


def load_table(arch: str) -> dict:
    """The table that serves `arch`: the packaged one, each of its sections replaced by the folder's
    (tables_from) where the folder's table of `arch` has it."""
    return {**_load(table_path(arch)), **_own(arch)}


def section_file(arch: str, section: str) -> Path | None:
    """The file `arch`'s `section` comes from (load_table), or None where no table has it (the first
    folder's table for a small section with rows for other devices merged in: device_row_files)."""
    found = _stack(arch)
    if found and section in found[0][2]:
        return found[0][1]
    return table_path(arch) if section in _load(table_path(arch)) else None


def device_row_files(arch: str) -> list[tuple[str, Path]]:
    """(device, file) of each later folder's table whose small or tallskinny rows `arch`'s table takes as
    rows for its device (tables_from with several folders)."""
    if arch.startswith("cpu_"):
        return []
    own = _own(arch)
    keyed = {r.get("for_device") for section in ("small", "tallskinny") for r in own.get(section, [])}
    return [(t["device"], p) for _, p, t in _stack(arch)[1:] if t.get("device") in keyed]


def stack_notes(folders) -> list[str]:
    """Check the folders of `--tables` (each usable_tables, and together: no device twice for an
    architecture, no later rows for another device) and say which of the later folders' rows are not
    used: their wmma sections and their CPU tables, whose dispatch has no device key.
    TableError where they cannot serve."""
    folders = _as_folders(folders)
    names: dict[str, list[Path]] = {}
    for folder in folders:
        for name in usable_tables(folder):
            names.setdefault(name, []).append(folder)
    notes = []
    with tables_from(folders):
        for name in sorted(names):
            found = _stack(name)
            if len(found) < 2:
                continue
            load_table(name)   # the merge's errors, now
            first_folder, _, first = found[0]
            for folder, path, table in found[1:]:
                if name.startswith("cpu_"):
                    notes.append(f"--tables {folder}: {path.name} not used: the CPU dispatch has no device key; "
                                 f"{name} keeps {first_folder}'s")
                    continue
                unused = [s for s in GPU_SECTIONS if s not in ("small", "tallskinny") and table.get(s)]
                if not unused:
                    continue
                whose = {s: f"{first_folder}'s" if s in first else "the packaged table's" for s in unused}
                keeps = (next(iter(whose.values())) if len(set(whose.values())) == 1
                         else ", ".join(f"{w} {s}" for s, w in whose.items()))
                families = "those families'" if len(unused) > 1 else "that family's"
                notes.append(f"--tables {folder}: {table.get('device', path.name)}'s {', '.join(unused)} rows not used: "
                             f"{families} dispatch has no device key; {name} keeps {keeps}")
    return notes


def writable_table(arch: str) -> dict:
    """The table a tuner updates and gives to save_table: the folder's own (tables_from) where one is in
    force, so that the packaged sections are never copied into it; else the packaged one."""
    return _own(arch) if _folder is not None else _load(table_path(arch))


def save_table(arch: str, table: dict) -> Path:
    """Write `arch`'s table: into the folder in force (a GPU's named by its device, with its
    architecture in it), else into the package."""
    if _folder is None:
        path = table_path(arch)
    elif arch.startswith("cpu_"):
        path = _folder / f"{arch}.json"
    else:
        device = _device or table.get("device")
        if not device:
            raise TableError(f"a table for {arch} in {_folder} needs the device it was tuned on")
        table = {**table, "arch": arch, "device": device}
        path = _folder / f"{device_table_name(device)}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(table, indent=1, sort_keys=True) + "\n")
    return path


@functools.lru_cache(maxsize=None)
def local_memory_archs() -> dict[str, frozenset[str]]:
    """Kernel name -> the architectures where ptxas gave it local memory (local_memory.json: with which
    toolkit, and which part of the set was compiled for which architecture)."""
    data = json.loads((TABLE_DIR / "local_memory.json").read_text())
    return {name: frozenset(archs) for name, archs in data["kernels"].items()}
