"""The manifest step between "enumerate" and "emit": which variants are generated for a request.

A `Selection` is what the user asked for (architectures, precisions, sizes, extra shapes).  The
`Manifest` is what gets emitted: the kernels and, per architecture, which kernel serves each
precision and shape (tuned table row when there is one that fits the architecture, otherwise the
paper's heuristic).  `gemmgen list` and `gemmgen generate --dry-run` print it.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace

from . import cpu, small, tallskinny, wmma
from .arch import ARCHS, CP_ASYNC_MIN_CC, DEFAULT_ARCHS, parse_archs
from .families import family_of, parse_kernel
from .precision import PRECISION_ORDER, parse_precisions
from .spec import SpecError, format_ranges, parse_ranges
from .tuning import (device_row_files, is_keyed_row, load_table, row_key_label, section_file, stack_notes,
                     tables_from)

Shape = tuple[int, int, int]


# Square sizes go up to the one-warp Tensor Core kernels' (h and hc); every other fixed-shape kernel
# (the small family, the CPU kernels) stops at small.MAX_SIZE, so s, d, c and z skip the sizes above it.
MAX_SIZE = wmma.WARP_MAX_SIZE
DEFAULT_SIZES = tuple(range(1, MAX_SIZE + 1))


def parse_sizes(text: str, high: int = MAX_SIZE) -> tuple[int, ...]:
    """'1-64', '2,4,8' or '1-8,16' -> sorted sizes; each must be in 1..high (64; 32 for the commands
    of the small and cpu families alone)."""
    return parse_ranges(text, 1, high, "size", f"1-{high} or 2,4,8")


def _above_small(precisions) -> bool:
    """Whether sizes above small.MAX_SIZE mean anything for these precisions (h, hc: the warp kernels)."""
    return any(p in wmma.PRECISIONS_WMMA for p in precisions)


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
    # Square sizes, 1..64.  Above 32 only h and hc have exact-shape kernels (the one-warp Tensor Core
    # kernels, where the tuned table chose one); a selection without h and hc keeps the sizes up to 32.
    sizes: tuple[int, ...] = DEFAULT_SIZES
    shapes: tuple[Shape, ...] = ()
    tallskinny_ns: tuple[int, ...] = tallskinny.DEFAULT_NS   # n of the tsm2/ism2 families (h, s, d)
    cpu_isas: tuple[str, ...] = cpu.ISA_ORDER   # the cpu family's ISAs (generic always included)
    # Folders of tables made by `gemmgen tune` (generator.tuning.tables_from), read before the packaged
    # ones: per architecture the first that has a table serves, the later ones add rows for their devices;
    # () for the packaged tables alone.
    tables: tuple[str, ...] = ()

    def __post_init__(self):
        if not _above_small(self.precisions):
            object.__setattr__(self, "sizes", tuple(s for s in self.sizes if s <= small.MAX_SIZE))

    @classmethod
    def parse(cls, archs: str, precisions: str, sizes: str | None, shapes: str,
              tallskinny_ns: str | None = None, max_size: int = MAX_SIZE) -> "Selection":
        """sizes None: the default (1-64, up to 32 without h and hc).  Sizes above 32 asked for
        explicitly are refused where no precision has a kernel for them (s, d, c, z alone).
        max_size: the largest size accepted (32 for the commands of the small or cpu family alone)."""
        ns = tallskinny.DEFAULT_NS if tallskinny_ns is None else (
            tallskinny.parse_ns(tallskinny_ns) if tallskinny_ns else ())
        precs = parse_precisions(precisions)
        sizes_ = DEFAULT_SIZES if sizes is None else (parse_sizes(sizes, max_size) if sizes else ())
        if sizes is not None and not _above_small(precs) and sizes_ and sizes_[-1] > small.MAX_SIZE:
            raise ValueError(f"size {sizes_[-1]}: sizes above {small.MAX_SIZE} exist only for h and hc "
                             f"(one-warp Tensor Core kernels), not for {','.join(precs)}")
        return cls(parse_archs(archs), precs, sizes_, parse_shapes(shapes) if shapes else (), ns)

    @property
    def all_shapes(self) -> tuple[Shape, ...]:
        """Every requested shape: the squares of `sizes` and the rectangular `shapes`."""
        return tuple(sorted({(s, s, s) for s in self.sizes} | set(self.shapes)))

    @property
    def small_shapes(self) -> tuple[Shape, ...]:
        """The requested shapes up to small.MAX_SIZE: every precision's exact shapes (the small and cpu
        families'); h and hc add the tuned table's fixed shapes above it (build_manifest)."""
        return tuple(s for s in self.all_shapes if max(s) <= small.MAX_SIZE)

    def command(self) -> str:
        """The canonical command line that regenerates this selection (recorded in every file)."""
        parts = ["gemmgen generate",
                 "--arch " + ",".join(self.archs),
                 "--precisions " + ",".join(self.precisions),
                 "--sizes " + ranges_arg(self.sizes)]
        if self.shapes:
            parts.append("--shapes " + ",".join(f"{m}x{n}x{k}" for m, n, k in self.shapes))
        if self.tallskinny_ns != tallskinny.DEFAULT_NS:
            parts.append("--tallskinny-n " + ranges_arg(self.tallskinny_ns))
        if self.cpu_isas != cpu.ISA_ORDER:   # the default stays implicit: GPU banners unchanged
            parts.append("--cpu-isa " + ",".join(self.cpu_isas))
        parts += [f"--tables {folder}" for folder in self.tables]
        return " ".join(parts)


def ranges_arg(sizes: tuple[int, ...]) -> str:
    """Sizes as a command-line value: '1-8,16', or '' quoted for the shell when there are none."""
    return format_ranges(sizes) or "''"


@dataclass(frozen=True, order=True)
class DispatchEntry:
    """From compute capability `cc` upward (until a higher entry), `kernel` serves this shape."""
    precision: str
    m: int
    n: int
    k: int
    cc: int
    kernel: small.SmallSpec | wmma.WmmaTinySpec | wmma.WmmaWarpSpec
    source: str   # "tuned (device, time)" or "heuristic"
    prefer_general: bool = False   # h/hc: the tuned general wmma kernel beats this one here
    # A narrower entry, from a table row keyed by them (tuning.KEYED_ROW_FIELDS): only on the GPU of
    # this name (cudaDeviceProp.name), only for launches whose A, B and C take at most this many MB.
    device: str = ""
    max_megabytes: int = 0


@dataclass
class Manifest:
    selection: Selection
    dispatch: tuple[DispatchEntry, ...]
    notes: list[str] = field(default_factory=list)
    tallskinny: tuple[tallskinny.TallSkinnyEntry, ...] = ()
    cpu_kernels: tuple[cpu.CpuSpec, ...] = ()   # one per CPU precision, shape and ISA
    wmma_ranges: tuple[wmma.WmmaRange, ...] = ()   # the general Tensor Core kernel, any shape (h, hc)
    tallskinny_routes: tuple[tallskinny.TensorCoreRoute, ...] = ()   # h tall-skinny GEMMs on Tensor Cores
    # what of the later --tables folders is not used (tuning.stack_notes): their wmma, tallskinny, CPU tables
    tables_not_used: tuple[str, ...] = ()

    @property
    def wmma_kernels(self) -> tuple[wmma.WmmaSpec, ...]:
        return tuple(sorted({r.kernel for r in self.wmma_ranges} | {r.kernel for r in self.tallskinny_routes},
                            key=lambda s: s.name))

    @property
    def tallskinny_kernels(self) -> tuple:
        return tuple(sorted({k for e in self.tallskinny for k in e.kernels}, key=lambda s: s.name))

    @property
    def kernels(self) -> tuple:
        """The fixed-shape kernels of the exact-shape table (small family, tiny and warp wmma)."""
        return tuple(sorted({e.kernel for e in self.dispatch}, key=lambda s: s.name))

    def table_summary(self) -> list[str]:
        """A line per architecture: which tuning table serves each family there (its own, the nearest tuned
        architecture's, or none: the heuristic), and how many of those rows it refused (its limits, or local
        memory that ptxas gave a variant there; the notes name them and what serves instead)."""
        precisions = self.selection.precisions
        sections = ["small"] + (["wmma"] if set(precisions) & set(wmma.PRECISIONS_WMMA) else []) + (
            ["tallskinny"] if self.selection.tallskinny_ns and set(precisions) & set(tallskinny.PRECISIONS_TS) else [])
        lines = []
        with tables_from(self.selection.tables):
            for arch in self.selection.archs:
                lines.append(self._table_line(arch, sections))
        return lines

    def _table_line(self, arch: str, sections: list[str]) -> str:
        by_source: dict[tuple, list[str]] = {}
        for section in sections:
            source, rows = _tuned_section(arch, section)
            # the device and file of each section: a folder's table (--tables) may replace only some
            # (the device of its rows for every GPU: rows for one device, from a later --tables, may come first)
            device = next((r.get("device") for r in rows if "for_device" not in r), rows[0].get("device") if rows else None)
            key = (source, device, section_file(source, section) if source else None)
            by_source.setdefault(key, []).append(section)
        parts = []
        for (source, device, path), names in by_source.items():
            if source is None:
                parts.append(f"{', '.join(names)}: the heuristic (no tuned table)")
            else:
                whose = "its own table" if source == arch else f"{source}'s table (no {arch} table)"
                where = f" ({path})" if self.selection.tables else ""
                parts.append(f"{', '.join(names)}: {whose}, tuned on {device or 'an unnamed device'}{where}")
                if source == arch and {"small", "tallskinny"} & set(names):
                    parts += [f"rows for {other} only: {file}" for other, file in device_row_files(arch)]
        refused = sum(1 for n in self.notes if n.startswith(f"{arch} ") and " refused" in n)
        if refused:
            parts.append(f"{refused} of those rows refused on {arch} (notes below)")
        return f"{arch}: " + "; ".join(parts)

    def to_json(self) -> dict:
        # the CUDA kernels by the table that dispatches to them, each entry as its family says (families.py)
        def listing(specs) -> list[dict]:
            return [family_of(s).kernel_json(s) for s in specs]
        return {
            "command": self.selection.command(),
            "archs": list(self.selection.archs),
            "precisions": list(self.selection.precisions),
            "shapes": [list(s) for s in self.selection.small_shapes],
            "kernels": listing(self.kernels),
            "dispatch": [
                {"precision": e.precision, "m": e.m, "n": e.n, "k": e.k, "from_cc": e.cc,
                 "kernel": e.kernel.name, "source": e.source, "prefer_general": e.prefer_general,
                 **({"device": e.device} if e.device else {}),
                 **({"max_megabytes": e.max_megabytes} if e.max_megabytes else {})}
                for e in self.dispatch
            ],
            "wmma": {
                "kernels": listing(self.wmma_kernels),
                "dispatch": [{"precision": r.precision, "kind": r.kind, "lo": r.lo, "hi": r.hi,
                              "from_cc": r.cc, "kernel": r.kernel.name, "source": r.source}
                             for r in self.wmma_ranges],
            },
            "tallskinny": {
                "n": list(self.selection.tallskinny_ns),
                "kernels": listing(self.tallskinny_kernels),
                "dispatch": [e.to_json() for e in self.tallskinny],
                "tensor_core": [r.to_json() for r in self.tallskinny_routes],
            },
            **({"tables_not_used": list(self.tables_not_used)} if self.tables_not_used else {}),
            "cpu_isas": list(self.selection.cpu_isas),
            "cpu_kernels": [
                {"name": s.name, "family": s.family, "precision": s.precision, "m": s.m, "n": s.n,
                 "k": s.k, "isa": s.isa, "mr": s.mr, "nr": s.nr}
                for s in self.cpu_kernels
            ],
        }


def _tuned_section(arch: str, section: str) -> tuple[str | None, list[dict]]:
    """A family's rows for `arch`: its own table, or else the table of the nearest tuned
    architecture (by compute capability, the newer on a tie).  Borrowed choices stay subject to
    `arch`'s own limits (validate), beat the untuned heuristic, and add no kernels to compile."""
    tuned = [a for a in ARCHS if load_table(a).get(section)]
    if not tuned:
        return None, []
    source = arch if arch in tuned else min(
        tuned, key=lambda a: (abs(ARCHS[a].cc - ARCHS[arch].cc), -ARCHS[a].cc))
    return source, load_table(source)[section]


