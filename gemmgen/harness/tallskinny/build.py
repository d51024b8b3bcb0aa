"""A tall-skinny-only emitted set (header, device headers, the tsm2/ism2 variants of a selection,
their dispatch, plus any extra variants the tuner sweeps) and its nvcc build.  The checks, the
tuner and the benchmark use it so they do not depend on the rest of the default set."""
from __future__ import annotations

from pathlib import Path

from gemmgen.generator import __version__, tallskinny
from gemmgen.generator.arch import ARCHS
from gemmgen.generator.emit import (TALLSKINNY_DISPATCH_SOURCE, kernel_source_path, support_files,
                            tallskinny_dispatch_source, tallskinny_source)
from gemmgen.generator.render import banner
from gemmgen.generator.tuning import load_table

from gemmgen.harness.core.build import BuildResult, build_library, sweep_unity

NN_ONLY = (("N", "N"),)


def emit_tallskinny(out_dir: Path, precisions, ns, archs, extra_specs=(), command: str | None = None,
                    table_loader=load_table) -> tuple[list, tuple]:
    """Write the set; returns (sources, dispatch entries)."""
    command = command or "gemmgen tallskinny set " + ",".join(precisions)
    notes: list[str] = []
    entries = tallskinny.build_entries(precisions, ns, archs, table_loader, notes)
    kernels = sorted({k for e in entries for k in e.kernels}, key=lambda s: s.name)
    files = support_files(command, archs, tuple(precisions), tuple(ns))
    for spec in kernels:
        files[kernel_source_path(spec)] = tallskinny_source(spec, command)
    for spec in extra_specs:
        if spec not in kernels:
            files[kernel_source_path(spec)] = tallskinny_source(spec, command, NN_ONLY)
    files[TALLSKINNY_DISPATCH_SOURCE] = tallskinny_dispatch_source(
        entries, kernels, {"banner": banner(command), "version": __version__})
    sources = []
    for rel, text in sorted(files.items()):
        path = out_dir / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if not path.exists() or path.read_text() != text:
            path.write_text(text)
        if rel.endswith(".cu"):
            sources.append(path)
    # Variants of an earlier set that are not part of this one must not be linked.
    keep = {str(p) for p in sources}
    for stale in (out_dir / "src").rglob("*.cu"):
        if str(stale) not in keep:
            stale.unlink()
    return sources, entries


def build_tallskinny(out_dir: Path, build_dir: Path, precisions, ns, arch: str, extra_specs=(),
                     jobs: int | None = None, progress=None,
                     library_name: str = "libgemmgen_tallskinny.so") -> tuple[BuildResult, tuple]:
    if arch not in ARCHS:
        raise ValueError(f"unknown architecture {arch}")
    out_dir = Path(out_dir).resolve()
    sources, entries = emit_tallskinny(out_dir, precisions, ns, (arch,), extra_specs)
    # In unity units (sweep_unity): a failure and each kernel's resources stay its own source's
    result = build_library(out_dir, build_dir, (arch,), jobs, sources=sources, tolerate_failures=True,
                           library_name=library_name, progress=progress, unity=sweep_unity(len(sources), jobs))
    return result, entries
