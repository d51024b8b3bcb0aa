"""The manifest step between "enumerate" and "emit": which variants are generated for a request.

A `Selection` is what the user asked for (architectures, precisions, sizes, extra shapes).  The
`Manifest` is what gets emitted: the kernels and, per architecture, which kernel serves each
precision and shape (tuned table row when there is one that fits the architecture, otherwise the
paper's heuristic).  `gemmgen list` and `gemmgen generate --dry-run` print it.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from . import cpu, small, tsm2
from .arch import ARCHS, DEFAULT_ARCHS, parse_archs
from .precision import PRECISION_ORDER, parse_precisions
from .spec import SpecError, parse_ranges
from .tuning import load_table

Shape = tuple[int, int, int]


def parse_sizes(text: str) -> tuple[int, ...]:
    """'1-32', '2,4,8' or '1-8,16' -> sorted sizes; each must be in 1..32."""
    return parse_ranges(text, 1, small.MAX_SIZE, "size", "1-32 or 2,4,8")


def parse_shapes(text: str) -> tuple[Shape, ...]:
    """'3x5x7,2x4x8' -> ((3, 5, 7), (2, 4, 8)) as M×N×K, each in 1..32."""
    shapes: set[Shape] = set()
    for token in (t.strip().lower() for t in text.split(",")):
        if not token:
            continue
        parts = token.split("x")
        if len(parts) != 3 or not all(p.isdigit() for p in parts):
            raise ValueError(f"bad shape {token!r}; write MxNxK, e.g. 3x5x7")
        shape = tuple(int(p) for p in parts)
        if not all(1 <= d <= small.MAX_SIZE for d in shape):
            raise ValueError(f"shape {token} has a dimension outside 1..{small.MAX_SIZE}")
        shapes.add(shape)  # type: ignore[arg-type]
    return tuple(sorted(shapes))


@dataclass(frozen=True)
class Selection:
    archs: tuple[str, ...] = DEFAULT_ARCHS
    precisions: tuple[str, ...] = PRECISION_ORDER
    sizes: tuple[int, ...] = tuple(range(1, small.MAX_SIZE + 1))
    shapes: tuple[Shape, ...] = ()
    tallskinny_ns: tuple[int, ...] = tsm2.DEFAULT_NS   # n of the tsm2/ism2 families (h, s, d)
    cpu_isas: tuple[str, ...] = cpu.ISA_ORDER   # the cpu family's ISAs (generic always included)

    @classmethod
    def parse(cls, archs: str, precisions: str, sizes: str, shapes: str,
              tallskinny_ns: str | None = None) -> "Selection":
        ns = tsm2.DEFAULT_NS if tallskinny_ns is None else (
            tsm2.parse_ns(tallskinny_ns) if tallskinny_ns else ())
        return cls(parse_archs(archs), parse_precisions(precisions), parse_sizes(sizes) if sizes else (),
                   parse_shapes(shapes) if shapes else (), ns)

    @property
    def all_shapes(self) -> tuple[Shape, ...]:
        return tuple(sorted({(s, s, s) for s in self.sizes} | set(self.shapes)))

    def command(self) -> str:
        """The canonical command line that regenerates this selection (recorded in every file)."""
        parts = ["gemmgen generate",
                 "--arch " + ",".join(self.archs),
                 "--precisions " + ",".join(self.precisions),
                 "--sizes " + _compress(self.sizes)]
        if self.shapes:
            parts.append("--shapes " + ",".join(f"{m}x{n}x{k}" for m, n, k in self.shapes))
        if self.tallskinny_ns != tsm2.DEFAULT_NS:
            parts.append("--tallskinny-n " + _compress(self.tallskinny_ns))
        if self.cpu_isas != cpu.ISA_ORDER:   # the default stays implicit: GPU banners unchanged
            parts.append("--cpu-isa " + ",".join(self.cpu_isas))
        return " ".join(parts)


def _compress(sizes: tuple[int, ...]) -> str:
    if not sizes:
        return "''"
    runs, start, prev = [], sizes[0], sizes[0]
    for s in sizes[1:] + (None,):  # type: ignore[operator]
        if s is not None and s == prev + 1:
            prev = s
            continue
        runs.append(f"{start}-{prev}" if prev > start else f"{start}")
        if s is not None:
            start = prev = s
    return ",".join(runs)


@dataclass(frozen=True, order=True)
class DispatchEntry:
    """From compute capability `cc` upward (until a higher entry), `kernel` serves this shape."""
    precision: str
    m: int
    n: int
    k: int
    cc: int
    kernel: small.SmallSpec
    source: str   # "tuned (device, time)" or "heuristic"


@dataclass
class Manifest:
    selection: Selection
    dispatch: tuple[DispatchEntry, ...]
    notes: list[str] = field(default_factory=list)
    tallskinny: tuple[tsm2.TallSkinnyEntry, ...] = ()
    cpu_kernels: tuple[cpu.CpuSpec, ...] = ()   # one per CPU precision, shape and ISA

    @property
    def tallskinny_kernels(self) -> tuple:
        return tuple(sorted({k for e in self.tallskinny for k in e.kernels}, key=lambda s: s.name))

    @property
    def kernels(self) -> tuple[small.SmallSpec, ...]:
        return tuple(sorted({e.kernel for e in self.dispatch}, key=lambda s: s.name))

    def to_json(self) -> dict:
        return {
            "command": self.selection.command(),
            "archs": list(self.selection.archs),
            "precisions": list(self.selection.precisions),
            "shapes": [list(s) for s in self.selection.all_shapes],
            "kernels": [
                {"name": s.name, "family": s.family, "precision": s.precision,
                 "m": s.m, "n": s.n, "k": s.k, "threads": s.threads, "smem_bytes": s.smem_bytes}
                for s in self.kernels
            ],
            "dispatch": [
                {"precision": e.precision, "m": e.m, "n": e.n, "k": e.k, "from_cc": e.cc,
                 "kernel": e.kernel.name, "source": e.source}
                for e in self.dispatch
            ],
            "tallskinny": {
                "n": list(self.selection.tallskinny_ns),
                "kernels": [{"name": s.name, "family": s.family, "precision": s.precision, "n": s.n,
                             "t1": s.t1, "t2": s.t2, "t3": s.t3}
                            for s in self.tallskinny_kernels],
                "dispatch": [e.to_json() for e in self.tallskinny],
            },
            "cpu_isas": list(self.selection.cpu_isas),
            "cpu_kernels": [
                {"name": s.name, "family": s.family, "precision": s.precision, "m": s.m, "n": s.n,
                 "k": s.k, "isa": s.isa, "mr": s.mr, "nr": s.nr}
                for s in self.cpu_kernels
            ],
        }


def _tuned_small(arch: str) -> dict[tuple[str, int, int, int], dict]:
    """The small-family rows for `arch`: its own table, or else the table of the nearest tuned
    architecture (by compute capability, the newer on a tie).  Borrowed choices stay subject to
    `arch`'s own limits (validate), beat the untuned heuristic, and add no kernels to compile."""
    tuned = [a for a in ARCHS if load_table(a).get("small")]
    if not tuned:
        return {}
    source = arch if arch in tuned else min(
        tuned, key=lambda a: (abs(ARCHS[a].cc - ARCHS[arch].cc), -ARCHS[a].cc))
    rows = load_table(source)["small"]
    return {(r["precision"], r["m"], r["n"], r["k"]): {**r, "arch": source} for r in rows}


