"""NumPy checks of the cpu family through its C API.

The cases are the GPU check's (harness.core.cases: every transpose pair and both interfaces with
random data, a bit-exact small-integer case, beta = 0 over NaN, alpha = 0, k = 0, batch > 65,535),
with leading dimensions and strides larger than the matrices and poisoned padding that must come
back untouched.  Two executors run them:
- `CtypesExecutor`: the library built for this machine, loaded with ctypes, one ISA forced with
  gemmgen_cpu_set_isa() (AVX-512, AVX2 and the portable fallback on one x86-64 machine);
- `RunnerExecutor`: all cases written to one file and run by gemmgen/harness/cpu/cpu_runner.cpp, under
  qemu-user for AArch64 (NEON).
Inputs and verdicts are prepared identically for both, in NumPy."""
from __future__ import annotations

import ctypes
import functools
import os
import platform
import subprocess
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Callable, Iterable, Iterator

import numpy as np

from gemmgen.generator.cpu import CPU_PRECISIONS
from gemmgen.generator.precision import PRECISIONS

from gemmgen.harness.core import reference as ref
from gemmgen.harness.core.api import array_argtypes, scalar, strided_argtypes
from gemmgen.harness.core.cases import (UNTOUCHED_KIND, Case, CaseResult, Prepared, _scalars, default_cases, edge_cases, prepare,
                          verdict)

PRECISION_CODE = {p: i for i, p in enumerate(CPU_PRECISIONS)}
NOT_GENERATED = 1


# ---- executors -------------------------------------------------------------------------------------
_i, _ll, _p = ctypes.c_int, ctypes.c_longlong, ctypes.c_void_p


class CpuLibrary:
    """ctypes binding of libgemmgen_cpu.so (std::complex by value is passed as a two-member struct:
    the same registers on x86-64 System V and AArch64)."""

    def __init__(self, path: Path):
        self.lib = ctypes.CDLL(str(path))
        for p in CPU_PRECISIONS:
            f = getattr(self.lib, f"gemmgen_cpu_{p}gemm_batched_strided")
            f.restype, f.argtypes = _i, strided_argtypes(p, stream=False)
            g = getattr(self.lib, f"gemmgen_cpu_{p}gemm_batched")
            g.restype, g.argtypes = _i, array_argtypes(p, stream=False)
        for name, res, args in (
                ("gemmgen_cpu_isa", ctypes.c_char_p, []),
                ("gemmgen_cpu_set_isa", _i, [ctypes.c_char_p]),
                ("gemmgen_cpu_supports_isa", _i, [ctypes.c_char_p]),
                ("gemmgen_cpu_is_generated", _i, [ctypes.c_char_p, _i, _i, _i]),
                ("gemmgen_cpu_selected_kernel", ctypes.c_char_p, [ctypes.c_char_p, _i, _i, _i]),
                ("gemmgen_cpu_kernel_count", _i, []),
                ("gemmgen_cpu_kernel_name", ctypes.c_char_p, [_i]),
                ("gemmgen_cpu_set_num_threads", None, [_i]),
                ("gemmgen_cpu_get_num_threads", _i, []),
                ("gemmgen_cpu_first_touch", _i, [_p, _ll, _i])):
            f = getattr(self.lib, name)
            f.restype, f.argtypes = res, args

    def strided(self, p, ta, tb, m, n, k, alpha, A, lda, sa, B, ldb, sb, beta, C, ldc, sc, batch) -> int:
        f = getattr(self.lib, f"gemmgen_cpu_{p}gemm_batched_strided")
        return f(ta.encode(), tb.encode(), m, n, k, scalar(p, alpha), A, lda, sa, B, ldb, sb, scalar(p, beta),
                 C, ldc, sc, batch)

    def array(self, p, ta, tb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc, batch) -> int:
        f = getattr(self.lib, f"gemmgen_cpu_{p}gemm_batched")
        return f(ta.encode(), tb.encode(), m, n, k, scalar(p, alpha), A, lda, B, ldb, scalar(p, beta), C, ldc, batch)

    def isa(self) -> str:
        return self.lib.gemmgen_cpu_isa().decode()

    def set_isa(self, isa: str) -> bool:
        return self.lib.gemmgen_cpu_set_isa(isa.encode()) == 0

    def supports(self, isa: str) -> bool:
        return bool(self.lib.gemmgen_cpu_supports_isa(isa.encode()))

    def selected_kernel(self, p: str, m: int, n: int, k: int) -> str | None:
        name = self.lib.gemmgen_cpu_selected_kernel(p.encode(), m, n, k)
        return name.decode() if name else None

    def kernel_names(self) -> list[str]:
        return [self.lib.gemmgen_cpu_kernel_name(i).decode() for i in range(self.lib.gemmgen_cpu_kernel_count())]


