"""The closed vocabulary of what a platform spec may turn into code, compiler flags or imports.

A platform spec names its vendor's headers, types, runtime functions and torch bindings (each
becomes text of generated C++), its compiler flags (each lands on a compiler's command line), the
variable its target architectures travel in, and Python names the package imports or calls
(``detection.available``, ``build.extension_module``, ...).  Each must be one listed here, the four
platforms' own and nothing else: a spec chooses among them, it never writes them.  A new vendor's
names are added here once, in a reviewed change to the generator.
"""

from __future__ import annotations

from collections.abc import Callable

_VENDORS = ("cuda", "hip", "musa")


RUNTIME_PARTS: dict[str, tuple[str, ...]] = {
    "success": ("Success",),
    "invalid_value": ("ErrorInvalidValue",),
    "get_last_error": ("GetLastError",),
    "error_string": ("GetErrorString",),
    "set_function_attribute": ("FuncSetAttribute",),
    "max_dynamic_shared_memory": ("FuncAttributeMaxDynamicSharedMemorySize",),
    "current_device": ("GetDevice",),
    "device_attribute": ("DeviceGetAttribute",),
    "compute_major": ("DevAttrComputeCapabilityMajor", "DeviceAttributeComputeCapabilityMajor"),
    "compute_minor": ("DevAttrComputeCapabilityMinor", "DeviceAttributeComputeCapabilityMinor"),
    "multiprocessor_count": ("DevAttrMultiProcessorCount", "DeviceAttributeMultiprocessorCount"),
    "copy_from_symbol": ("MemcpyFromSymbol",),
}
"""Per field of a platform's runtime: the calls or constants it may name, after the vendor's prefix
(cudaSuccess, hipSuccess): a word of the vocabulary is also the word for its field."""


def runtime_words(field: str) -> tuple[str, ...]:
    """Each vendor's spelling of what ``field`` of a platform's runtime names."""
    return tuple(f"{vendor}{part}" for vendor in _VENDORS for part in RUNTIME_PARTS[field])


def vendor_of(word: str) -> str:
    """The vendor prefix of a runtime word (cuda, hip, musa)."""
    return next(vendor for vendor in _VENDORS if word.startswith(vendor))


def _runtime_api() -> frozenset[str]:
    """Each vendor's spelling of the runtime calls and constants the kernels use."""
    return frozenset(word for field in RUNTIME_PARTS for word in runtime_words(field))


HEADERS = frozenset(
    {
        "cuda_runtime.h", "cuda_fp16.h", "cuda_bf16.h",
        "hip/hip_runtime.h", "hip/hip_fp16.h", "hip/hip_bfloat16.h", "hip/hip_bf16.h",
        "musa_runtime.h", "musa_fp16.h", "musa_bf16.h",
    }
)  # fmt: skip
"""The vendors' runtime and 16-bit float headers, which the kernels include."""

TORCH_INCLUDES = frozenset(
    {
        "ATen/cuda/CUDAContext.h", "c10/cuda/CUDAGuard.h",
        "ATen/hip/HIPContext.h", "c10/hip/HIPGuard.h",
        "torch_musa/csrc/aten/musa/MUSAContext.h", "torch_musa/csrc/core/MUSAGuard.h",
    }
)  # fmt: skip
"""The torch headers a device package's bindings include (streams, device guards)."""

TYPES = frozenset(
    {
        "rlk_half_bits", "rlk_bfloat16_bits",  # the host's: rlk_numerics.h defines them
        "__half", "__nv_bfloat16", "hip_bfloat16", "__hip_bfloat16", "__mt_bfloat16",
        "cudaStream_t", "hipStream_t", "musaStream_t",
        "cudaError_t", "hipError_t", "musaError_t",
    }
)  # fmt: skip
"""C++ types: the 16-bit floats, streams and error codes."""

TYPE_ROLES: dict[str, frozenset[str]] = {
    "half": frozenset({"rlk_half_bits", "__half"}),
    "bfloat16": frozenset({"rlk_bfloat16_bits", "__nv_bfloat16", "hip_bfloat16", "__hip_bfloat16", "__mt_bfloat16"}),
    "stream": frozenset({"cudaStream_t", "hipStream_t", "musaStream_t"}),
    "error": frozenset({"cudaError_t", "hipError_t", "musaError_t"}),
}
"""Per field of a platform's types, the types it may name: a float16 type for half, never a bfloat16 one."""

RUNTIME_API = _runtime_api()
"""The runtime calls and constants (cudaGetLastError, hipSuccess, ...)."""

INTRINSICS = frozenset({"__fmul_rn", "__fadd_rn"})
"""Correctly rounded single operations a device compiler never fuses."""

