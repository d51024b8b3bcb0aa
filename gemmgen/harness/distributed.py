"""`gemmgen tune --gpus N` and `--scheduler ADDRESS`: one tuning run (harness.tune_run) over several GPUs,
of one host or of several, through Dask distributed (the optional extra `gemmgen[tune]`).

Why Dask distributed and not Ray: the work is a few hundred coarse tasks (a piece of a sweep takes
minutes) whose answers are a few hundred JSON lines, sent from the one process that writes the
results; futures are all that needs.  distributed is pure-Python wheels (about 5 MB with dask and its
dependencies), starts a cluster of worker processes with an environment each (a GPU each, through
CUDA_VISIBLE_DEVICES), and `dask scheduler` / `dask worker` join other hosts with nothing more.  Ray
would bring a binary wheel of about 70 MB with an object store and a GPU scheduler of its own that
this work has no use for.

What is split (tune_plan.where says it for every stage, and `--plan` prints it): every stage that
times on a GPU.  The small family's sweeps are cut into pieces of whole shapes (tune_run.CHUNK
variants), which a worker compiles and times on its GPU.  The wmma and tall-skinny stages are compiled
here, one library each in the results folder (which the workers share), and timed in pieces: the wmma
sweep's check a few dozen variants a piece, its stage 1 and stage 2 a point a piece (stage 2, which
takes stage 1's best, once stage 1 is done), its final stage a point a piece; the tall-skinny sweep a
kernel family, precision and n a piece, then its cut-off in k a precision and n a piece.  A worker
writes a piece's rows to a file of its own and returns them.  The client (the `gemmgen tune` process)
appends each piece's rows to the results file in the pieces' order, so the file, the state, the
budget's stop, the resume and the summary are those of a one-GPU run; pieces the results file already
holds are never submitted.  The tables are compiled and written on the client (nvcc, no GPU), and the
CPU is tuned on the client, one timing at a time.

Workers: one per GPU.  On one host (`--gpus`) dask-cuda's LocalCUDACluster where it is installed (it
also binds each worker to the CPU cores near its GPU); else a SpecCluster of our own of one Nanny per
GPU whose environment sets CUDA_VISIBLE_DEVICES, which is what LocalCUDACluster does for the GPUs
themselves, without dask-cuda's dependencies (numba, pandas, pynvml).  Each worker has two threads:
one piece compiles while the other is timed (core.busy.on_gpu keeps two timings off one GPU at a
time), and compiles with its share of the host's cores (cores / workers on the host).  The build
folder under the results folder is shared: objects are keyed by content (build.object_key: compiler
version, flags, source and headers) and renamed into place, so a worker reuses what another built.

The budget: the client submits no piece once it is spent, and each piece stops between variants at
the budget's deadline by the wall clock (so hosts' clocks must agree, as NTP keeps them).

The summary adds, per worker (GPU), its seconds compiling, on the GPU and the GPU's idle time, and the
run's wall time."""
from __future__ import annotations

import contextlib
import functools
import os
import tempfile
import time
from collections import defaultdict
from dataclasses import dataclass, replace
from pathlib import Path
from urllib.parse import urlparse

import click

from gemmgen.harness import tune_plan, tune_run
from gemmgen.harness.core import busy

INSTALL = 'several GPUs need Dask distributed: pip install "gemmgen[tune]"'
CONNECT_SECONDS = 10    # how long `--scheduler` waits for the scheduler, and then for a worker
THREADS = 2             # pieces a worker holds at once: one compiles while the other is timed


def parse_gpus(text: str, count: int) -> list[int]:
    """--gpus: 'all', a number N (the first N GPUs) or indices '0,2' -> the GPUs' indices among the
    `count` this process sees; ValueError with a one-line reason."""
    text = text.strip().lower()
    if text == "all":
        return list(range(count))
    try:
        if "," in text:
            ids = [int(x) for x in text.split(",") if x.strip()]
        else:
            ids = list(range(int(text)))
    except ValueError:
        raise ValueError(f"bad --gpus {text!r}: write all, a number of GPUs (2) or their indices (0,2)") from None
    if not ids or len(set(ids)) != len(ids) or min(ids) < 0:
        raise ValueError(f"bad --gpus {text!r}: give one GPU or more, each once")
    if max(ids) >= count:
        raise ValueError(f"--gpus {text}: this machine has {count} GPU{'s' if count != 1 else ''} "
                         f"(indices 0-{count - 1})" if count else f"--gpus {text}: this machine has no CUDA GPU")
    return ids


def gpu_count() -> int:
    """The CUDA GPUs this process sees (0 without CuPy or a GPU)."""
    try:
        import cupy

        return cupy.cuda.runtime.getDeviceCount()
    except Exception:
        return 0