def byte_offset(case: Case) -> int:
    """Bytes past a 16-byte boundary where the executors place A, B and C: 0, or for the
    "misaligned" cases the smallest legal offset, the alignment of the real type (4 for s and c:
    std::complex<float> needs only 4; 8 for d and z)."""
    return (4 if case.precision in ("s", "c") else 8) if "misaligned" in case.kind else 0


def _placed(stored: np.ndarray, offset: int) -> np.ndarray:
    """A copy of `stored` that starts `offset` bytes past a 16-byte boundary."""
    raw = np.empty(stored.nbytes + 16 + offset, dtype=np.uint8)
    start = (-raw.ctypes.data) % 16 + offset
    out = raw[start:start + stored.nbytes].view(stored.dtype)
    out[...] = stored
    return out


def _pointers(buf: np.ndarray, stride: int, batch: int) -> np.ndarray:
    return (np.uint64(buf.ctypes.data) + np.arange(batch, dtype=np.uint64) * np.uint64(stride * buf.itemsize)).astype(np.uint64)


class CtypesExecutor:
    def __init__(self, lib: CpuLibrary, isa: str):
        self.lib, self.isa = lib, isa

    def run(self, prepared: list[Prepared]) -> list[tuple[int, np.ndarray]]:
        if not self.lib.set_isa(self.isa):
            raise RuntimeError(f"this CPU has no {self.isa}")
        try:
            out = []
            for pr in prepared:
                case = pr.case
                a, b, c = (_placed(x, byte_offset(case)) for x in (pr.a, pr.b, pr.c))
                args = (case.precision, case.transa, case.transb, case.m, case.n, case.k, case.alpha)
                if case.interface == "strided":
                    rc = self.lib.strided(*args, a.ctypes.data, pr.lda, pr.sa, b.ctypes.data, pr.ldb, pr.sb,
                                          case.beta, c.ctypes.data, pr.ldc, pr.sc, case.batch)
                else:
                    pa, pb, pc = (_pointers(x, s, case.batch) for x, s in ((a, pr.sa), (b, pr.sb), (c, pr.sc)))
                    rc = self.lib.array(*args, pa.ctypes.data, pr.lda, pb.ctypes.data, pr.ldb, case.beta,
                                        pc.ctypes.data, pr.ldc, case.batch)
                out.append((rc, c.copy()))
            return out
        finally:
            self.lib.set_isa("auto")


HEADER = np.dtype([(name, "<i4") for name in ("precision", "interface", "transa", "transb", "m", "n", "k",
                                               "lda", "ldb", "ldc", "batch", "offset")]
                  + [(name, "<i8") for name in ("sa", "sb", "sc", "la", "lb", "lc")]
                  + [(name, "<f8") for name in ("are", "aim", "bre", "bim")], align=True)