def build_manifest(selection: Selection) -> Manifest:
    notes: list[str] = []
    tuned = {arch: _tuned_small(arch) for arch in selection.archs}
    entries: list[DispatchEntry] = []
    for precision in selection.precisions:
        for m, n, k in selection.all_shapes:
            previous = None
            for arch in selection.archs:
                row = tuned[arch].get((precision, m, n, k))
                spec, source = None, "heuristic"
                if row is not None:
                    try:
                        spec = small.SmallSpec(precision, m, n, k, row["dim_m"], row["dim_n"],
                                               row["tba"]).validate(arch)
                        source = f"tuned on {row.get('device', row['arch'])}"
                        if row["arch"] != arch:
                            source += f" ({row['arch']}; no {arch} table)"
                    except SpecError as err:
                        notes.append(f"{arch} table row for {precision} {m}x{n}x{k} refused: {err}")
                if spec is None:
                    spec = small.heuristic(precision, m, n, k).validate(arch)
                if spec != previous:
                    entries.append(DispatchEntry(precision, m, n, k, ARCHS[arch].cc, spec, source))
                    previous = spec
    tallskinny = tsm2.build_entries(selection.precisions, selection.tallskinny_ns, selection.archs,
                                    load_table, notes)
    cpu_kernels, cpu_notes = cpu.select(selection.precisions, selection.all_shapes, selection.cpu_isas)
    return Manifest(selection, tuple(sorted(entries, key=_entry_key)), notes + cpu_notes,
                    tallskinny=tallskinny, cpu_kernels=tuple(cpu_kernels))


def _entry_key(e: DispatchEntry):
    return (PRECISION_ORDER.index(e.precision), e.m, e.n, e.k, e.cc)
