"""What every kernel spec shares: how it refuses a bad parameter tuple."""
from __future__ import annotations


class SpecError(ValueError):
    """A tuning tuple that breaks a rule. `rule` names the rule so callers (the sweep's results
    file, the CLI) can record why a variant was refused."""

    def __init__(self, rule: str, message: str):
        super().__init__(f"{rule}: {message}")
        self.rule = rule


class Spec:
    """Base of every kernel spec: subclasses define validate(arch=None), which raises SpecError."""

    def validate(self, arch: str | None = None):
        raise NotImplementedError

    # Whether the kernel copies contiguous matrices through a cp.async ring of 16-byte chunks: the check
    # adds cases at the chunks' edges for such kernels.
    copies_through_ring = False

    def is_valid(self, arch: str | None = None) -> bool:
        try:
            self.validate(arch)
        except SpecError:
            return False
        return True


def require(condition: bool, rule: str, message: str) -> None:
    if not condition:
        raise SpecError(rule, message)


def require_no_local_memory(name: str, arch: str | None) -> None:
    """Refuse a variant on an architecture where ptxas gave it local memory (gemmgen/generator/tuning/
    local_memory.json); the rule is checked only for a given architecture."""
    from .tuning import local_memory_archs

    require(arch is None or arch not in local_memory_archs().get(name, ()), "local memory",
            f"ptxas gave {name} local memory on {arch} (gemmgen/generator/tuning/local_memory.json)")


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def parse_ranges(text: str, low: int, high: int, noun: str, example: str) -> tuple[int, ...]:
    """'1-32', '2,4,8' or '1-8,16' -> the sorted distinct integers, each in low..high.  Errors name
    the `noun` ("size", "tall-skinny n") and show an `example` of the syntax."""
    values: set[int] = set()
    for token in (t.strip() for t in text.split(",")):
        if not token:
            continue
        try:
            if "-" in token:
                lo, hi = (int(x) for x in token.split("-", 1))
                if lo > hi:
                    raise ValueError
                values.update(range(lo, hi + 1))
            else:
                values.add(int(token))
        except ValueError:
            raise ValueError(f"bad {noun} range {token!r}; write e.g. {example}") from None
    bad = sorted(v for v in values if not low <= v <= high)
    if bad:
        raise ValueError(f"{noun} {bad[0]} is outside {low}..{high}")
    return tuple(sorted(values))


def format_ranges(values) -> str:
    """The inverse of parse_ranges: integers -> '1-8,16' (runs of consecutive values), '' for none."""
    values = sorted(values)
    runs = []
    for v in values:
        if runs and v == runs[-1][1] + 1:
            runs[-1][1] = v
        else:
            runs.append([v, v])
    return ",".join(f"{lo}-{hi}" if hi > lo else f"{lo}" for lo, hi in runs)