class RunnerExecutor:
    """All cases through the check runner (under `prefix`, e.g. qemu-aarch64), split over
    `processes` runs of it at once, each taking every processes-th case (the emulator starts once
    per process, and the large cases spread evenly); `env`: variables added to the runner's
    environment (e.g. sanitizer options)."""

    def __init__(self, runner: Path, isa: str, prefix: tuple[str, ...] = (), timeout: float = 1800,
                 env: dict[str, str] | None = None, processes: int = 1):
        self.runner, self.isa, self.prefix, self.timeout = runner, isa, prefix, timeout
        self.env = {**os.environ, **env} if env else None
        self.processes = max(1, processes)

    def run(self, prepared: list[Prepared]) -> list[tuple[int, np.ndarray]]:
        n = min(self.processes, max(1, len(prepared)))
        out: list = [None] * len(prepared)
        with ThreadPoolExecutor(max_workers=n) as pool:
            for i, results in enumerate(pool.map(self._run_one, [prepared[i::n] for i in range(n)])):
                out[i::n] = results
        return out

    def _run_one(self, prepared: list[Prepared]) -> list[tuple[int, np.ndarray]]:
        with tempfile.TemporaryDirectory(prefix="gemmgen_cpu_") as tmp:
            cases, results = Path(tmp) / "cases.bin", Path(tmp) / "out.bin"
            with open(cases, "wb") as f:
                for pr in prepared:
                    c = pr.case
                    h = np.zeros(1, HEADER)
                    h[0] = (PRECISION_CODE[c.precision], 0 if c.interface == "strided" else 1, ord(c.transa),
                            ord(c.transb), c.m, c.n, c.k, pr.lda, pr.ldb, pr.ldc, c.batch, byte_offset(c),
                            pr.sa, pr.sb, pr.sc,
                            pr.a.size, pr.b.size, pr.c.size, complex(c.alpha).real, complex(c.alpha).imag,
                            complex(c.beta).real, complex(c.beta).imag)
                    f.write(h.tobytes())
                    for x in (pr.a, pr.b, pr.c):
                        f.write(x.tobytes())
            proc = subprocess.run([*self.prefix, str(self.runner), str(cases), str(results), self.isa],
                                  capture_output=True, text=True, timeout=self.timeout, env=self.env)
            if proc.returncode != 0:
                raise RuntimeError(f"runner failed ({proc.returncode}): {proc.stderr[-2000:]}")
            if f"isa {self.isa}" not in proc.stdout:   # the runner says which ISA really ran
                raise RuntimeError(f"runner did not run {self.isa}: {proc.stdout.strip()}")
            raw = results.read_bytes()
        out, pos = [], 0
        for pr in prepared:
            rc = int(np.frombuffer(raw, "<i4", 1, pos)[0])
            pos += 4
            c = np.frombuffer(raw, pr.c.dtype, pr.c.size, pos).copy()
            pos += pr.c.nbytes
            out.append((rc, c))
        return out


# ---- the case lists and a whole run -----------------------------------------------------------------
def accumulate_cases(shapes_by_precision: dict[str, list[tuple[int, int, int]]],
                     rng: np.random.Generator) -> Iterator[Case]:
    """The kernels' own paths for alpha = 1: C += A·B on a packed strided batch (the fast loop,
    accumulators started from C) long enough that the prefetch of later entries runs, the same on
    padded leading dimensions, and alpha = 1 with another beta (accumulators started from beta·C)
    through both interfaces and a random transpose pair."""
    for prec, shapes in shapes_by_precision.items():
        pairs = PRECISIONS[prec].trans_pairs
        for (m, n, k) in shapes:
            yield Case(prec, m, n, k, "N", "N", "strided", 45, "accumulate", 1.0, 1.0, pad=0)
            yield Case(prec, m, n, k, "N", "N", "strided", 12, "accumulate", 1.0, 1.0)
            _, beta = _scalars(rng, prec)
            ta, tb = pairs[int(rng.integers(len(pairs)))]
            for interface in ("strided", "array"):
                yield Case(prec, m, n, k, ta, tb, interface, 19, "alpha1", 1.0, beta)