def worker_gpu() -> tuple[str, str]:
    """On a worker: (arch, device name) of its GPU (tests put a fake in its place)."""
    from gemmgen.harness.check import device_arch

    return device_arch()


def _import_distributed():
    try:
        import distributed
    except ImportError:
        raise click.ClickException(INSTALL) from None
    return distributed


def start_local(gpus: list[int]):
    """A cluster of one worker process per GPU of this host (see the module docstring)."""
    import logging

    distributed = _import_distributed()
    # CUDA_VISIBLE_DEVICES of this process, where set, names the GPUs that `--gpus` counts in
    visible = [d for d in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if d.strip()]
    devices = [visible[i] if i < len(visible) else str(i) for i in gpus]
    try:
        from dask_cuda import LocalCUDACluster
    except ImportError:
        workers = {f"gpu{device}": {"cls": distributed.Nanny, "options": {
            "nthreads": THREADS, "env": {"CUDA_VISIBLE_DEVICES": device}, "memory_limit": 0}}
            for device in devices}
        # the scheduler on this host alone, at free ports (not Dask's defaults, which a cluster of the
        # user's may hold)
        return distributed.SpecCluster(workers=workers, scheduler={"cls": distributed.Scheduler, "options": {
            "host": "127.0.0.1", "port": 0, "dashboard_address": ":0", "dashboard": False}},
            silence_logs=logging.ERROR)
    return LocalCUDACluster(CUDA_VISIBLE_DEVICES=",".join(devices), threads_per_worker=THREADS, host="127.0.0.1",
                            dashboard_address=":0", silence_logs=logging.ERROR)


def connect(address: str | None, cluster=None):
    """A client of `cluster`, or of the running scheduler at `address` (`--scheduler`), with a
    worker at least; a one-line ClickException where none answers in CONNECT_SECONDS."""
    distributed = _import_distributed()
    if cluster is not None:
        return distributed.Client(cluster)
    parsed = urlparse(address if "://" in address else f"tcp://{address}")
    if parsed.scheme not in ("tcp", "tls") or not parsed.hostname or not parsed.port:
        raise click.ClickException(f"bad --scheduler {address!r}: write tcp://HOST:PORT")
    try:
        client = distributed.Client(address, timeout=CONNECT_SECONDS)
    except (OSError, TimeoutError) as err:
        raise click.ClickException(f"--scheduler {address}: no scheduler answered in {CONNECT_SECONDS} s "
                                   f"({type(err).__name__})") from None
    try:
        client.wait_for_workers(1, timeout=CONNECT_SECONDS)
    except (OSError, TimeoutError):
        client.close()
        raise click.ClickException(f"--scheduler {address}: the scheduler has no worker "
                                   f"(none joined in {CONNECT_SECONDS} s)") from None
    return client


def runner(cluster: contextlib.ExitStack, gpus: str, gpus_given: bool, scheduler: str | None):
    """The runner of `--gpus` (more than one; `gpus_given`: not its default) or `--scheduler`, its cluster
    and client closed with `cluster`; None for one GPU, a run without Dask.  Bad options: a one-line
    ClickException; no GPU: tune_run.NoGpu."""
    if scheduler is not None:
        if gpus_given:
            raise click.ClickException("--gpus or --scheduler, not both (a cluster's GPUs are its workers)")
        return Workers(cluster.enter_context(connect(scheduler)))
    if not gpus_given:
        return None
    count = gpu_count()
    if not count:
        raise tune_run.NoGpu
    try:
        ids = parse_gpus(gpus, count)
    except ValueError as err:
        raise click.ClickException(str(err)) from None
    if ids == [0]:
        return None
    local = cluster.enter_context(start_local(ids))
    return Workers(cluster.enter_context(connect(None, local)))


@dataclass(frozen=True)
class Deadline:
    """A worker's stop(): the budget's deadline by the wall clock (None: never)."""
    at: float | None

    def __call__(self) -> bool:
        return self.at is not None and time.time() >= self.at


