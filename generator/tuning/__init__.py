"""Tuning tables as data: one JSON file per GPU architecture (sm_90.json, ...).

Each family's section is a list of rows, one per shape and precision, holding the chosen
parameters, the time that made them the choice and the device it was measured on.  The
generator reads these; `gemmgen tune` writes them.
"""
from __future__ import annotations

import functools
import json
from pathlib import Path

TABLE_DIR = Path(__file__).resolve().parent


def table_path(arch: str) -> Path:
    return TABLE_DIR / f"{arch}.json"


def load_table(arch: str) -> dict:
    path = table_path(arch)
    if not path.exists():
        return {}
    return json.loads(path.read_text())


def save_table(arch: str, table: dict) -> Path:
    path = table_path(arch)
    path.write_text(json.dumps(table, indent=1, sort_keys=True) + "\n")
    return path


@functools.lru_cache(maxsize=None)
def local_memory_archs() -> dict[str, frozenset[str]]:
    """Kernel name -> the architectures where ptxas gave it local memory (local_memory.json: with which
    toolkit, and which part of the set was compiled for which architecture)."""
    data = json.loads((TABLE_DIR / "local_memory.json").read_text())
    return {name: frozenset(archs) for name, archs in data["kernels"].items()}