def misaligned_cases(shapes_by_precision: dict[str, list[tuple[int, int, int]]],
                     rng: np.random.Generator) -> Iterator[Case]:
    """Packed batches whose A, B and C start at the least aligned legal address (byte_offset):
    the partial vectors of odd sizes, the whole-2 x 2 path (C += A·B) and the general loop, through
    both interfaces; e.g. s 3x3x3 (alpha 2, beta 1) and c 1x1x1 at 4 bytes past 16."""
    for prec, shapes in shapes_by_precision.items():
        pairs = PRECISIONS[prec].trans_pairs
        for (m, n, k) in shapes:
            yield Case(prec, m, n, k, "N", "N", "strided", 5, "misaligned-accumulate", 1.0, 1.0, pad=0)
            for interface in ("strided", "array"):
                ta, tb = pairs[int(rng.integers(len(pairs)))]
                alpha, beta = _scalars(rng, prec)
                yield Case(prec, m, n, k, ta, tb, interface, 3, "misaligned", alpha, beta, pad=0)


def quick_return_cases(precisions: Iterable[str]) -> Iterator[Case]:
    """C = beta·C with beta = 1 (alpha = 0 or k = 0) returns at once, C untouched bit for bit, as
    reference BLAS does (the case engine's UNTOUCHED_KIND: C holds (Inf, 0), which a complex
    multiplication by 1 would turn into (Inf, NaN)); both interfaces, besides edge_cases' two."""
    for prec in precisions:
        for interface in ("strided", "array"):
            yield Case(prec, 2, 2, 2, "N", "N", interface, 2, "alpha0-" + UNTOUCHED_KIND, 0.0, 1.0)
            yield Case(prec, 3, 2, 0, "N", "N", interface, 2, "k0-" + UNTOUCHED_KIND, 1.0, 1.0)


def cases_for(shapes_by_precision: dict[str, list[tuple[int, int, int]]], rng: np.random.Generator,
              thorough: bool = True) -> list[Case]:
    # The GPU's misaligned-batch cases (`offset` elements into a GPU buffer) are replaced by
    # misaligned_cases, which places the host arrays themselves.
    precisions = [p for p in CPU_PRECISIONS if p in shapes_by_precision]
    cases = [c for c in default_cases(shapes_by_precision, rng, thorough) if not c.offset]
    cases += list(accumulate_cases(shapes_by_precision, rng))
    cases += list(misaligned_cases(shapes_by_precision, rng))
    cases += list(edge_cases(precisions))
    cases += list(quick_return_cases(precisions))
    return cases


def prepare_all(cases: Iterable[Case], seed: int = 2026) -> list[Prepared]:
    """The cases' inputs, drawn in order from one generator seeded with `seed`."""
    rng = np.random.default_rng(seed)
    return [prepare(c, rng) for c in cases]


def run_checks(executor, cases: Iterable[Case], seed: int = 2026, note: str = "",
               prepared: list[Prepared] | None = None) -> list[CaseResult]:
    """`prepared`: prepare_all(cases, seed), where several executors check the same cases (drawing
    the inputs once instead of once per ISA; the data are the same)."""
    if prepared is None:
        prepared = prepare_all(cases, seed)
    return [verdict(pr, rc, c, note) for pr, (rc, c) in zip(prepared, executor.run(prepared))]