TORCH_NAMES = frozenset(
    {
        "at::cuda::getCurrentCUDAStream", "at::hip::getCurrentHIPStream", "at::musa::getCurrentMUSAStream",
        "at::cuda::OptionalCUDAGuard", "at::hip::OptionalHIPGuard", "c10::musa::OptionalMUSAGuard",
        "C10_CUDA_KERNEL_LAUNCH_CHECK", "C10_HIP_KERNEL_LAUNCH_CHECK", "C10_MUSA_KERNEL_LAUNCH_CHECK",
    }
)  # fmt: skip
"""What the bindings call for a stream, a device guard and a launch check."""

ARCH_MACROS = frozenset({"__CUDA_ARCH_FEAT_SM90_ALL", "__CUDA_ARCH_FEAT_SM100_ALL", "__CUDA_ARCH__", "__MUSA_ARCH__", "__HIP_DEVICE_COMPILE__"})
"""Macros device compilation defines for an architecture."""

ARCH_ENVS = frozenset({"TORCH_CUDA_ARCH_LIST", "PYTORCH_ROCM_ARCH", "TORCH_MUSA_ARCH_LIST"})
"""The variables torch's extension builders read target architectures from."""

HOST_FLAGS = frozenset({"-O0", "-O1", "-O2", "-O3", "-std=c++17", "-std=c++20", "-ffp-contract=off", "-fno-fast-math", "-Wall", "-Wextra"})
"""Options of the host compiler: optimisation, the language standard, contraction off, warnings."""

DEVICE_FLAGS = HOST_FLAGS | frozenset({"-fmad=false", "-Xcompiler=-ffp-contract=off", "-prec-div=true", "-prec-sqrt=true", "-ftz=false"})
"""Options of the device compilers (nvcc, hipcc, mcc): the host's and those that keep float32 exact."""

HOST_CONTRACTION_OFF = "-ffp-contract=off"
"""The host flag every platform's build carries: the kernels' bits assume each product and sum rounded
where the source rounds it, which a fused multiply-add the compiler chose itself would not be."""

DEVICE_CONTRACTION_OFF = {
    "nvcc": frozenset({"-fmad=false", "-Xcompiler=-ffp-contract=off"}),
    "hipcc": frozenset({"-ffp-contract=off"}),
    "mcc": frozenset({"-ffp-contract=off"}),
}
"""Per device compiler, the device flags that turn contraction off in what it compiles (nvcc: in
device code, and in the host code of its sources through the host compiler)."""

STRIP_FLAGS = frozenset({"-march=native", "-mtune=native"})
"""Flags an extension builder adds by itself that a wheel for other machines must not carry."""

COMPILER_KEYS = frozenset({"nvcc", "mcc"})
"""The keys of extra_compile_args under which torch's builders pass flags to a device compiler."""

PYTHON = frozenset(
    {
        "torch.utils.cpp_extension", "torch_musa.utils.musa_extension",
        "torch.utils.cpp_extension.BuildExtension", "torch_musa.utils.musa_extension.BuildExtension",
        "torch.utils.cpp_extension.CUDA_HOME", "torch.utils.cpp_extension.ROCM_HOME", "torch_musa.utils.musa_extension.MUSA_HOME",
        "torch.cuda.is_available", "torch.musa.is_available",
        "torch.version.cuda", "torch.version.hip", "torch_musa.__version__",
        "torch_musa",
    }
)  # fmt: skip
"""What the package and its setup.py import, read or call for a platform: extension builders,
toolkit homes, availability checks, version attributes, a vendor's torch plugin."""


REFERENCE_CALLABLES = frozenset(
    {
        "torch.matmul", "torch.square", "torch.exp", "torch.tanh", "torch.sigmoid",
        "torch.nn.functional.linear", "torch.nn.functional.embedding", "torch.nn.functional.relu",
        "torch.nn.functional.silu", "torch.nn.functional.gelu", "torch.nn.functional.rms_norm",
        "torch.nn.functional.log_softmax", "torch.nn.functional.scaled_dot_product_attention",
        "torch.ops.aten.silu_backward.default", "torch.ops.aten.gelu_backward.default",
    }
)  # fmt: skip
"""PyTorch's own functions a reference kernel may name (besides the package's own references,
the functions of runtime/rlkernels/_references.py): pure functions of tensors, which the
contract tests call on their inputs."""


def member(vocabulary: frozenset[str], what: str) -> Callable[[str], str]:
    """A validator that takes only the vocabulary's words, refusing anything else as kernel-builder
    does: ``Unknown <what> X. Expected one of a, b``."""

    def check(value: str) -> str:
        if value not in vocabulary:
            raise ValueError(f"Unknown {what} {value!r}. Expected one of {', '.join(sorted(vocabulary))}")
        return value

    return check
