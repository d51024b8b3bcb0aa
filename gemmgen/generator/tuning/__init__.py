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

# The folder of tables in force (tables_from), and the device whose table the tuners write there.
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


@contextmanager
def tables_from(folder: Path | str | None, device: str | None = None):
    """Read (and write) tables in `folder` while in force; None: the packaged ones alone.  `device`:
    the GPU being tuned, whose table (`<device_table_name>.json`) is the folder's only GPU table
    read and the one written (another device's table of the same architecture stays untouched)."""
    global _folder, _device
    saved = _folder, _device
    _folder, _device = (Path(folder) if folder else None), device
    try:
        yield
    finally:
        _folder, _device = saved


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


def _own(name: str) -> dict:
    """The table of `name` in the folder in force ({} where it has none, or none is in force)."""
    if _folder is None:
        return {}
    path = folder_tables(_folder, _device).get(name) if _folder.is_dir() else None
    return _load(path) if path else {}


def load_table(arch: str) -> dict:
    """The table that serves `arch`: the packaged one, each of its sections replaced by the folder's
    (tables_from) where the folder's table of `arch` has it."""
    return {**_load(table_path(arch)), **_own(arch)}


def section_file(arch: str, section: str) -> Path | None:
    """The file `arch`'s `section` comes from (load_table), or None where no table has it."""
    if section in _own(arch):
        return folder_tables(_folder, _device)[arch]
    return table_path(arch) if section in _load(table_path(arch)) else None


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
