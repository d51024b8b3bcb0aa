"""Where a tuning worker's time goes, for the summary of `gemmgen tune --gpus` (harness.distributed):
the seconds each thread spent compiling (build_library) and on the GPU.

A worker of a distributed run holds two pieces of a sweep at once, so that one compiles while the
other is timed; `on_gpu()` is the lock that keeps their timings apart (two kernels timed at once on
one GPU would each measure the other).  In a one-GPU run nothing contends for it."""
from __future__ import annotations

import functools
import threading
import time
from contextlib import contextmanager

_gpu = threading.Lock()
_seconds = threading.local()


def seconds() -> dict[str, float]:
    """This thread's seconds so far, by what it did ("compiling", "on GPU")."""
    return dict(getattr(_seconds, "by_kind", {}))


@contextmanager
def counting(kind: str):
    """Add the time spent inside to this thread's `kind`."""
    start = time.perf_counter()
    try:
        yield
    finally:
        by_kind = _seconds.__dict__.setdefault("by_kind", {})
        by_kind[kind] = by_kind.get(kind, 0.0) + time.perf_counter() - start


def counted(kind: str):
    """A function whose calls count as `kind` (build_library: "compiling")."""
    def wrap(f):
        @functools.wraps(f)
        def counted_call(*args, **kwargs):
            with counting(kind):
                return f(*args, **kwargs)
        return counted_call
    return wrap


@contextmanager
def on_gpu():
    """This process's GPU, to this thread alone while inside (the wait for it is not counted)."""
    with _gpu, counting("on GPU"):
        yield