def _tuned_small(arch: str) -> tuple[dict[tuple[str, int, int, int], dict], dict[tuple[str, int, int, int], list]]:
    """The small rows serving `arch`, per shape: the row for every device and launch, and the rows
    keyed to one device or to launches up to a size (those only from `arch`'s own table: they were
    measured on a GPU of that architecture)."""
    source, rows = _tuned_section(arch, "small")
    plain, keyed = {}, {}
    for r in rows:
        shape = (r["precision"], r["m"], r["n"], r["k"])
        if not is_keyed_row(r):
            plain[shape] = {**r, "arch": source}
        elif source == arch:
            keyed.setdefault(shape, []).append({**r, "arch": source})
    return plain, keyed


def _keyed_entries(rows: list[dict], base: DispatchEntry, arch: str, notes: list) -> list[DispatchEntry]:
    """The narrower entries of a shape (rows for one device, or for launches up to a size) where
    their kernel differs from the one the shape's entry runs."""
    out = []
    for row in rows:
        try:
            spec = small.SmallSpec.from_row(row, base.precision, (base.m, base.n, base.k)).validate(arch)
        except SpecError as err:
            notes.append(f"{arch} table row for {base.precision} {base.m}x{base.n}x{base.k} "
                         f"({row_key_label(row)}) refused: {err}")
            continue
        if spec != base.kernel:
            out.append(replace(base, kernel=spec, source=_tuned_label(row, row["arch"], arch),
                               device=row.get("for_device", ""), max_megabytes=row.get("max_megabytes", 0)))
    return out


