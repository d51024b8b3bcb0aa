"""Emit the sources of named small-family kernels (every transpose pair), for build.sh: variants that the default set
does not hold, such as a shape's tuples with and without a knob.

Usage (repository root): python docs/experiments/small_paired_reads/emit.py DIR NAME ..."""
import sys
from pathlib import Path

from gemmgen.generator.emit import kernel_source
from gemmgen.generator.small import SmallSpec

out = Path(sys.argv[1])
out.mkdir(parents=True, exist_ok=True)
for name in sys.argv[2:]:
    (out / f"{name}.cu").write_text(kernel_source(SmallSpec.parse(name), "docs/experiments/small_paired_reads/emit.py"))
