"""Emit a manifest's files: one source per kernel variant, the shared device headers, the dispatch
source, the public header, CMakeLists.txt and manifest.json.  The output is a pure function of the
manifest (sorted, no timestamps), so regenerating gives byte-identical files."""
from __future__ import annotations

import json
from pathlib import Path

from . import __version__
from .arch import ARCHS
from .manifest import Manifest
from .precision import PRECISION_ORDER, PRECISIONS
from .render import banner, render
from .small import MAX_SIZE


def kernel_source_path(spec) -> str:
    return f"src/{spec.family}/{spec.precision}/{spec.name}.cu"


def support_files(command: str, archs, small_precisions) -> dict[str, str]:
    """The headers every kernel source includes (also used by the tuner's throw-away sets)."""
    common = {"banner": banner(command), "version": __version__}
    precisions = [PRECISIONS[k] for k in PRECISION_ORDER]   # the API always has all six
    return {
        "src/gemmgen_device.cuh": render("common/gemmgen_device.cuh.j2", **common),
        "src/gemmgen_small.cuh": render("small/gemmgen_small.cuh.j2", **common),
        "include/gemmgen.h": render("gemmgen.h.j2", precisions=precisions, archs=archs,
                                    small_precisions=small_precisions, small_max_size=MAX_SIZE,
                                    **common),
    }


def kernel_source(spec, command: str, trans_pairs=None) -> str:
    """One variant's source with launchers for every transpose pair (or only `trans_pairs`: the
    tuner times NN and need not compile the other eight)."""
    p = PRECISIONS[spec.precision]
    return render("small/small_variant.cu.j2", spec=spec, p=p,
                  trans_pairs=p.trans_pairs if trans_pairs is None else trans_pairs,
                  banner=banner(command), version=__version__)


def plan(manifest: Manifest) -> dict[str, str]:
    """relative path -> file content, for everything `generate` writes."""
    command = manifest.selection.command()
    common = {"banner": banner(command), "version": __version__}
    precisions = [PRECISIONS[k] for k in PRECISION_ORDER]
    kernels = manifest.kernels
    files = support_files(command, manifest.selection.archs, manifest.selection.precisions)
    for spec in kernels:
        files[kernel_source_path(spec)] = kernel_source(spec, command)
    entries = {p.key: [e for e in manifest.dispatch if e.precision == p.key] for p in precisions}
    files["src/gemmgen_dispatch.cu"] = render(
        "dispatch.cu.j2", kernels=kernels, precisions=precisions, entries=entries,
        precision_of=PRECISIONS, **common)
    files["CMakeLists.txt"] = render(
        "CMakeLists.txt.j2", sources=sorted(kernel_source_path(s) for s in kernels),
        archs=manifest.selection.archs,
        cmake_archs=[str(ARCHS[a].cc) for a in manifest.selection.archs], **common)
    listing = manifest.to_json()
    listing["generator"] = f"gemmgen {__version__}"
    listing["files"] = sorted(files) + ["manifest.json"]
    files["manifest.json"] = json.dumps(listing, indent=1, sort_keys=True) + "\n"
    return files


def write(manifest: Manifest, out_dir: Path) -> list[Path]:
    """Write the files; remove files an earlier `generate` wrote there that are no longer part of
    the set (read from the old manifest.json), so the folder always equals a fresh generation."""
    if out_dir.exists() and not out_dir.is_dir():
        raise NotADirectoryError(f"output {out_dir} exists and is not a folder")
    files = plan(manifest)
    old_manifest = out_dir / "manifest.json"
    if old_manifest.exists():
        try:
            stale = set(json.loads(old_manifest.read_text()).get("files", [])) - set(files)
        except json.JSONDecodeError:
            stale = set()
        for rel in sorted(stale):
            path = out_dir / rel
            if path.is_file():
                path.unlink()
    written = []
    for rel, content in sorted(files.items()):
        path = out_dir / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if not path.exists() or path.read_text() != content:
            path.write_text(content)
        written.append(path)
    _remove_empty_dirs(out_dir)
    return written


def _remove_empty_dirs(root: Path) -> None:
    for folder in sorted((p for p in root.rglob("*") if p.is_dir()), key=lambda p: len(p.parts),
                         reverse=True):
        if not any(folder.iterdir()):
            folder.rmdir()
