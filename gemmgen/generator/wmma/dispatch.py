"""The wmma family's dispatch: which tuned tuple serves which problems (ranges of size per kind),
and the exact shapes the table gives to the tiny and warp kernels."""
from __future__ import annotations

from dataclasses import dataclass

from ..arch import ARCHS
from ..spec import SpecError
from .block import WmmaBlockSpec
from .spec import WmmaSpec
from .sweep import heuristic


# ---- dispatch: which tuple serves which problems -------------------------------------------------
KINDS = ("square", "rank")   # tuned on M = N = K, and on M = N with K = 16 (rank-16 updates)
RANK_K_MAX = 16              # k at or below this uses the rank-update rows


@dataclass(frozen=True, order=True)
class WmmaRange:
    """From compute capability `cc` up, `kernel` serves problems of this kind whose size (max(m, n)
    for rank updates, max(m, n, k) otherwise) is in lo..hi (hi = 0: no upper end)."""
    precision: str
    kind: str
    lo: int
    hi: int
    cc: int
    kernel: "WmmaSpec | WmmaBlockSpec"
    source: str


def size_key(kind: str, m: int, n: int, k: int) -> int:
    return max(m, n) if kind == "rank" else max(m, n, k)


def ranges_from_rows(precision: str, kind: str, cc: int, rows: dict[int, WmmaSpec], source: str,
                     sources: dict[int, str] | None = None) -> list[WmmaRange]:
    """Compress size -> tuple rows (tuned at some sizes) into contiguous ranges: a size between
    two tuned sizes takes the tuple of the next tuned size up; past the last, the last tuple.
    `sources`: sizes whose tuple comes from elsewhere than `source` (the heuristic's, where a tuned
    row was refused)."""
    out: list[WmmaRange] = []
    sizes = sorted(rows)
    label = {size: (sources or {}).get(size, source) for size in sizes}
    lo = 1
    for i, size in enumerate(sizes):
        last = i + 1 == len(sizes)
        if last or (rows[sizes[i + 1]], label[sizes[i + 1]]) != (rows[size], label[size]):
            out.append(WmmaRange(precision, kind, lo, 0 if last else size, cc, rows[size], label[size]))
            lo = size + 1
    return out


def table_rows(table_rows_: list[dict], precision: str) -> dict[tuple[str, int], dict]:
    """(kind, size) -> row of the wmma section of a tuning table, for one precision."""
    return {(r["kind"], r["size"]): r for r in table_rows_ if r["precision"] == precision}


def build_ranges(precision: str, arch: str, rows: dict[tuple[str, int], dict] | None, source: str,
                 notes: list) -> list[WmmaRange]:
    """The general kernel's ranges for one precision and architecture: from the tuned rows (each
    row's best wmma tuple, or from sm_80 on its block kernel where it has one, validated for `arch`;
    where `arch`'s limits refuse the block kernel the row's wmma tuple, and where they refuse that too
    the heuristic's tuple for the row's size, each with a note), else the heuristic at 16, 32 and beyond."""
    cc = ARCHS[arch].cc
    out: list[WmmaRange] = []
    for kind in KINDS:
        chosen: dict[int, WmmaSpec] = {}
        untuned: dict[int, str] = {}
        for (k, size), row in sorted((rows or {}).items()):
            if k != kind:
                continue
            # sm_80+: the row's block kernel where the sweep found one clearly faster
            tried = ([(row["block"], WmmaBlockSpec)] if "block" in row and cc >= 80 else []) + [(row["wmma"], WmmaSpec)]
            for name, cls in tried:
                try:
                    chosen[size] = cls.parse(name).validate(arch)
                    break
                except SpecError as err:
                    fallback = "its wmma tuple serves" if cls is WmmaBlockSpec else "the heuristic serves"
                    notes.append(f"{arch} wmma row {precision} {kind} {size} refused: {err}; {fallback}")
            else:
                chosen[size], untuned[size] = heuristic(precision, size), "heuristic"
        label = source
        if not chosen:
            chosen = {16: heuristic(precision, 16), 32: heuristic(precision, 32), 64: heuristic(precision, 64)}
            label = "heuristic"
        out += ranges_from_rows(precision, kind, cc, chosen, label, untuned)
    return out


def fixed_shapes(rows: dict[tuple[str, int], dict] | None) -> set[tuple[int, int, int]]:
    """Shapes where the tuned table chose a fixed-shape kernel (the tiny or the warp one, or the small
    family at a rank-16 update): they join the exact-shape table next to the requested square sizes."""
    out = set()
    for (kind, size), row in (rows or {}).items():
        if row["choice"] in ("wmmatiny", "wmmawarp") or (row["choice"] == "small" and kind == "rank"):
            out.add((size, size, size) if kind == "square" else (size, size, RANK_K_MAX))
    return out


def shape_choice(rows: dict[tuple[str, int], dict] | None, m: int, n: int, k: int) -> dict | None:
    """The tuned row deciding between the small family, the tiny kernel and the general kernel
    for an exact shape (square sizes and rank-16 updates were tuned; other shapes: None)."""
    if not rows:
        return None
    if m == n == k:
        return rows.get(("square", m))
    if m == n and k == RANK_K_MAX:
        return rows.get(("rank", m))
    return None