def check_large_stride(lib: CpuLibrary, prec: str = "s", n: int = 4) -> CaseResult:
    """Two GEMMs whose second matrices start past element 2^31 (64-bit offsets).  The buffers are
    calloc'd by NumPy, so only the pages actually written are backed by memory."""
    rng = np.random.default_rng(7)
    stride = 2**31 + 64
    dtype = ref.host_dtype(prec)
    bufs = {name: np.zeros(stride + n * n, dtype=dtype) for name in "ABC"}
    vals = {}
    for name, buf in bufs.items():
        v = ref.random_values(rng, prec, 2 * n * n).reshape(2, n, n)
        vals[name] = v
        for i in range(2):
            buf[i * stride:i * stride + n * n] = ref.to_storage(prec, v[i].T.reshape(-1))
    rc = lib.strided(prec, "N", "N", n, n, n, 1.0, bufs["A"].ctypes.data, n, stride, bufs["B"].ctypes.data, n,
                     stride, 1.0, bufs["C"].ctypes.data, n, stride, 2)
    got = np.stack([ref.from_storage(prec, bufs["C"][i * stride:i * stride + n * n]).reshape(n, n).T
                    for i in range(2)])
    a, b, c0 = vals["A"], vals["B"], vals["C"]
    expected = ref.reference("N", "N", 1.0, a, b, 1.0, c0)
    err = float(np.max(ref.relative_errors(got, expected, 1.0, a, b, 1.0, c0)))
    bound = ref.error_bound(prec, n)
    return CaseResult(prec, n, n, n, "N", "N", "strided", 2, "stride>2^31", rc, err, bound, True, None,
                      rc == 0 and err <= bound, f"stride {stride} elements, isa {lib.isa()}")


def shapes_from_manifest(manifest: dict) -> dict[str, list[tuple[int, int, int]]]:
    shapes: dict[str, list] = {}
    for kern in manifest.get("cpu_kernels", []):
        lst = shapes.setdefault(kern["precision"], [])
        shape = (kern["m"], kern["n"], kern["k"])
        if shape not in lst:
            lst.append(shape)
    return {p: sorted(shapes[p]) for p in CPU_PRECISIONS if p in shapes}


def summarize(results: list[CaseResult]) -> Iterator[str]:
    failed = [r for r in results if not r.passed]
    for prec in CPU_PRECISIONS:
        mine = [r for r in results if r.precision == prec]
        if not mine:
            continue
        worst = max((r.max_error / r.bound for r in mine if r.bound > 0 and r.max_error == r.max_error), default=0.0)
        yield f"{prec:>2}: {sum(r.passed for r in mine)} passed, {sum(not r.passed for r in mine)} failed; " \
              f"largest error/bound {worst:.3g}"
    for r in failed[:30]:
        yield (f"FAIL {r.precision} {r.m}x{r.n}x{r.k} {r.transa}{r.transb} {r.interface} {r.kind} batch {r.batch}: "
               f"rc {r.rc}, err {r.max_error:.3g} (bound {r.bound:.3g}), untouched {r.untouched_ok}, "
               f"exact {r.exact_ok} {r.note}")


def checks_once(folder: Path, binary: Path, executor, cases: list, label: str, recheck: bool = False,
                echo=print, inputs: Callable[[], list[Prepared]] | None = None) -> list[CaseResult]:
    """run_checks, unless the same cases already all passed on a binary of the same bytes under the
    same harness (core.cache.passed_before): then their recorded results.  A run with a failure is not
    recorded, so it runs again.  `inputs`: gives prepare_all(cases), drawn once for every ISA (and
    not at all where every ISA's checks passed before)."""
    import json as _json

    from gemmgen.harness.core.cache import passed_before

    record = passed_before(folder, binary, label, cases)
    if record.exists() and not recheck:
        results = [CaseResult(**{**r, "max_error": float("nan") if r["max_error"] is None else r["max_error"]})
                   for r in _json.loads(record.read_text())]
        echo(f"cpu: {label}: {len(results)} checks passed on an identical build before, not run again "
             "(--recheck runs them)")
        return results
    results = run_checks(executor, cases, note=label, prepared=inputs() if inputs else None)
    if all(r.passed for r in results):
        record.parent.mkdir(parents=True, exist_ok=True)
        record.write_text(_json.dumps([r.to_json() for r in results]))
    return results