def _tuned_label(row: dict, source: str, arch: str) -> str:
    label = f"tuned on {row.get('device', source)}"
    return label + (f" ({source}; no {arch} table)" if source != arch else "")


def build_manifest(selection: Selection) -> Manifest:
    """The manifest of `selection`, from the tables of selection.tables over the packaged ones."""
    not_used = tuple(stack_notes(selection.tables)) if len(selection.tables) > 1 else ()
    with tables_from(selection.tables):
        return replace(_build_manifest(selection), tables_not_used=not_used)


def _build_manifest(selection: Selection) -> Manifest:
    notes: list[str] = []
    tuned, keyed = {}, {}
    for arch in selection.archs:
        tuned[arch], keyed[arch] = _tuned_small(arch)
    wmma_rows = {}
    for arch in selection.archs:
        source, rows = _tuned_section(arch, "wmma")
        wmma_rows[arch] = (source, {p: wmma.table_rows(rows, p) for p in wmma.PRECISIONS_WMMA})
    entries: list[DispatchEntry] = []
    for precision in selection.precisions:
        shapes = set(selection.small_shapes)
        if precision in wmma.PRECISIONS_WMMA:
            # the tuned table's tiny, warp and rank-16 small kernels at the requested sizes (a rank-16
            # update s×s×16 where s is one); a requested size without one goes to the general kernel
            for arch in selection.archs:
                shapes |= {s for s in wmma.fixed_shapes(wmma_rows[arch][1].get(precision))
                           if s[0] in selection.sizes}
        for m, n, k in sorted(shapes):
            previous = None
            for arch in selection.archs:
                # h/hc: the tuned cut-off between the small family, the Tensor Core kernels of one
                # shape (tiny, warp) and the general one.
                choice = _shape_choice(wmma_rows[arch][1].get(precision), m, n, k, arch, notes)
                spec, source = None, "heuristic"
                if choice is not None and choice["choice"] in ("wmmatiny", "wmmawarp"):
                    try:
                        spec = wmma.parse_name(choice["kernel"]).validate(arch)
                        source = _tuned_label(choice, wmma_rows[arch][0], arch)
                    except SpecError as err:
                        notes.append(f"{arch} wmma row for {precision} {m}x{n}x{k} refused: {err}")
                        choice = None
                prefer_general = choice is not None and choice["choice"] == "wmma"
                if spec is None and prefer_general and "warp_kernel" in choice:
                    # the entry only sends the shape to the general kernel; it names the warp kernel that
                    # serves newer devices (compiled anyway) rather than a small kernel that never runs
                    spec = wmma.parse_name(choice["warp_kernel"]).validate(arch)
                    source = _tuned_label(choice, wmma_rows[arch][0], arch)
                if spec is None:
                    row = tuned[arch].get((precision, m, n, k))
                    if row is not None:
                        try:
                            spec = small.SmallSpec.from_row(row, precision, (m, n, k)).validate(arch)
                            source = _tuned_label(row, row["arch"], arch)
                        except SpecError as err:
                            notes.append(f"{arch} table row for {precision} {m}x{n}x{k} refused: {err}; the heuristic serves")
                if spec is None:
                    spec = small.heuristic(precision, m, n, k).validate(arch)
                entry = DispatchEntry(precision, m, n, k, ARCHS[arch].cc, spec, source, prefer_general)
                narrower = ([] if prefer_general or not isinstance(spec, small.SmallSpec)
                            else _keyed_entries(keyed[arch].get((precision, m, n, k), []), entry, arch, notes))
                if previous is None or (spec, prefer_general) != (previous.kernel, previous.prefer_general):
                    entries.append(entry)
                    previous = entry
                entries += narrower
    # Like the other families, an architecture without a tall-skinny table borrows the nearest
    # tuned one's (the same kernels: nothing more to compile; before sm_80 the cp.async ring of a
    # borrowed kernel copies synchronously).
    ts_entries = tallskinny.build_entries(selection.precisions, selection.tallskinny_ns, selection.archs,
                                    lambda arch: dict(zip(("source", "tallskinny"), _tuned_section(arch, "tallskinny"))),
                                    notes)
    routes = _tallskinny_routes(selection, ts_entries)
    cpu_kernels, cpu_notes = cpu.select(selection.precisions, selection.small_shapes, selection.cpu_isas)
    ranges: list[wmma.WmmaRange] = []
    for precision in (p for p in selection.precisions if p in wmma.PRECISIONS_WMMA):
        previous = None
        for arch in selection.archs:
            source, rows = wmma_rows[arch]
            label = "tuned" + (f" ({source}; no {arch} table)" if source and source != arch else "")
            mine = wmma.build_ranges(precision, arch, rows.get(precision), label, notes)
            key = [(r.kind, r.lo, r.hi, r.kernel) for r in mine]
            if key != previous:
                ranges += mine
                previous = key
    return Manifest(selection, tuple(sorted(entries, key=_entry_key)), notes + cpu_notes,
                    tallskinny=ts_entries, tallskinny_routes=routes, cpu_kernels=tuple(cpu_kernels),
                    wmma_ranges=tuple(sorted(ranges, key=lambda r: (PRECISION_ORDER.index(r.precision),
                                                                     r.kind, r.lo, r.cc))))


