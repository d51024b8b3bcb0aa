"""The kernel families, declared once: what each one's emitted source is made from and how the rest of
gemmgen treats it.

A family here is a kind of CUDA kernel with its own spec class (the `family` attribute of the spec
and the prefix of its names, e.g. small_d_m4n4k4_...).  Emission (source path and template, the
transpose pairs a source launches), the CMake groups (GEMMGEN_FAMILIES), manifest.json's kernel
entries, the C API binding of the harness (whether a launcher takes m, n, k) and the tuners look a
family up here instead of testing names.  Adding a family is its spec module, its templates and one
entry below.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from . import small, tallskinny, wmma
from .spec import SpecError


@dataclass(frozen=True)
class KernelFamily:
    name: str                 # the spec's `family`, the names' prefix and the source folder src/<name>/
    # The CMake family that builds it (GEMMGEN_FAMILIES), which is also the section of the tuning table
    # that chooses its kernels: small, wmma, tallskinny.
    group: str
    template: str             # the template of one variant's source
    parse: Callable           # kernel name -> spec
    any_shape: bool           # its launchers take m, n, k (otherwise the shape is the kernel's own)
    # One kernel per stored layout pair serves 'T' and 'C' (conjugation at run time): a complex variant
    # compiles 4 transpose kernels instead of 9.
    conjugate_at_run_time: bool
    # What manifest.json says of one of its kernels beside name, family and precision (spec attributes).
    json_fields: tuple[str, ...]
    tallskinny: bool = False  # launched per (op(A), op(B)) of NN, NT, TN, TT with m, n, k (TSM2/ISM2/TSMMA)

    def kernel_json(self, spec) -> dict:
        """A kernel's entry in manifest.json."""
        return {"name": spec.name, "family": spec.family, "precision": spec.precision,
                **{field: getattr(spec, field) for field in self.json_fields}}


# manifest.json's fields of a kernel of one shape, of a general (any-shape) kernel, of a tall-skinny kernel.
FIXED_SHAPE_JSON = ("m", "n", "k", "threads", "smem_bytes")
ANY_SHAPE_JSON = ("threads", "smem_bytes")
TALLSKINNY_JSON = ("n", "t1", "t2", "t3")
TSMMA_JSON = ("max_n", "t1", "t2", "t3")   # one kernel serves every n of its last 8-column tile


FAMILIES: tuple[KernelFamily, ...] = (
    KernelFamily("small", "small", "small/small_variant.cu.j2", small.SmallSpec.parse,
                 any_shape=False, conjugate_at_run_time=True, json_fields=FIXED_SHAPE_JSON),
    KernelFamily("wmma", "wmma", "wmma/wmma_variant.cu.j2", wmma.WmmaSpec.parse,
                 any_shape=True, conjugate_at_run_time=True, json_fields=ANY_SHAPE_JSON),
    KernelFamily("wmmablock", "wmma", "wmma/wmma_variant.cu.j2", wmma.WmmaBlockSpec.parse,
                 any_shape=True, conjugate_at_run_time=True, json_fields=ANY_SHAPE_JSON),
    KernelFamily("wmmatiny", "wmma", "wmma/wmma_tiny_variant.cu.j2", wmma.WmmaTinySpec.parse,
                 any_shape=False, conjugate_at_run_time=False, json_fields=FIXED_SHAPE_JSON),
    KernelFamily("wmmawarp", "wmma", "wmma/wmma_warp_variant.cu.j2", wmma.WmmaWarpSpec.parse,
                 any_shape=False, conjugate_at_run_time=True, json_fields=FIXED_SHAPE_JSON),
    KernelFamily("tsm2", "tallskinny", "tallskinny/tallskinny_variant.cu.j2", tallskinny.Tsm2Spec.parse,
                 any_shape=True, conjugate_at_run_time=False, json_fields=TALLSKINNY_JSON,
                 tallskinny=True),
    KernelFamily("ism2", "tallskinny", "tallskinny/tallskinny_variant.cu.j2", tallskinny.Ism2Spec.parse,
                 any_shape=True, conjugate_at_run_time=False, json_fields=TALLSKINNY_JSON,
                 tallskinny=True),
    KernelFamily("tsmma", "tallskinny", "tallskinny/tallskinny_variant.cu.j2", tallskinny.TsmmaSpec.parse,
                 any_shape=True, conjugate_at_run_time=False, json_fields=TSMMA_JSON,
                 tallskinny=True),
)
BY_NAME = {f.name: f for f in FAMILIES}

# The CMake families, in CMakeLists.txt's order, and the folder of the one source that is not a
# variant's (sm_90a's hc kernel, src/wmmahopper/gemmgen_wgmma_hc.cu, built with the wmma family).
BUILD_GROUPS = ("small", "wmma", "tallskinny")
GROUP_OF_FOLDER = {**{f.name: f.group for f in FAMILIES}, "wmmahopper": "wmma"}


def family_of(name_or_spec) -> KernelFamily:
    """The family of a spec, or of a kernel name by its prefix (small_, wmma_, wmmawarp_, ...)."""
    if not isinstance(name_or_spec, str):
        return BY_NAME[name_or_spec.family]
    prefix = name_or_spec.split("_", 1)[0]
    if prefix not in BY_NAME:
        raise SpecError("name", f"{name_or_spec!r} is not a kernel name of any family "
                                f"({', '.join(f.name for f in FAMILIES)})")
    return BY_NAME[prefix]


def parse_kernel(name: str):
    """The spec of a CUDA kernel name of any family."""
    return family_of(name).parse(name)