def run_cpu_check(gen_dir: Path, build_dir: Path, quick: bool = False, report: Path | None = None,
                  echo=print, recheck: bool = False) -> int:
    """`gemmgen check`'s CPU step: build the set's CPU kernels with g++ (-Werror, every ISA), run
    every check on each ISA this machine runs (ctypes), and NEON under qemu-aarch64 where the cross
    compiler and qemu-user are installed.  Checks that all passed on an identical build are reported,
    not run again, unless `recheck` (checks_once)."""
    import json as _json

    from gemmgen.harness.cpu import build as cpu_build

    manifest = _json.loads((gen_dir / "manifest.json").read_text())
    shapes = shapes_from_manifest(manifest)
    if not shapes:
        echo("cpu: no CPU kernels in this set")
        return 0
    cases = cases_for(shapes, np.random.default_rng(20261122), thorough=not quick)
    inputs = functools.cache(lambda: prepare_all(cases))   # the same inputs for every ISA, drawn once
    results: list[CaseResult] = []
    x86 = platform.machine() in ("x86_64", "AMD64")
    native_isas = ["generic", "avx2", "avx512"] if x86 else ["generic", "neon"]
    cores = os.cpu_count() or 1
    # One pool compiles both builds, the native one first: the AArch64 units keep the cores busy
    # while the native library is checked.
    pool = ThreadPoolExecutor(max_workers=cores)
    try:
        native = cpu_build.start_build(gen_dir, build_dir / "cpu_native", isas=native_isas,
                                       unity=cpu_build.UNITY_SOURCES, pool=pool)
        cross = None
        if x86 and cpu_build.AARCH64.available():
            cross = cpu_build.start_build(gen_dir, build_dir / "cpu_aarch64", cpu_build.AARCH64, isas=["generic", "neon"],
                                          link="runner", unity=cpu_build.UNITY_SOURCES, pool=pool)
        build = native.result()
        lib = CpuLibrary(build.output)
        echo(f"cpu: compiled {len(cpu_build.cpu_sources(gen_dir, native_isas))} sources ({', '.join(native_isas)}) "
             f"in {len(build.objects)} translation units with -Werror")
        for isa in native_isas:
            if not lib.supports(isa):
                echo(f"cpu: this CPU has no {isa}: compiled, not run")
                continue
            results += checks_once(build_dir / "cpu_native", build.output, CtypesExecutor(lib, isa), cases, isa,
                                   recheck, echo, inputs)
            echo(f"cpu: {isa} checked")
        if x86:
            # 64-bit offsets on a square of the set (s 4x4x4 where the set has it: the default set)
            squares = [(p, m) for p, lst in shapes.items() for m, n, k in lst if m == n == k]
            if squares:
                results.append(check_large_stride(lib, *(("s", 4) if ("s", 4) in squares else squares[0])))
            if cross is not None:
                runner = cross.result().output
                # Nothing compiles any more: the emulator runs on every core.
                executor = RunnerExecutor(runner, "neon", cpu_build.AARCH64.run_prefix, processes=cores)
                results += checks_once(build_dir / "cpu_aarch64", runner, executor, cases, "neon (qemu)",
                                       recheck, echo, inputs)
                echo("cpu: neon checked under qemu-aarch64")
            else:
                echo("cpu: aarch64-linux-gnu-g++ or qemu-aarch64 missing: NEON not checked")
    finally:
        pool.shutdown(cancel_futures=True)   # a failed build does not wait for the other's compiles
    for line in summarize(results):
        echo(line)
    failed = [r for r in results if not r.passed]
    if report:
        report.parent.mkdir(parents=True, exist_ok=True)
        report.write_text(_json.dumps({"cpu": platform.processor() or platform.machine(),
                                       "generated_with": manifest["command"],
                                       "passed": len(results) - len(failed), "failed": len(failed),
                                       "results": [r.to_json() for r in results]}, indent=1) + "\n")
    echo(f"cpu: {len(results) - len(failed)} passed, {len(failed)} failed")
    return 1 if failed else 0
