"""The emitted CUDA compiles without spills or local memory for the oldest and the newest generated
architecture (sm_75 and sm_90 by default: every code path of the sources; conftest.compiled_archs says
why not sm_80 here, whose check is the README's main job), and the C API's argument checks hold
(they return before any CUDA call, so they run here without a GPU)."""
import pytest

from gemmgen.generator.precision import PRECISION_ORDER
from gemmgen.harness.core.api import LAUNCH_FAILED, NOT_GENERATED, GemmgenLibrary
from gemmgen.harness.core.build import device_code

pytestmark = pytest.mark.slow


def test_default_set_compiles_without_local_memory(default_set_build):
    build = default_set_build
    archs = {r.arch for r in build.resources}
    assert {"sm_75", "sm_90"} <= archs   # below sm_80 and sm_80+ (with sm_90a) code paths both compiled
    assert build.resources, "ptxas reported no kernels"
    offenders = [(r.source, r.arch, r.stack_bytes, r.spill_stores) for r in build.local_memory_kernels]
    assert not offenders


def test_default_set_compiles_without_a_warning(default_set_build):
    """The fixture compiles every source with -Werror all-warnings (a warning would have failed it); and
    ptxas, whose reports the build keeps, printed no warning either."""
    reports = [obj.with_suffix(".ptxas.txt") for obj in default_set_build.objects]
    assert len(reports) > 40 and all(r.is_file() for r in reports)
    warned = [(r.name, line) for r in reports for line in r.read_text().splitlines() if "warning" in line.lower()]
    assert not warned, warned[:5]


def test_the_library_carries_its_device_code_compressed(default_set_build):
    """The machine code in the library's fat binaries is compressed (nvcc leaves it raw unless told):
    the kernels take a sixth of their expanded size, and the library for one architecture stays well
    under 60 MB."""
    code = device_code(default_set_build.library)
    if code is None:
        pytest.skip("objcopy not installed")
    assert code.raw_bytes < 100_000, code          # only the link step's stub is left raw
    assert code.stored_bytes * 3 < code.expanded_bytes, code
    archs = {r.arch.rstrip("a") for r in default_set_build.resources}
    assert default_set_build.library.stat().st_size < 60e6 * len(archs)


@pytest.fixture(scope="module")
def lib(default_set_build):
    return GemmgenLibrary(default_set_build.library)


def strided(lib, prec="d", ta="N", tb="N", m=4, n=4, k=4, alpha=1.0, A=8, lda=4, sA=16, B=8, ldb=4,
            sB=16, beta=0.0, C=8, ldc=4, sC=16, batch=3):
    return lib.strided(prec, ta, tb, m, n, k, alpha, A, lda, sA, B, ldb, sB, beta, C, ldc, sC, batch)


def array(lib, prec="d", ta="N", tb="N", m=4, n=4, k=4, alpha=1.0, A=8, lda=4, B=8, ldb=4, beta=0.0,
          C=8, ldc=4, batch=3):
    return lib.array(prec, ta, tb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc, batch)


@pytest.mark.parametrize("prec", PRECISION_ORDER)
@pytest.mark.parametrize("change, code", [
    ({"ta": "X"}, -1), ({"tb": "?"}, -2), ({"m": -1}, -3), ({"n": -1}, -4), ({"k": -2}, -5),
    ({"A": None}, -7), ({"lda": 3}, -8), ({"sA": -1}, -9), ({"B": None}, -10), ({"ldb": 3}, -11),
    ({"sB": -5}, -12), ({"C": None}, -14), ({"ldc": 3}, -15), ({"sC": 15}, -16), ({"batch": -1}, -17),
    ({"ta": "T", "k": 6, "lda": 5}, -8), ({"tb": "C", "n": 2, "ldb": 1}, -11),
    ({"m": -1, "lda": 0}, -3),   # the first failing argument is reported
])
def test_strided_argument_checks(lib, prec, change, code):
    assert strided(lib, prec, **change) == code


@pytest.mark.parametrize("change, code", [
    ({"ta": "x"}, -1), ({"m": -1}, -3), ({"A": None}, -7), ({"lda": 1}, -8), ({"B": None}, -9),
    ({"ldb": 2}, -10), ({"C": None}, -12), ({"ldc": 0}, -13), ({"batch": -3}, -14),
])
def test_array_argument_checks(lib, change, code):
    assert array(lib, "z", **change) == code