def _share(jobs: int, hosts: dict[str, int]) -> int:
    """On a worker: nvcc jobs, `jobs` where given, else its host's cores shared among the workers there."""
    if jobs:
        return jobs
    from distributed import get_worker

    here = urlparse(get_worker().address).hostname
    return max(1, (os.cpu_count() or 1) // hosts.get(here, 1))


def run_piece(work, piece: list, stop: Deadline, jobs: int, hosts: dict[str, int]) -> dict:
    """On a worker: compile and time one piece (`work`, as results.in_turn calls it) into a results
    file of its own; its rows (the lines as written) go back to the client, which appends them."""
    from distributed import get_worker

    before = busy.seconds()
    with tempfile.TemporaryDirectory(prefix="gemmgen-piece-") as folder:
        rows = Path(folder) / "rows.jsonl"
        done = work(piece, results_path=rows, jobs=_share(jobs, hosts), stop=stop)
        lines = rows.read_text().splitlines(keepends=True) if rows.exists() else []
    return {"done": done, "lines": lines, "worker": get_worker().address, **_spent(before)}


def _spent(before: dict[str, float]) -> dict[str, float]:
    after = busy.seconds()
    return {kind: after.get(kind, 0.0) - before.get(kind, 0.0) for kind in ("compiling", "on GPU")}


class Workers(tune_run.GpuRunner):
    """The stages of a run on a cluster's workers (a GPU each), as tune_plan.where places them."""

    def __init__(self, client):
        self.client = client
        try:
            found = client.run(worker_gpu)   # {worker address: (arch, device)}, every worker's
        except Exception as err:   # a worker without a GPU (or CuPy)
            raise click.ClickException(f"a worker found no usable GPU: {str(err).splitlines()[0][:200]}") from None
        self.hosts: dict[str, int] = defaultdict(int)   # workers per host, who share its cores
        for address in found:
            self.hosts[urlparse(address).hostname] += 1
        kinds = sorted({tuple(v) for v in found.values()})
        if len(kinds) > 1:
            raise click.ClickException("the workers' GPUs differ (" + "; ".join(f"{d} ({a})" for a, d in kinds)
                                       + "): a results folder holds the tuning of one device")
        super().__init__(found=kinds[0])
        self.seconds: dict[str, dict[str, float]] = {w: {"compiling": 0.0, "on GPU": 0.0} for w in found}
        self.compiled_here = busy.seconds().get("compiling", 0.0)   # (this thread's so far: not this run's)

    def run(self, stage: tune_plan.Stage, ctx: tune_run.Context) -> tune_run.Outcome:
        place = tune_plan.where(stage)
        # the folder (and the build folder in it) as the workers see it: by its full path, as their
        # working folder is not this one's
        shared = ctx.results_dir.resolve()
        if place in tune_plan.SPLIT:
            return super().run(stage, replace(ctx, results_dir=shared,
                                              spread=functools.partial(self.spread, deadline=ctx.deadline())))
        return super().run(stage, ctx)   # nvcc or the CPU: on this machine

    def spread(self, pieces, work, results: Path, jobs: int, stop, deadline: float | None) -> int:
        """results.in_turn's pieces on the workers, THREADS a worker in flight; each piece's rows are
        appended to `results` in the pieces' order."""
        from distributed import as_completed

        pieces = list(pieces)
        limit = THREADS * len(self.seconds)
        submitted, written, done = 0, 0, 0
        finished: dict[int, dict] = {}
        index = {}
        failed: list[BaseException] = []
        flow = as_completed()

        def submit() -> None:
            nonlocal submitted
            while submitted < len(pieces) and submitted - written - len(finished) < limit and not stop() \
                    and not failed:
                future = self.client.submit(run_piece, work, pieces[submitted], Deadline(deadline), jobs,
                                            dict(self.hosts), pure=False)
                index[future] = submitted
                flow.add(future)
                submitted += 1

        def write(i: int) -> None:
            nonlocal done
            answer = finished.pop(i)
            with results.open("a") as f:
                f.writelines(answer["lines"])
            done += answer["done"]

        submit()
        try:
            for future in flow:
                i = index.pop(future)
                try:
                    finished[i] = self._account(future.result())
                except Exception as err:   # the pieces in flight go on to their end, then the error
                    failed.append(err)
                    continue
                while written in finished:   # in the pieces' order
                    write(written)
                    written += 1
                submit()
        finally:
            for future in index:   # (^C)
                future.cancel()
            for i in sorted(finished):   # an error or ^C: the pieces done beyond a missing one
                write(i)
        if failed:
            raise failed[0]
        return done

    def _account(self, answer: dict) -> dict:
        spent = self.seconds.setdefault(answer["worker"], {"compiling": 0.0, "on GPU": 0.0})
        for kind in spent:
            spent[kind] += answer[kind]
        return answer

    def report(self, wall: float) -> list[str]:
        lines = [f"# workers ({len(self.seconds)} GPUs of {self.device}): time compiling, on the GPU, "
                 f"the GPU idle; wall time {tune_run.duration(wall)}",
                 f"  {'this machine':<28} compiling {tune_run.duration(busy.seconds().get('compiling', 0.0) - self.compiled_here):>7}  "
                 "(the tall-skinny library, the tables' checks)"]
        for worker, spent in sorted(self.seconds.items()):
            lines.append(f"  {worker:<28} compiling {tune_run.duration(spent['compiling']):>7}  "
                         f"on GPU {tune_run.duration(spent['on GPU']):>7}  "
                         f"idle {tune_run.duration(max(wall - spent['on GPU'], 0.0)):>7}")
        return lines