def _tallskinny_routes(selection: Selection, ts_entries) -> tuple[tallskinny.TensorCoreRoute, ...]:
    """The Tensor Core route of each tall-skinny precision that has one (tallskinny.TENSOR_CORE_KERNELS), where
    the set has that precision's tall-skinny kernels and an architecture with cp.async: its kernel joins the
    wmma family's sources."""
    routes = []
    for precision, name in sorted(tallskinny.TENSOR_CORE_KERNELS.items()):
        archs = [a for a in selection.archs if ARCHS[a].cc >= CP_ASYNC_MIN_CC]
        if not archs or not any(e.precision == precision for e in ts_entries):
            continue
        kernel = wmma.parse_name(name)
        for arch in archs:
            kernel.validate(arch)
        routes.append(tallskinny.TensorCoreRoute(precision, kernel, tallskinny.TENSOR_CORE_MIN_M, kernel.blk_n,
                                                 CP_ASYNC_MIN_CC))
    return tuple(routes)


def _shape_choice(rows, m: int, n: int, k: int, arch: str, notes: list) -> dict | None:
    """The tuned row's choice for an exact shape on `arch`.  The warp kernel needs sm_80 (cp.async,
    mma.sync.m16n8k16; before it its element-by-element path is slow), so on older architectures the
    row's fastest other choice serves, with `warp_kernel` naming the warp kernel for an entry that has
    no small kernel of its shape."""
    choice = wmma.shape_choice(rows, m, n, k)
    if choice is None or choice["choice"] != "wmmawarp" or ARCHS[arch].cc >= CP_ASYNC_MIN_CC:
        return choice
    if "fallback_choice" not in choice:
        notes.append(f"{arch}: the wmma row for {m}x{n}x{k} chose the warp kernel and names no other; "
                     "the general kernel serves there")
    return {**choice, "choice": choice.get("fallback_choice", "wmma"),
            "kernel": choice.get("fallback_kernel", choice["wmma"]), "warp_kernel": choice["kernel"]}


