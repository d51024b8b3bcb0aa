"""A build cache shared by every build folder and checkout of this machine (or of several, on a shared
file system): compiled objects stored under the key of everything that made them.

A build folder already skips a source whose object is up to date (its stamp holds the object's key).
This cache adds a second place to look before compiling: a fresh clone, a second build folder, `gemmgen
check` after `gemmgen tune`, or CI with a kept cache find there what any earlier build compiled, so
they link instead of compiling.  The keys (build.object_key, cpu.build's) hash the compiler's version,
the flags and the text of the sources and headers, never a path, so an entry is right wherever it is
used.

Where: $GEMMGEN_CACHE_DIR, else $XDG_CACHE_HOME/gemmgen, else ~/.cache/gemmgen.  GEMMGEN_CACHE_DIR=off
turns it off.  Entries are written to a folder of their own and renamed into place, so concurrent
builds (the workers of `gemmgen tune --gpus`, two users) never see half an entry; a build that finds
the cache unwritable goes on without it.  The cache keeps itself under $GEMMGEN_CACHE_MAX_GB (default
5): a build that adds to it removes the entries used least recently beyond that."""
from __future__ import annotations

import hashlib
import os
import shutil
import threading
import uuid
from pathlib import Path

DEFAULT_MAX_GB = 5.0
_OFF = ("off", "0", "none", "")


def cache_root() -> Path | None:
    """The shared cache's folder, or None where it is turned off."""
    configured = os.environ.get("GEMMGEN_CACHE_DIR")
    if configured is not None:
        return None if configured.strip().lower() in _OFF else Path(configured).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "gemmgen"


def max_bytes() -> int:
    text = os.environ.get("GEMMGEN_CACHE_MAX_GB", "")
    try:
        gigabytes = float(text) if text.strip() else DEFAULT_MAX_GB
    except ValueError:
        gigabytes = DEFAULT_MAX_GB
    return int(max(gigabytes, 0.0) * 1e9)


class ObjectCache:
    """Entries of named files (an object, ptxas's report) under a key.  `kind` keeps compilers apart
    (nvcc, g++, the AArch64 g++): their keys hash their own flags anyway, the folders make the cache
    readable."""

    def __init__(self, root: Path, kind: str):
        self.root = root
        self.kind = kind
        self.added = False

    def _entry(self, key: str) -> Path:
        return self.root / self.kind / key[:2] / key

    def fetch(self, key: str, files: dict[str, Path]) -> bool:
        """Copy the entry's files to their places (each renamed into place); False where there is no
        complete entry."""
        entry = self._entry(key)
        if not all((entry / name).is_file() for name in files):
            return False
        try:
            for name, target in files.items():
                target.parent.mkdir(parents=True, exist_ok=True)
                partial = target.with_name(f".{target.name}.{os.getpid()}.{threading.get_ident()}")
                shutil.copyfile(entry / name, partial)
                partial.replace(target)
            os.utime(entry)            # the least recently used go first when the cache is trimmed
        except OSError:
            return False
        return True

    def store(self, key: str, files: dict[str, Path]) -> None:
        """Add an entry (nothing if one is there, or if the cache cannot be written)."""
        entry = self._entry(key)
        if entry.exists():
            return
        staging = self.root / "tmp" / uuid.uuid4().hex
        try:
            staging.mkdir(parents=True)
            for name, source in files.items():
                shutil.copyfile(source, staging / name)
            entry.parent.mkdir(parents=True, exist_ok=True)
            staging.rename(entry)
            self.added = True
        except OSError:                # another build stored it first, or no space or rights: go on
            shutil.rmtree(staging, ignore_errors=True)

    def trim(self, limit: int | None = None) -> int:
        """Remove the least recently used entries of every kind until the cache is under `limit`
        bytes (default: $GEMMGEN_CACHE_MAX_GB); returns the bytes removed."""
        limit = max_bytes() if limit is None else limit
        entries = []
        for kind in (p for p in self.root.iterdir() if p.is_dir() and p.name != "tmp"):
            for entry in kind.glob("*/*"):
                try:
                    size = sum(f.stat().st_size for f in entry.iterdir())
                    entries.append((entry.stat().st_mtime, size, entry))
                except OSError:
                    continue
        total = sum(size for _, size, _ in entries)
        removed = 0
        for _, size, entry in sorted(entries, key=lambda e: e[0]):
            if total - removed <= limit:
                break
            shutil.rmtree(entry, ignore_errors=True)
            removed += size
        return removed


def shared(kind: str) -> ObjectCache | None:
    """The shared cache for one compiler, or None where it is turned off."""
    root = cache_root()
    return None if root is None else ObjectCache(root, kind)


# ---- results of checks that passed on an identical build ---------------------------------------------------
def _harness_digest() -> bytes:
    """The text of the harness (cases, references, error bounds, runners): a change to any of it checks
    again."""
    digest = hashlib.sha256()
    root = Path(__file__).resolve().parent.parent
    for path in sorted(root.rglob("*.py")):
        digest.update(str(path.relative_to(root)).encode())
        digest.update(path.read_bytes())
    return digest.digest()


def passed_before(folder: Path, binary: Path, label: str, cases: list) -> Path:
    """Where the results of running `cases` on `binary` (a library or runner, by its bytes) under
    `label` are kept once they all passed: the same bytes, cases and harness check the same, so a
    second `gemmgen check` of an unchanged build reports them instead of running them again."""
    digest = hashlib.sha256(_harness_digest())
    digest.update(binary.read_bytes())
    digest.update(label.encode())
    digest.update(repr(cases).encode())
    return folder / "passed" / f"{digest.hexdigest()}.json"
