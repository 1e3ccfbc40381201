"""Each platform's sources speak its own dialect, and only its own; templates name no vendor."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from conftest import REPO

GENERATED = REPO / "generated"

# Names that belong to exactly one vendor.  A file of one platform must not contain another's.
VENDOR_NAMES = {
    "cuda": ["cuda_runtime.h", "cudaStream_t", "cudaError_t", "cudaSuccess", "__nv_bfloat16", "cuda_bf16.h", "cuda_fp16.h"],
    "rocm": ["hip/hip_runtime.h", "hipStream_t", "hipError_t", "hipSuccess", "hip_bfloat16", "hipGetLastError"],
    "musa": ["musa_runtime.h", "musaStream_t", "musaError_t", "musaSuccess", "__mt_bfloat16", "musa_bf16.h", "musaGetLastError"],
}


def kernel_sources(platform: str) -> list[Path]:
    suffix = {"cuda": ".cu", "rocm": ".hip", "musa": ".mu"}[platform]
    files = sorted((GENERATED / platform / "csrc/kernels" / platform).glob(f"*{suffix}"))
    assert files, f"no {suffix} kernels generated for {platform}"
    return files


@pytest.mark.parametrize("platform", ["cuda", "rocm", "musa"])
def test_device_sources_use_their_own_vendor_names(platform):
    tree = GENERATED / platform / "csrc/kernels" / platform
    text = "\n".join(p.read_text() for p in sorted(tree.iterdir()))
    for name in VENDOR_NAMES[platform]:
        assert name in text, f"{platform} sources never mention {name}"
    for other, names in VENDOR_NAMES.items():
        if other != platform:
            for name in names:
                assert name not in text, f"{platform} sources contain {other}'s {name}"


def test_musa_package_binds_to_torch_musa():
    bindings = (GENERATED / "musa/csrc/bindings.cpp").read_text()
    assert "at::musa::getCurrentMUSAStream" in bindings
    assert "c10::musa::OptionalMUSAGuard" in bindings
    assert "C10_MUSA_KERNEL_LAUNCH_CHECK" in bindings
    assert "TORCH_LIBRARY_IMPL(rlkernels, PrivateUse1, m)" in bindings
    assert "TORCH_LIBRARY_IMPL(rlkernels, CPU, m)" in bindings
    setup = json.loads((GENERATED / "musa/rlkernels/_build.json").read_text())["setup"]
    assert (setup["import_module"], setup["extension_module"], setup["extension"]) == ("torch_musa", "torch_musa.utils.musa_extension", "MUSAExtension")
    assert setup["arch_env"] == "TORCH_MUSA_ARCH_LIST"


def test_kernel_files_never_include_torch():
    for path in GENERATED.rglob("csrc/kernels/**/*"):
        if path.is_file():
            includes = re.findall(r"#include [<\"]([^>\"]+)", path.read_text())
            assert not [i for i in includes if i.startswith(("torch", "ATen", "c10"))], path


@pytest.mark.parametrize("platform, device_flag", [("cuda", "-fmad=false"), ("rocm", "-ffp-contract=off"), ("musa", "-ffp-contract=off"), ("cpu", None)])
def test_fp_contraction_is_off_in_every_flag_set(platform, device_flag):
    setup = json.loads((GENERATED / platform / "rlkernels/_build.json").read_text())["setup"]  # what setup.py builds with
    assert "-ffp-contract=off" in setup["host_flags"]
    if device_flag:
        assert device_flag in setup["device_flags"]


def test_templates_name_no_vendor():
    pattern = re.compile(r"\b(cuda|hip|musa|nvidia|amd|rocm|__nv_|__mt_)\w*", re.IGNORECASE)
    for path in sorted((REPO / "templates").rglob("*.j2")):
        hits = sorted({m.group(0) for m in pattern.finditer(path.read_text())})
        assert not hits, f"{path.relative_to(REPO)} names a vendor: {hits}; move it into specs/platforms/"


def test_no_kernel_assumes_a_warp_size():
    for path in GENERATED.rglob("csrc/kernels/**/*"):
        if path.is_file():
            text = path.read_text()
            # Reductions go through rlk_reduce.h's fixed lanes tree, never warp primitives.
            assert "warpSize" not in text and "__shfl" not in text, path
