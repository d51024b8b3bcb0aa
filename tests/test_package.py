"""gemmgen as a package: a wheel built from the tree carries what the generator reads at run time
(templates, tuning tables, the harness's C++ drivers), installs under the one import name `gemmgen`,
and generates from outside the source tree exactly what the tree generates."""
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    out = tmp_path_factory.mktemp("wheel")
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q",
                            "-w", str(out), str(ROOT)], capture_output=True, text=True)
    assert built.returncode == 0, built.stderr
    (path,) = out.glob("gemmgen-*.whl")
    return path


def test_the_wheel_carries_its_data_under_one_top_level_name(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    top = {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")}
    assert top == {"gemmgen"}
    templates = {p for p in (ROOT / "gemmgen" / "templates").rglob("*.j2")}
    assert templates and {f"gemmgen/{p.relative_to(ROOT / 'gemmgen').as_posix()}" for p in templates} <= set(names)
    for data in ("gemmgen/generator/tuning/sm_90.json", "gemmgen/generator/tuning/local_memory.json",
                 "gemmgen/harness/cpu/cpu_runner.cpp", "gemmgen/harness/cpu/cpu_bench.cpp"):
        assert data in names


def test_an_installed_wheel_generates_what_the_tree_does(wheel, tmp_path):
    site = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(site)
    out = tmp_path / "out"
    # Run from a folder outside the tree, with the unpacked wheel first on the path.
    env = dict(os.environ, PYTHONPATH=str(site))
    code = ("import sys, gemmgen; assert gemmgen.__file__.startswith(sys.argv[1]), gemmgen.__file__; "
            "from gemmgen.cli import main; sys.argv = ['gemmgen'] + sys.argv[2:]; main()")
    args = ["generate", "--precisions", "d", "--sizes", "3", "--tallskinny-n", "2", "--cpu-isa", "generic",
            "--out"]
    run = subprocess.run([sys.executable, "-c", code, str(site), *args, str(out)], cwd=tmp_path, env=env,
                         capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    tree = tmp_path / "tree"
    subprocess.run([sys.executable, "-c", "import sys; from gemmgen.cli import main; sys.argv = ['gemmgen'] + "
                    "sys.argv[1:]; main()", *args, str(tree)], cwd=ROOT, check=True, capture_output=True)
    files = sorted(p.relative_to(out) for p in out.rglob("*") if p.is_file())
    assert files == sorted(p.relative_to(tree) for p in tree.rglob("*") if p.is_file())
    for f in files:
        assert (out / f).read_bytes() == (tree / f).read_bytes(), f
