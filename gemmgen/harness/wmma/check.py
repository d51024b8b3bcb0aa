"""NumPy checks of the wmma family (and of the exact-shape kernels the dispatch passes over), on
top of the cases of harness.core.cases.

- Every general and block Tensor Core kernel of the set, called through its own launcher, on shapes
  that are not multiples of any block (one block, several blocks with partial edges, 1×1×1), every
  transpose pair (conjugation for hc), both batch interfaces, a packed batch, the bit-exact
  integer case, beta = 0 over NaN, with leading dimensions larger than the matrices (a block
  kernel's element-by-element copies); variants with a cp.async ring (block kernels too) also on
  16-byte aligned operands (the ring's path; the others take the register path; with beta ≠ 0 the
  ring also copies C), on a batch of 2000 (each resident thread block works through several C
  blocks), and with C alone between 16-byte boundaries (the ring without C); general tuples with a
  ring, with beta ≠ 0, also on packed batches of odd sizes that fit one C block (the raw packed
  ring), every transpose pair; h tuples with fp16 sums also on rank-k updates up to 128×128 with
  beta = 0 (the sm_90 whole-GEMM path through the tensor copy engine), every transpose pair, padded
  and packed.
- Block kernels also on operands on 4-byte but not 16-byte boundaries (their 8- and 4-byte cp.async
  units, C in pieces); h block kernels with an sm_90a path also on NN, beta = 0 GEMMs of several
  128-row blocks of C (that path's wgmma tiles, with partial edges).
- The C API at both ends of every dispatch range (square and rank-16 problems), so the tuned
  ranges are exercised as a user reaches them.
- The small-family kernels the tuned table passes over for the general kernel (prefer_general),
  through their own launchers, so every emitted kernel is checked.
"""
from __future__ import annotations

from typing import Iterator

import numpy as np

from gemmgen.generator import wmma
from gemmgen.generator.precision import PRECISIONS

from gemmgen.harness.core.cases import Case, _scalars


def kernel_shapes(spec: wmma.WmmaSpec) -> list[tuple[int, int, int]]:
    return [(37, 45, 29), (2 * spec.blk_m + 3, spec.blk_n + 5, 2 * spec.blk_k + 1), (1, 1, 1)]


def packed_ring_cases(spec: wmma.WmmaSpec, rng: np.random.Generator) -> Iterator[Case]:
    """A general tuple with a cp.async ring, beta ≠ 0: its raw packed ring (the block kernels have none)."""
    prec, name, pairs = spec.precision, spec.name, PRECISIONS[spec.precision].trans_pairs
    # A packed batch of GEMMs that each fit one C block, at sizes that are not multiples of 8, beta ≠ 0:
    # the raw packed ring (GEMMs starting anywhere in a 16-byte chunk, K across several slices),
    # C written in chunks, or element by element where it starts between boundaries.
    m, n, k = spec.blk_m - 3, spec.blk_n - 5, 2 * spec.blk_k + 1
    for ta, tb in pairs:
        alpha, beta = _scalars(rng, prec)
        yield Case(prec, m, n, k, ta, tb, "strided", 2000, "packed-ring", alpha, beta, pad=0, kernel=name)
    yield Case(prec, m, n, k, "T", "T", "strided", 1001, "packed-ring-c-unaligned", 1.0, 0.5, pad=0,
               c_offset=1, kernel=name)
    yield Case(prec, 1, 1, 1, "N", "N", "strided", 3001, "packed-ring-1x1x1", 1.0, 0.5, pad=0, kernel=name)
    # beta = 0 on the same batch takes the register-staged kernel instead.
    yield Case(prec, m, n, k, "N", "N", "strided", 1999, "packed-beta0-nan", 1.0, 0.0, pad=0, kernel=name)


