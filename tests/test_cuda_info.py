"""opforge.tools.cuda_info: what the doctor reads from the loaded module about its CUDA side."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

import opforge
from opforge.tools import cuda_info
from opforge._loader import library_path

ROOT = Path(__file__).resolve().parents[1]
CUDA_TEST_BINARY = ROOT / "build" / "cuda" / "opforge_cuda_test"


def test_the_cpu_module_says_it_has_no_gpu_kernels():
    opforge.load_library()
    info = cuda_info.module_info(library_path())
    assert info == {"gpu_binding": False, "targets": []}
    assert cuda_info.describe(library_path()) == ["GPU kernels:          not in this build"]


@pytest.mark.skipif(not CUDA_TEST_BINARY.exists(),
                    reason="no CUDA test binary (make cuda-test builds it where nvcc exists)")
def test_fatbin_targets_are_what_cmake_compiled():
    # `make cuda-test` compiles for CMAKE_CUDA_ARCHITECTURES "75-virtual;90-real": PTX for
    # compute_75, machine code for sm_90, read from the binary's .nv_fatbin section.
    cache = (ROOT / "build" / "cuda" / "CMakeCache.txt").read_text()
    archs = next(line.split("=", 1)[1] for line in cache.splitlines()
                 if line.startswith("CMAKE_CUDA_ARCHITECTURES"))
    expected = sorted({(f"compute_{a.split('-')[0]}" if a.endswith("-virtual")
                        else f"sm_{a.split('-')[0]}") for a in archs.split(";")},
                      key=lambda t: (int(t.split("_")[1]), t))
    assert cuda_info.fatbin_targets(CUDA_TEST_BINARY) == expected


def test_fatbin_targets_of_a_file_without_cuda_code():
    assert cuda_info.fatbin_targets(sys.executable if os.path.exists(sys.executable)
                                    else library_path()) == []
    with pytest.raises(ValueError, match="not a 64-bit ELF"):
        cuda_info.fatbin_targets(__file__)


@pytest.mark.parametrize("capability, targets, expected", [
    (90, ["compute_75", "sm_90"], "machine code for sm_90"),
    (100, ["compute_75", "sm_90"], "PTX compute_75, compiled by the driver at the first launch"),
    (86, ["sm_80", "sm_90"], "machine code for sm_80 (compatible within the major version)"),
    (70, ["compute_75", "sm_90"], "NO compatible code: the kernels cannot run on this device"),
])
def test_how_a_device_runs_the_compiled_code(capability, targets, expected):
    assert cuda_info.runs_on(capability, targets) == expected


def test_doctor_prints_the_cuda_lines():
    cli = str(Path(sys.executable).parent / "opforge")
    out = subprocess.run([cli, "doctor"], capture_output=True, text=True, cwd="/",
                         timeout=300).stdout
    assert "GPU kernels:          not in this build" in out, out