def _entry_key(e: DispatchEntry):
    return (PRECISION_ORDER.index(e.precision), e.m, e.n, e.k, e.cc, e.device, -e.max_megabytes)


# ---- which devices a kernel can run on ------------------------------------------------------------------
# The dispatch tables change at one compute capability: from sm_80 (cp.async) the tuned table's kernels serve,
# below it the kernels chosen for older devices.  A kernel whose entries all sit on one side of that line
# is built only for the architectures on that side (the harness's builds and CMake's), so a build for
# sm_90 alone leaves out the kernels only an sm_75 would run, and the reverse.
BAND_SPLIT_CC = CP_ASYNC_MIN_CC
BELOW, FROM = "below", "from"


def kernel_bands(dispatch: list[dict]) -> dict[str, str]:
    """Per kernel of the exact-shape table (manifest.json's "dispatch" entries) that only devices below
    BAND_SPLIT_CC or only devices from it can run: BELOW or FROM.  An entry serves from its from_cc
    until the next entry of its shape (the lowest entry also serves every older device).  An entry that
    sends its shape to the general kernel (prefer_general) launches its own kernel only in a build
    without the wmma family, which a warp kernel (a wmma family member) is not in: for those it counts
    for nothing."""
    shapes: dict[tuple, list[dict]] = {}
    for e in dispatch:
        key = (e["precision"], e["m"], e["n"], e["k"], e.get("device", ""), e.get("max_megabytes", 0))
        shapes.setdefault(key, []).append(e)
    sides: dict[str, set] = {}
    for entries in shapes.values():
        entries = sorted(entries, key=lambda e: e["from_cc"])
        for i, e in enumerate(entries):
            sides.setdefault(e["kernel"], set())
            if e.get("prefer_general") and family_of(parse_kernel(e["kernel"])).name != "small":
                continue
            lo = 0 if i == 0 else e["from_cc"]
            hi = entries[i + 1]["from_cc"] if i + 1 < len(entries) else 1 << 30
            if lo < BAND_SPLIT_CC:
                sides[e["kernel"]].add(BELOW)
            if hi > BAND_SPLIT_CC:
                sides[e["kernel"]].add(FROM)
    return {name: next(iter(s)) for name, s in sides.items() if len(s) == 1}


def builds_on(band: str | None, cc: int) -> bool:
    """Whether a kernel of this band (kernel_bands; None: every device) is built for compute capability cc."""
    return band is None or (band == BELOW) == (cc < BAND_SPLIT_CC)