def word_unit_cases(spec: wmma.WmmaBlockSpec, rng: np.random.Generator) -> Iterator[Case]:
    """A block kernel on operands whose stored columns start on 4-byte boundaries but not all on 16-byte
    ones (the copies in 4-byte cp.async units, C written in 4-byte pieces): every matrix one 4-byte word
    past a 16-byte boundary, leading dimensions even (h) or any (hc), every transpose pair, shapes with
    partial edges and one of exactly one block, both interfaces, beta = 0 over NaN."""
    prec, name, pairs = spec.precision, spec.name, PRECISIONS[spec.precision].trans_pairs
    word = 4 // PRECISIONS[prec].element_bytes   # elements per 4-byte word
    shapes = kernel_shapes(spec)[:2] + [(spec.blk_m, spec.blk_n, spec.blk_k)]
    for m, n, k in shapes:
        for ta, tb in pairs:
            alpha, beta = _scalars(rng, prec)
            yield Case(prec, m, n, k, ta, tb, "strided", int(rng.integers(1, 6)), "words", alpha, beta,
                       align=word, offset=word, c_offset=word, kernel=name)
    m, n, k = shapes[1]
    ta, tb = pairs[int(rng.integers(len(pairs)))]
    alpha, beta = _scalars(rng, prec)
    yield Case(prec, m, n, k, ta, tb, "array", 7, "words", alpha, beta, align=word, offset=word, c_offset=word,
               shuffle=True, kernel=name)
    yield Case(prec, m, n, k, "N", "N", "strided", 3, "words-beta0-nan", alpha, 0.0, align=word, offset=word,
               c_offset=word, kernel=name)
    yield Case(prec, m, n, k, "T", "N", "strided", 500, "words-many-blocks", 1.0, 0.5, pad=0, align=word,
               offset=word, c_offset=word, kernel=name)


def general_kernel_cases(names: list[str], rng: np.random.Generator, thorough: bool = True) -> Iterator[Case]:
    big_batch_done = set()
    for name in names:
        spec = wmma.parse_name(name)
        prec = spec.precision
        pairs = PRECISIONS[prec].trans_pairs
        for m, n, k in kernel_shapes(spec):
            batch = lambda: int(rng.integers(1, 6))   # noqa: E731
            for ta, tb in pairs if thorough else pairs[:: max(1, len(pairs) - 1)]:
                alpha, beta = _scalars(rng, prec)
                yield Case(prec, m, n, k, ta, tb, "strided", batch(), "random", alpha, beta, kernel=name)
            ta, tb = pairs[int(rng.integers(len(pairs)))]
            alpha, beta = _scalars(rng, prec)
            yield Case(prec, m, n, k, ta, tb, "array", batch(), "random", alpha, beta, kernel=name)
            yield Case(prec, m, n, k, ta, tb, "strided", batch(), "packed", alpha, beta, pad=0, kernel=name)
            yield Case(prec, m, n, k, ta, tb, "strided", 3, "exact", 1.0, 1.0, kernel=name)
            yield Case(prec, m, n, k, ta, tb, "strided", 3, "beta0-nan", alpha, 0.0, kernel=name)
        if spec.stages:   # the cp.async ring: 16-byte aligned operands, partial chunks at the edges
            for m, n, k in kernel_shapes(spec) + [(spec.blk_m, spec.blk_n, spec.blk_k)]:
                for ta, tb in pairs:
                    alpha, beta = _scalars(rng, prec)
                    yield Case(prec, m, n, k, ta, tb, "strided", int(rng.integers(1, 6)), "random", alpha, beta,
                               align=8, kernel=name)
            yield Case(prec, 37, 45, 29, "N", "T", "strided", 2000, "many-blocks", 1.0, 0.5, pad=0, align=8,
                       kernel=name)
            # A and B aligned, C between 16-byte boundaries: the ring without copying C.
            yield Case(prec, 2 * spec.blk_m, spec.blk_n, 2 * spec.blk_k, "T", "N", "strided", 300, "c-unaligned",
                       1.0, 0.5, pad=0, align=8, c_offset=1, kernel=name)
            if spec.family == "wmma":
                yield from packed_ring_cases(spec, rng)
        if spec.family == "wmmablock":   # operands on 4-byte but not 16-byte boundaries: 4-byte cp.async units
            yield from word_unit_cases(spec, rng)
        if getattr(spec, "wgmma_path", False):   # sm_90a: GEMMs of several 128×BLK_N blocks of C on wgmma
            # (batches of more blocks than the grid has: the blocks step over GEMMs and tiles)
            for m, n, k, batch in ((2 * 128 + 3, 2 * spec.blk_n + 5, 2 * 64 + 1, 30), (256, 256, 256, 5),
                                   (300, 70, 100, 200)):
                alpha, _ = _scalars(rng, prec)
                yield Case(prec, m, n, k, "N", "N", "strided", batch, "wgmma-tiles-beta0-nan", alpha, 0.0, align=8,
                           kernel=name)
        if getattr(spec, "whole_path", False):   # sm_90: rank-k updates of whole GEMMs through the tensor copy engine (beta = 0)
            for m, n, k in ((64, 64, 16), (128, 72, 8), (72, 128, 16), (128, 128, 16)):
                for ta, tb in pairs:   # leading dimensions padded (align = 8): strides of the tensor maps
                    alpha, _ = _scalars(rng, prec)
                    yield Case(prec, m, n, k, ta, tb, "strided", int(rng.integers(1, 6)), "beta0-nan", alpha, 0.0,
                               align=8, kernel=name)
            # several GEMMs per thread block: the ring of stages wraps, the mbarriers change phase
            yield Case(prec, 96, 96, 16, "N", "T", "strided", 2000, "beta0-nan", 1.0, 0.0, pad=0, align=8, kernel=name)
        if prec not in big_batch_done:   # more than 65,535 blocks in the grid, once per precision
            big_batch_done.add(prec)
            yield Case(prec, 3, 3, 3, "N", "T", "strided", 70_001, "batch>65535", 1.0, 0.5, pad=0, kernel=name)