def test_quick_returns_touch_nothing(lib):
    # m, n or batch zero: done at once, even with null pointers
    assert strided(lib, m=0, A=None, B=None, C=None) == 0
    assert strided(lib, n=0, A=None, B=None, C=None) == 0
    assert strided(lib, batch=0, A=None, B=None, C=None) == 0
    assert array(lib, batch=0, A=None, B=None, C=None) == 0
    # alpha = 0 or k = 0 need neither A nor B, so null A/B is no error, but C is still needed
    assert strided(lib, alpha=0.0, A=None, B=None, C=None) == -14
    assert strided(lib, k=0, A=None, B=None, C=None) == -14
    # alpha = 0 or k = 0 with beta = 1: C stays as it is, nothing launched (BLAS's quick return; a launch
    # would fail here, without a GPU)
    for prec in PRECISION_ORDER:
        assert strided(lib, prec, alpha=0.0, beta=1.0, A=None, B=None) == 0
        assert strided(lib, prec, k=0, beta=1.0) == 0
        assert array(lib, prec, alpha=0.0, beta=1.0, A=None, B=None) == 0


def test_shapes_outside_the_set_are_reported_without_a_device(lib):
    for prec in PRECISION_ORDER:
        if prec in ("h", "hc"):   # the general Tensor Core kernel covers every shape
            continue
        assert strided(lib, prec, m=3, n=5, k=7, lda=3, sA=21, ldb=7, sB=35, ldc=3, sC=15) == NOT_GENERATED
        assert array(lib, prec, m=33, n=33, k=33, lda=33, ldb=33, ldc=33) == NOT_GENERATED


def test_h_and_hc_shapes_outside_the_exact_set_go_to_the_general_kernel(lib):
    # Without a GPU the launch fails, which shows the call got past "not generated".
    for prec in ("h", "hc"):
        assert strided(lib, prec, m=3, n=5, k=7, lda=3, sA=21, ldb=7, sB=35, ldc=3, sC=15) == LAUNCH_FAILED
        assert array(lib, prec, m=300, n=33, k=70, lda=300, ldb=70, ldc=300) == LAUNCH_FAILED


def test_lowercase_and_conjugate_transposes_are_accepted(lib):
    # valid arguments get past the checks; without a GPU the launch then reports failure
    for ta, tb in (("n", "t"), ("c", "C"), ("T", "c")):
        assert strided(lib, "z", ta, tb) not in (-1, -2)


def test_what_was_generated_can_be_asked(lib):
    for prec in PRECISION_ORDER:
        for n in (1, 2, 17, 32):
            assert lib.is_generated(prec, n, n, n)
        # h and hc have the general Tensor Core kernel: any shape; the others only exact shapes.
        general = prec in ("h", "hc")
        assert lib.is_generated(prec, 33, 33, 33) == general
        assert lib.is_generated(prec, 3, 5, 7) == general
        # exact-shape kernels past 32: only the warp Tensor Core kernels of h and hc (the tuned set has
        # 33x33x33 in both)
        assert lib.small_is_generated(prec, 33, 33, 33) == general
        assert not lib.small_is_generated(prec, 3, 5, 7)   # not in the default set
    names = lib.kernel_names()
    assert len(names) == len(set(names))
    assert all(n.split("_")[0] in ("small", "wmma", "wmmablock", "wmmatiny", "wmmawarp") for n in names)
    assert any(n.startswith("wmma_h_") for n in names) and any(n.startswith("wmma_hc_") for n in names)


def test_the_kernel_for_a_strided_layout_can_be_asked(lib):
    """gemmgen_selected_kernel_strided: the kernel a strided batch of these leading dimensions and strides
    runs.  Without a device the lowest architecture's rows answer (no block kernels there), with columns
    off 16 bytes (h 100 packed: 200-byte columns) never a block kernel, which copies in 16-byte chunks."""
    for prec in PRECISION_ORDER:
        assert lib.selected_kernel_packed(prec, 8, 8, 8) == lib.selected_kernel(prec, 8, 8, 8) is not None
    assert lib.selected_kernel_packed("h", 100, 100, 100).startswith("wmma_h_")
    assert lib.selected_kernel_packed("d", 3, 5, 7) is None   # not generated
    assert lib.lib.gemmgen_selected_kernel_strided(b"q", 8, 8, 8, 8, 64, 8, 64, 8, 64) is None