def range_cases(manifest: dict, rng: np.random.Generator) -> Iterator[Case]:
    """Through the C API: each dispatch range of the general kernel at its ends."""
    seen = set()
    for r in manifest.get("wmma", {}).get("dispatch", []):
        prec = r["precision"]
        pairs = PRECISIONS[prec].trans_pairs
        for size in {r["lo"], r["hi"] or r["lo"] + 40}:
            shape = (size, size, size) if r["kind"] == "square" else (size, size, wmma.RANK_K_MAX)
            if (prec, shape) in seen:
                continue
            seen.add((prec, shape))
            ta, tb = pairs[int(rng.integers(len(pairs)))]
            alpha, beta = _scalars(rng, prec)
            yield Case(prec, *shape, ta, tb, "strided", int(rng.integers(1, 4)), "random", alpha, beta)


def passed_over_cases(manifest: dict, rng: np.random.Generator) -> Iterator[Case]:
    """Exact-shape kernels the dispatch passes over for the general kernel, through their own
    launchers (NN and the last transpose pair)."""
    for e in manifest["dispatch"]:
        if not e.get("prefer_general"):
            continue
        prec = e["precision"]
        pairs = PRECISIONS[prec].trans_pairs
        for ta, tb in (pairs[0], pairs[-1]):
            alpha, beta = _scalars(rng, prec)
            yield Case(prec, e["m"], e["n"], e["k"], ta, tb, "strided", int(rng.integers(1, 40)), "random",
                       alpha, beta, kernel=e["kernel"])


def manifest_cases(manifest: dict, rng: np.random.Generator, thorough: bool = True) -> list[Case]:
    names = [k["name"] for k in manifest.get("wmma", {}).get("kernels", [])]
    return (list(general_kernel_cases(names, rng, thorough)) + list(range_cases(manifest, rng))
            + list(passed_over_cases(manifest, rng)))
