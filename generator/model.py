"""Typed, frozen models of the spec files.

Every name that can reach generated C++ or Python passes through one of the
constrained string types below, so a spec can never inject code into a
generated file.  Rules that involve more than one file (an op naming a
platform, a backend lacking a guarantee) live in ``contracts``.
"""

from __future__ import annotations

import keyword
import math
import re
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from typing import Annotated, Any, Literal, get_args

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    GetCoreSchemaHandler,
    GetJsonSchemaHandler,
    StrictBool,
    StrictFloat,
    StrictInt,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import CoreSchema, InitErrorDetails, PydanticCustomError, core_schema

from . import reserved, vocabulary

_CPP_KEYWORDS = frozenset(
    """alignas alignof and and_eq asm auto bitand bitor bool break case catch char
    char16_t char32_t char8_t class compl concept const const_cast consteval constexpr
    constinit continue co_await co_return co_yield decltype default delete do double
    dynamic_cast else enum explicit export extern false float for friend goto if inline
    int long mutable namespace new noexcept not not_eq nullptr operator or or_eq private
    protected public register reinterpret_cast requires return short signed sizeof static
    static_assert static_cast struct switch template this thread_local throw true try
    typedef typeid typename union unsigned using virtual void volatile wchar_t while xor
    xor_eq""".split()
)
# Names that would shadow the tensors, streams or helpers every generated op uses.
_RESERVED = frozenset(
    {"self", "out", "stream", "torch", "at", "c10", "std", "rlk", "device"}
    # locals and helpers of the generated bindings, launchers and Python wrappers
    | {"kernel", "lead", "ctx", "needs", "grads", "result", "count", "status", "num_threads", "device_guard"}
    # attributes of torch's op objects, which getattr finds before an op or overload of that name:
    # an op namespace's name (torch.ops.<package>.name), an op's op, overloads and op_overloads,
    # and the overload names torch itself gives (default, out)
    | {"name", "op", "overloads", "op_overloads", "default", "out"}
)
# Macros, types and functions of the headers the generated sources include, Python's builtins and
# the generated modules' own names are derived from the sources into reserved_names.json (``reserved``).

INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1
"""An int attribute reaches the torch schema and the kernels as int64_t."""
FLOAT32_MAX = 3.4028234663852886e38
"""A float attribute reaches the kernels as float: a default must be a finite float32."""
FLOAT32_ZERO_BELOW = 2.0**-150
"""Half the smallest float32 subnormal: float32 holds a value of this magnitude or less as 0."""


def float32_trouble(value: float) -> str | None:
    """What float32, which the kernels receive a float attribute as, makes of ``value``, where that
    is not ``value`` rounded: past its range, or a nonzero value held as 0.  None where it is."""
    if abs(value) > FLOAT32_MAX:
        return "overflows float32"
    if value != 0 and abs(value) <= FLOAT32_ZERO_BELOW:
        return "is 0 in float32"
    return None
MAX_PARAM = 1 << 16
"""Integer kernel params are extents and counts (tile sizes, warps, stages) the templates multiply."""
MAX_TILE_ROWS = 1024
MAX_TILE_REDUCTION = 8192
MAX_STAGES = 16
"""The generated tests run batches and reductions a few tiles past these extents on a CPU."""
MAX_TEST_ELEMENTS = 1 << 24
"""The product of one test shape's sizes: the generated tests allocate tensors of that order per case."""


@dataclass(frozen=True)
class _SchemaPattern:
    """Puts a name rule's regex into the JSON Schema too, so editors flag a bad name as it is typed."""

    regex: str

    def __get_pydantic_json_schema__(self, schema: CoreSchema, handler: GetJsonSchemaHandler) -> JsonSchemaValue:
        json_schema = handler(schema)
        json_schema["pattern"] = f"^(?:{self.regex})$"
        return json_schema


@dataclass(frozen=True)
class _SchemaEnum:
    """Puts a closed vocabulary into the JSON Schema as an enum, so editors offer its words."""

    words: frozenset[str]

    def __get_pydantic_json_schema__(self, schema: CoreSchema, handler: GetJsonSchemaHandler) -> JsonSchemaValue:
        json_schema = handler(schema)
        json_schema["enum"] = sorted(self.words)
        return json_schema

    def __hash__(self) -> int:
        return hash(tuple(sorted(self.words)))


@dataclass(frozen=True)
class _Matching(_SchemaPattern):
    """A string that must match ``regex``: validated with a message naming ``what``, and in the schema."""

    what: str
    example: str

    def __get_pydantic_core_schema__(self, source: Any, handler: GetCoreSchemaHandler) -> CoreSchema:
        return core_schema.no_info_after_validator_function(_pattern(self.regex, self.what, self.example), handler(source))


def _pattern(regex: str, what: str, example: str) -> Callable[[str], str]:
    compiled = re.compile(regex)

    def check(value: str) -> str:
        if not compiled.fullmatch(value):
            raise ValueError(f"{value!r} is not a valid {what} (expected something like {example!r})")
        return value

    return check


IDENTIFIER = r"[a-z][a-z0-9_]{0,47}"
DIM_NAME = r"[A-Z][A-Z0-9]{0,7}"
DOTTED_NAME = r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*"


def _identifier(value: str) -> str:
    _pattern(IDENTIFIER, "name", "det_gemm")(value)
    if value in _CPP_KEYWORDS or keyword.iskeyword(value) or value in _RESERVED:
        raise ValueError(f"{value!r} is reserved in C++, Python or generated code; pick another name")
    if "__" in value or value.endswith("_"):
        raise ValueError(f"{value!r} may not contain '__' or end with '_' (reserved in C++)")
    what = reserved.clash(value)
    if what is not None:
        raise ValueError(f"{value!r} clashes with {what}; pick another name")
    return value


Identifier = Annotated[str, AfterValidator(_identifier), _SchemaPattern(IDENTIFIER)]
"""Lower-case name used for ops, args, kernels and platforms in C++ and Python."""

def _dim_name(value: str) -> str:
    _pattern(DIM_NAME, "dimension name", "K")(value)
    what = reserved.clash(value)
    if what is not None:
        raise ValueError(f"{value!r} clashes with {what}; pick another dimension name")
    return value


DimName = Annotated[str, AfterValidator(_dim_name), _SchemaPattern(DIM_NAME)]
TypeVar = Annotated[str, _Matching(r"[A-Z]", "dtype variable", "T")]
def _dotted_name(value: str) -> str:
    _pattern(DOTTED_NAME, "Python dotted name", "torch.matmul")(value)
    keywords = [part for part in value.split(".") if keyword.iskeyword(part)]
    if keywords:
        raise ValueError(f"{value!r} contains the Python keyword {keywords[0]!r}, which cannot be imported")
    return value


DottedName = Annotated[str, AfterValidator(_dotted_name), _SchemaPattern(DOTTED_NAME)]
Version = Annotated[str, _Matching(r"[0-9]+(\.[0-9]+){1,2}([a-z]+[0-9]+)?", "version", "0.1.0")]
def _printable(value: str) -> str:
    for char in value:
        if unicodedata.category(char) in {"Cc", "Cf", "Zl", "Zp", "Cs", "Co", "Cn"}:
            name = unicodedata.name(char, f"U+{ord(char):04X}")
            raise ValueError(f"text may not hold the control, format or separator character U+{ord(char):04X} ({name}): it hides or reorders text in generated files")
    return value


Text = Annotated[
    str,
    _Matching(r'[^\x00-\x1f\x7f`$\\{}"]{0,400}', "single line of text (at most 400 characters)", "Deterministic GEMM"),
    AfterValidator(_printable),
]
"""Free text that lands in comments, docstrings and string literals: one line, nothing that could
close a comment or a string, or open a template expression."""
Suffix = Literal[".cu", ".hip", ".mu", ".cpp"]


FiniteFloat = Annotated[StrictFloat, Field(allow_inf_nan=False)]
"""A number where a float belongs: an int is one, a bool or a string is not, nor NaN or an infinity."""


class StrictModel(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Guarantee(str, Enum):
    """What a kernel promises about its bits.

    layout_invariant: the reduction dimension cut into 2, 4, 8, ... equal contiguous parts, each
    part reduced by the kernel on its own and the parts' results combined pairwise by mid-split
    (((p0 + p1) + (p2 + p3)) ...) with adds in the output dtype, gives the whole reduction's bits
    -- what a tensor-parallel split of that dimension needs to give every parallel layout the
    same bits.  Only the k_tree order has this property (its top splits are whole subtrees).
    """

    deterministic = "deterministic"
    batch_invariant = "batch_invariant"
    portable = "portable"
    layout_invariant = "layout_invariant"


class Dtype(str, Enum):
    float32 = "float32"
    float16 = "float16"
    bfloat16 = "bfloat16"
    int64 = "int64"
    int32 = "int32"
    bool = "bool"


FLOAT_DTYPES = (Dtype.float32, Dtype.float16, Dtype.bfloat16)

EXACT_INTEGERS: dict[str, tuple[int, int]] = {
    "int64": (INT64_MIN, INT64_MAX),
    "int32": (-(1 << 31), (1 << 31) - 1),
    "bool": (0, 1),
    "float32": (-(1 << 24), 1 << 24),
    "float16": (-(1 << 11), 1 << 11),
    "bfloat16": (-(1 << 8), 1 << 8),
}
"""Per dtype, the integers it holds every one of, as [least, greatest]: a test value outside is
not what the spec wrote once the tests store it (int32 wraps 2^31 to -2^31, bool holds 2 as
true, float16 rounds 2049 to 2048)."""


# --------------------------------------------------------------------------- package


class Tolerance(StrictModel):
    atol: StrictFloat = Field(ge=0, le=1)
    rtol: StrictFloat = Field(ge=0, le=1)


class PackageSpec(StrictModel):
    name: Identifier
    """The Python package and the torch library namespace (``torch.ops.<name>``)."""
    version: Version
    """The wheels' version, before the platform's local label (``0.1.0+cpu``)."""
    description: Text
    tolerances: dict[Identifier, dict[Dtype, Tolerance]] = Field(min_length=1)
    """The tolerance table: class → dtype → atol/rtol.  Accuracy only; invariance is always bitwise."""
    integrations: dict[Annotated[str, _Matching(IDENTIFIER, "module name", "transformers")], tuple[Identifier, ...]] = {}
    """Module of the package's hand-written Python (``runtime/rlkernels/<module>.py``) → the ops
    and aliases it calls.  ``generate`` refuses a catalog that lacks one of them."""

    @model_validator(mode="after")
    def _every_class_covers_every_dtype(self) -> PackageSpec:
        for name, table in self.tolerances.items():
            missing = [d.value for d in FLOAT_DTYPES if d not in table]
            if missing:
                raise ValueError(f"tolerance class {name!r} lacks dtypes: {', '.join(missing)}")
        return self


# --------------------------------------------------------------------------- platforms


# What a platform spec turns into code, flags or imports: a word of the closed vocabulary
# (``vocabulary``), each validated with a message naming what was expected.
VendorHeader = Annotated[str, AfterValidator(vocabulary.member(vocabulary.HEADERS, "vendor header")), _SchemaEnum(vocabulary.HEADERS)]
TorchInclude = Annotated[str, AfterValidator(vocabulary.member(vocabulary.TORCH_INCLUDES, "torch header")), _SchemaEnum(vocabulary.TORCH_INCLUDES)]
VendorType = Annotated[str, AfterValidator(vocabulary.member(vocabulary.TYPES, "vendor type")), _SchemaEnum(vocabulary.TYPES)]
RuntimeName = Annotated[str, AfterValidator(vocabulary.member(vocabulary.RUNTIME_API, "runtime call or constant")), _SchemaEnum(vocabulary.RUNTIME_API)]
IntrinsicName = Annotated[str, AfterValidator(vocabulary.member(vocabulary.INTRINSICS, "intrinsic")), _SchemaEnum(vocabulary.INTRINSICS)]
TorchName = Annotated[str, AfterValidator(vocabulary.member(vocabulary.TORCH_NAMES, "torch binding")), _SchemaEnum(vocabulary.TORCH_NAMES)]
ArchMacro = Annotated[str, AfterValidator(vocabulary.member(vocabulary.ARCH_MACROS, "architecture macro")), _SchemaEnum(vocabulary.ARCH_MACROS)]
ArchEnv = Annotated[str, AfterValidator(vocabulary.member(vocabulary.ARCH_ENVS, "architecture variable")), _SchemaEnum(vocabulary.ARCH_ENVS)]
HostFlag = Annotated[str, AfterValidator(vocabulary.member(vocabulary.HOST_FLAGS, "host compiler flag")), _SchemaEnum(vocabulary.HOST_FLAGS)]
DeviceFlag = Annotated[str, AfterValidator(vocabulary.member(vocabulary.DEVICE_FLAGS, "device compiler flag")), _SchemaEnum(vocabulary.DEVICE_FLAGS)]
StripFlag = Annotated[str, AfterValidator(vocabulary.member(vocabulary.STRIP_FLAGS, "flag to strip")), _SchemaEnum(vocabulary.STRIP_FLAGS)]
CompilerKey = Annotated[str, AfterValidator(vocabulary.member(vocabulary.COMPILER_KEYS, "device compiler key")), _SchemaEnum(vocabulary.COMPILER_KEYS)]
PythonName = Annotated[str, AfterValidator(vocabulary.member(vocabulary.PYTHON, "Python name")), _SchemaEnum(vocabulary.PYTHON)]


class Headers(StrictModel):
    runtime: VendorHeader | None
    fp16: VendorHeader | None
    bf16: VendorHeader | None


class DeviceTypes(StrictModel):
    """Vendor type names.  Where a header is missing, the portable header defines the type."""

    half: VendorType
    bfloat16: VendorType
    stream: VendorType | None
    error: VendorType | None

    @model_validator(mode="after")
    def _each_type_in_its_role(self) -> DeviceTypes:
        for field, allowed in vocabulary.TYPE_ROLES.items():
            value = getattr(self, field)
            if value is not None and value not in allowed:
                raise ValueError(f"{field} is {value}, not a {field} type. Expected one of {', '.join(sorted(allowed))}")
        return self


class RuntimeApi(StrictModel):
    success: RuntimeName
    invalid_value: RuntimeName
    get_last_error: RuntimeName
    error_string: RuntimeName
    set_function_attribute: RuntimeName
    """Sets an attribute of a kernel function, e.g. to opt in to more shared memory."""
    max_dynamic_shared_memory: RuntimeName
    """The attribute that raises a kernel's dynamic shared-memory limit."""
    current_device: RuntimeName | None = None
    """Gives the calling thread's current device (cudaGetDevice); with the next four, lets a launcher
    that needs an arch-specific target (a kernel's ``archs``) ask what the device is."""
    device_attribute: RuntimeName | None = None
    """Reads one integer attribute of a device (cudaDeviceGetAttribute)."""
    compute_major: RuntimeName | None = None
    """The attribute holding the device's architecture major number (9 for "9.0a")."""
    compute_minor: RuntimeName | None = None
    """The attribute holding its minor number (0 for "9.0a")."""
    multiprocessor_count: RuntimeName | None = None
    """The attribute holding the device's multiprocessor count, for a persistent grid."""
    copy_from_symbol: RuntimeName | None = None
    """Copies a device variable to the host (cudaMemcpyFromSymbol): what the code loaded for the
    device says about how it was compiled."""

    @model_validator(mode="after")
    def _each_word_in_its_field_of_one_vendor(self) -> RuntimeApi:
        """A runtime word names what its field does (success is a Success constant, not an error
        code), and every word is one vendor's: a swapped or mixed pair compiles and inverts a check."""
        vendors: dict[str, list[str]] = {}
        for field in vocabulary.RUNTIME_PARTS:
            value = getattr(self, field)
            if value is None:
                continue
            allowed = vocabulary.runtime_words(field)
            if value not in allowed:
                raise ValueError(f"{field} is {value}, which is not what {field} names. Expected one of {', '.join(allowed)}")
            vendors.setdefault(vocabulary.vendor_of(value), []).append(field)
        if len(vendors) > 1:
            mixed = "; ".join(f"{vendor}: {', '.join(fields)}" for vendor, fields in sorted(vendors.items()))
            raise ValueError(f"the runtime's words are of one vendor, got several ({mixed})")
        return self


class Intrinsics(StrictModel):
    """Correctly rounded single operations that the compiler may never fuse."""

    mul_rn: IntrinsicName | None
    add_rn: IntrinsicName | None


class TorchBinding(StrictModel):
    dispatch_key: Literal["CPU", "CUDA", "PrivateUse1"]
    device_type: Identifier
    includes: tuple[TorchInclude, ...]
    stream_getter: TorchName | None
    device_guard: TorchName | None
    launch_check: TorchName | None

    @property
    def layout_dispatch_keys(self) -> tuple[str, ...]:
        """The dispatch keys of the device's tensors of other layouts (sparse, sparse compressed,
        nested; mkldnn on the host): the bindings register each op's entry points there too, so
        that such a tensor reaches the op's checks, which name its layout, instead of torch's
        "Could not run ... with arguments from the 'SparseCPU' backend".  Derived from the closed
        ``dispatch_key`` by torch's per-backend naming, so nothing here comes from a spec's text."""
        key = self.dispatch_key
        return (f"Sparse{key}", f"SparseCsr{key}", f"NestedTensor{key}", *(("MkldnnCPU",) if key == "CPU" else ()))


ArchEntry = Annotated[str, _Matching(r"[0-9]+(\.[0-9]+)?[af]?(\+PTX)?|gfx[0-9a-f]{3,4}", "arch list entry", "9.0")]
"""An entry of torch's arch variable: "9.0", "9.0a", "12.0+PTX" (CUDA), "22" (MUSA) or gfx942 (ROCm)."""


class ArchFloor(StrictModel):
    """The oldest architecture that builds every kernel, as the arch variable and the device
    compiler's arch macro write it; a build for an older one is refused with ``reason``."""

    entry: Annotated[str, _Matching(r"[0-9]+(\.[0-9]+)?", "numeric arch list entry", "22")]
    macro: ArchMacro
    """Defined in device compilation only, e.g. __MUSA_ARCH__."""
    value: StrictInt = Field(ge=1, le=100000)
    """``macro``'s value for ``entry``, e.g. 220 for MUSA's 22."""
    reason: Text


class Build(StrictModel):
    extension: Literal["CppExtension", "CUDAExtension", "MUSAExtension"]
    extension_module: PythonName
    build_ext: PythonName
    compiler_key: CompilerKey | None
    """Key of the device compiler in ``extra_compile_args`` (nvcc, mcc)."""
    host_flags: tuple[HostFlag, ...]
    device_flags: tuple[DeviceFlag, ...]
    toolkit_home: PythonName | None
    """Attribute that is None when the device toolkit is missing (e.g. cpp_extension's CUDA_HOME)."""
    toolkit_hint: Text
    """What to do when the toolkit or the platform's torch build is missing."""
    arch_env: ArchEnv | None
    """The variable torch's extension builder reads its target architectures from."""
    archs: tuple[ArchEntry, ...]
    """Written into ``arch_env`` only when no device is visible to build for (or when asked): a
    build on a machine with a device keeps torch's own choice."""
    arch_floor: ArchFloor | None = None
    """The oldest architecture every kernel builds for, where the vendor's headers set one."""
    strip_flags: tuple[StripFlag, ...] = ()
    """Flags the extension builder adds by itself that the wheel must not carry (e.g. -march=native)."""
    arch_macros: dict[ArchEntry, ArchMacro] = {}
    """The macro device compilation defines for an arch-specific target ("9.0a"), so that a kernel
    whose ``archs`` name it compiles its body for that target alone and a stub for the others."""

    @model_validator(mode="after")
    def _archs_respect_the_floor(self) -> Build:
        if self.archs and self.arch_env is None:
            raise ValueError("archs need arch_env, the variable that carries them to the extension builder")
        if self.arch_floor is not None:
            below = [arch for arch in self.archs if arch_number(arch) < arch_number(self.arch_floor.entry)]
            if below:
                raise ValueError(f"archs {', '.join(below)} are below arch_floor {self.arch_floor.entry} ({self.arch_floor.reason})")
        return self


def arch_number(entry: str) -> float:
    """The number of a numeric arch list entry ("8.0", "12.0+PTX", "22"); a named one (gfx942) is 0."""
    head = entry.split("+", 1)[0].rstrip("abf")
    try:
        return float(head)
    except ValueError:
        return 0.0


class Detection(StrictModel):
    """How the generated runtime recognises the platform of a tensor or process."""

    import_module: PythonName | None
    available: PythonName | None
    """Callable that says whether a device is present; null: always available (the host)."""
    version_attr: PythonName | None
    version_attr_set: StrictBool
    order: StrictInt = Field(ge=0, le=99)
    """Lower is checked first: MUSA before CUDA, since torch_musa can coexist with a CUDA torch."""


class Wheel(StrictModel):
    """The PyTorch-style local version label, e.g. +cu130, +rocm5.2, +cpu."""

    label: Annotated[str, _Matching(r"[a-z]+(\{version\})?", "wheel label", "cu{version}")]
    version_from: PythonName | None
    """Where {version} comes from at build time (e.g. torch.version.cuda); it must be set."""
    version_parts: StrictInt = Field(default=2, ge=1, le=3)
    version_separator: Literal["", "."] = ""
    pins: tuple[Annotated[str, _Matching(r"[A-Za-z][A-Za-z0-9_-]{0,63}", "distribution name", "torch_musa")], ...] = ()
    """Distributions besides torch whose binary the extension links against: the wheel requires
    the release it was built with (torch itself is always pinned, to its minor version)."""


class PlatformSpec(StrictModel):
    name: Identifier
    display_name: Text
    kind: Literal["host", "device"]
    source_suffix: Suffix
    compiler: Text
    headers: Headers
    types: DeviceTypes
    runtime: RuntimeApi | None
    intrinsics: Intrinsics
    torch: TorchBinding
    build: Build
    detection: Detection
    max_grid_blocks: StrictInt | None = Field(default=None, ge=1, le=(1 << 31) - 1)
    """Blocks a strided grid may launch, and the limit of a grid's second axis (device platforms)."""
    shared_memory_without_opt_in: StrictInt | None = Field(default=None, ge=1024, le=1 << 24)
    """Bytes of dynamic shared memory a block may use before a kernel must opt in to more (device platforms)."""
    wheel: Wheel

    @model_validator(mode="after")
    def _contraction_off(self) -> PlatformSpec:
        """Numerics are contraction off in source and flags: the source's mul_rn and add_rn may be
        plain operators only because the flags keep the compilers from fusing them."""
        if vocabulary.HOST_CONTRACTION_OFF not in self.build.host_flags:
            raise ValueError(
                f"build.host_flags lacks {vocabulary.HOST_CONTRACTION_OFF}: without it the host compiler may fuse a multiply and an add "
                "into one rounding, which changes the kernels' bits"
            )
        if self.kind == "device":
            needed = vocabulary.DEVICE_CONTRACTION_OFF.get(self.compiler)
            if needed is None:
                raise ValueError(f"Unknown device compiler {self.compiler}. Expected one of {', '.join(sorted(vocabulary.DEVICE_CONTRACTION_OFF))}")
            missing = sorted(needed - set(self.build.device_flags))
            if missing:
                raise ValueError(
                    f"build.device_flags lacks {', '.join(missing)}: without {'them' if len(missing) > 1 else 'it'} {self.compiler} may fuse a multiply "
                    "and an add into one rounding, which changes the kernels' bits"
                )
        return self

    @model_validator(mode="after")
    def _types_of_the_runtimes_vendor(self) -> PlatformSpec:
        """The stream and error types are the runtime's own vendor's (a hipStream_t handed to CUDA's
        launches would compile where the types convert, and mean another runtime's stream)."""
        if self.runtime is not None:
            vendor = vocabulary.vendor_of(self.runtime.success)
            for field in ("stream", "error"):
                value = getattr(self.types, field)
                if value is not None and not value.startswith(vendor):
                    raise ValueError(f"types.{field} is {value}, not of the runtime's vendor {vendor} (runtime.success: {self.runtime.success})")
        return self

    @model_validator(mode="after")
    def _device_needs_runtime(self) -> PlatformSpec:
        if self.kind == "device":
            missing = [
                field
                for field, value in (
                    ("runtime", self.runtime),
                    ("headers.runtime", self.headers.runtime),
                    ("types.stream", self.types.stream),
                    ("torch.stream_getter", self.torch.stream_getter),
                    ("torch.launch_check", self.torch.launch_check),
                    ("build.compiler_key", self.build.compiler_key),
                    ("max_grid_blocks", self.max_grid_blocks),
                    ("shared_memory_without_opt_in", self.shared_memory_without_opt_in),
                )
                if value is None
            ]
            if missing:
                raise ValueError(f"a device platform needs {', '.join(missing)}")
        return self


# --------------------------------------------------------------------------- operators

DtypeRef = Annotated[
    str,
    AfterValidator(
        _pattern(r"[A-Z]|float32|float16|bfloat16|int64|int32|bool", "dtype", "float32, float16, bfloat16, int64, int32, bool or a dtype variable such as T")
    ),
]
Size = Annotated[StrictInt, Field(ge=-(1 << 31), le=1 << 31)]


class TestValues(StrictModel):
    """How the generated tests fill an argument: integers in [low, high), where high may be a
    dimension name; ``include`` values are planted at every ``every``-th element (e.g. ignore_index).
    The integers are stored in the argument's dtype, a float one included (a float32 logsumexp of
    16 to 23); each must be one that every dtype the argument may take holds exactly."""

    low: Size = 0
    high: Size | DimName = 2
    include: tuple[Size, ...] = Field(default=(), max_length=16)
    every: StrictInt = Field(default=5, ge=1, le=1000)

    @model_validator(mode="after")
    def _range_is_not_empty(self) -> TestValues:
        if isinstance(self.high, int) and self.low >= self.high:
            raise ValueError(f"low {self.low} must be below high {self.high} (the range [low, high) is empty)")
        return self


class TensorArg(StrictModel):
    name: Identifier
    dtype: DtypeRef
    """float32, float16, bfloat16, int64, int32, bool, or a dtype variable of ``dtype_vars`` (one capital letter)."""
    shape: tuple[DimName, ...] = Field(max_length=8)
    """Symbolic sizes, e.g. [M, K]; a name used twice means the same size."""
    optional: StrictBool = False
    """Schema ``Tensor?``: the kernel receives a null pointer when it is absent."""
    values: TestValues | None = None
    """How the generated tests fill the argument: integers drawn from a range and planted, stored in
    its dtype (without it, a float argument is drawn from a normal distribution, an integer or bool
    one from [0, 2)).  Every value must be one the dtype holds exactly, for each dtype a dtype
    variable may take."""
    doc: Text = ""


Bound = StrictInt | FiniteFloat


class AttrRange(StrictModel):
    """The values a number attribute may take, as bounds a call is checked against (by the
    bindings' C++ and the runtime's Python, with the same message).  A float attribute is always
    checked finite and within float32's range, which the kernels receive; these bounds narrow it."""

    above: Bound | None = None
    """Exclusive lower bound: the value must be greater."""
    at_least: Bound | None = None
    """Inclusive lower bound."""
    below: Bound | None = None
    """Exclusive upper bound: the value must be smaller."""
    at_most: Bound | None = None
    """Inclusive upper bound."""

    @model_validator(mode="after")
    def _one_bound_per_side(self) -> AttrRange:
        if self.above is not None and self.at_least is not None:
            raise ValueError("give one lower bound: above or at_least, not both")
        if self.below is not None and self.at_most is not None:
            raise ValueError("give one upper bound: below or at_most, not both")
        if all(b is None for b in (self.above, self.at_least, self.below, self.at_most)):
            raise ValueError("give at least one bound: above, at_least, below or at_most")
        return self

    def bounds(self) -> tuple[tuple[str, int | float], ...]:
        """``(relation, bound)`` pairs the value must satisfy, lower first: ``(">", 0)``."""
        pairs = ((">", self.above), (">=", self.at_least), ("<", self.below), ("<=", self.at_most))
        return tuple((relation, bound) for relation, bound in pairs if bound is not None)

    def admits(self, value: float) -> bool:
        tests = {">": value.__gt__, ">=": value.__ge__, "<": value.__lt__, "<=": value.__le__}
        return all(tests[relation](bound) for relation, bound in self.bounds())


class Attr(StrictModel):
    """A scalar attribute (``float eps=1e-06`` in the torch schema); kernels see it as float32/int64/bool."""

    name: Identifier
    type: Literal["float", "int", "bool"]
    default: StrictBool | StrictInt | FiniteFloat
    range: AttrRange | None = None
    """The values a call may pass (a number attribute only); the default must lie in it."""
    doc: Text = ""

    @model_validator(mode="after")
    def _default_matches_type(self) -> Attr:
        kinds = {"float": (float, int), "int": (int,), "bool": (bool,)}[self.type]
        if isinstance(self.default, bool) != (self.type == "bool") or not isinstance(self.default, kinds):
            raise ValueError(f"default {self.default!r} is not a {self.type}")
        if isinstance(self.default, float) and not math.isfinite(self.default):
            raise ValueError(f"default {self.default!r} is not a finite number")
        if self.type == "float" and (trouble := float32_trouble(self.default)):
            raise ValueError(f"default {self.default!r} {trouble}, which the kernels receive")
        if self.type == "int" and not INT64_MIN <= self.default <= INT64_MAX:
            raise ValueError(f"default {self.default!r} does not fit int64, which the torch schema and kernels receive")
        if self.range is not None:
            if self.type == "bool":
                raise ValueError("a bool attribute has no range")
            for relation, bound in self.range.bounds():
                if self.type == "int" and not isinstance(bound, int):
                    raise ValueError(f"range bound {bound!r} of an int attribute is not an int")
                if self.type == "float" and (trouble := float32_trouble(bound)):
                    raise ValueError(f"range bound {bound!r} {trouble}, which the kernels receive")
                if self.type == "int" and not INT64_MIN <= bound <= INT64_MAX:
                    raise ValueError(f"range bound {bound!r} does not fit int64")
            if not isinstance(self.default, bool) and not self.range.admits(self.default):
                shown = " and ".join(f"{relation} {bound!r}" for relation, bound in self.range.bounds())
                raise ValueError(f"default {self.default!r} is outside the attribute's range ({shown})")
        return self


class Output(StrictModel):
    name: Identifier
    dtype: DtypeRef
    shape: tuple[DimName, ...] = Field(max_length=8)
    float32_if: Identifier | None = None
    """A bool attribute that, when true, makes this output float32 instead of ``dtype``."""
    differentiable: StrictBool = True
    """False for an output no gradient flows into (a saved statistic such as rstd or lse)."""
    doc: Text = ""


class DimConstraint(StrictModel):
    """A rule on one dimension: a divisor, equality with another dimension plus a number, or
    equality with the number of true/nonzero entries of an argument (checked on the data, so it
    waits for the device)."""

    dim: DimName
    multiple_of: StrictInt | None = Field(default=None, ge=2, le=1 << 20)
    """At least 2: every size is a multiple of 1."""
    multiple_of_dim: DimName | None = None
    """Another dimension (query heads a multiple of key/value heads); a size 0 divides only 0."""
    count_nonzero_of: Identifier | None = None
    equals_dim: DimName | None = None
    """Another dimension this one equals, plus ``plus`` (offsets of B sequences: B1 = B + 1)."""
    plus: StrictInt = Field(default=0, ge=-64, le=64)
    """Added to ``equals_dim``'s size; only with ``equals_dim``."""

    @model_validator(mode="after")
    def _one_rule(self) -> DimConstraint:
        if sum(rule is not None for rule in (self.multiple_of, self.multiple_of_dim, self.count_nonzero_of, self.equals_dim)) != 1:
            raise ValueError("give exactly one of multiple_of, multiple_of_dim, count_nonzero_of and equals_dim")
        if self.plus != 0 and self.equals_dim is None:
            raise ValueError("plus is added to equals_dim's size: give it only with equals_dim")
        return self


class Reduction(StrictModel):
    """The order every kernel of the op must reduce in; kernels render exactly this order.

    ascending:  one float32 accumulator adds the terms in index order.
    online_blocks: the terms in blocks of ``block`` consecutive indices, blocks in ascending order,
                aligned to index 0 of each sequence (never to a query or a chunk); a running
                maximum m and sum l are rescaled by e^(m_old - m_new) at each block, the block's
                terms summed by a lanes tree of ``block`` lanes (attention's softmax).
    k_tree:     leaves of ``leaf`` terms summed ascending in float32 and rounded once to the
                output dtype, then combined pairwise by mid-split with adds in the output dtype.
    lanes_tree: ``lanes`` float32 partial sums (lane l adds terms l, l+lanes, ... ascending),
                then combined by a pairwise tree (lane i += lane i+half, half = lanes/2, ..., 1).
    pair_chunks: the terms in chunks of ``chunk`` consecutive indices from index 0 (the last one
                padded with zero terms), chunks in ascending order; per chunk two float32 sums
                start at +0, one over the chunk's even indices and one over its odd indices, each
                ascending, then acc = acc + (even + odd).  Subnormal inputs read as zeros of their
                sign, and every result below 2^-126 in magnitude (rounded with an unbounded
                exponent) becomes a zero of its sign: what AMX's TDPBF16PS computes per tile step
                (chunk 32).

    ``step`` is how each term joins its accumulator, and ``inner`` names a reduction that
    computes each term (linear_logp's logit, a dot over H, is each term of its sum over V).
    """

    dim: DimName
    order: Literal["ascending", "k_tree", "lanes_tree", "online_blocks", "pair_chunks"]
    accumulator: Literal["float32"]
    chunk: StrictInt | None = Field(default=None, ge=2, le=1024)
    leaf: StrictInt | None = Field(default=None, ge=1, le=4096)
    lanes: StrictInt | None = Field(default=None, ge=2, le=1024)
    block: StrictInt | None = Field(default=None, ge=2, le=1024)
    step: Literal["add", "fma"] = "add"
    """add: the term, rounded to float32 (a product a * b is rounded on its own), then added, one
    more rounding.  fma: each term is a product a * b joined by one fused multiply-add,
    acc = fma(a, b, acc), rounded once; fma is correctly rounded on every host and device, so it
    gives the same bits everywhere, in an instruction where the hardware has one."""
    inner: Reduction | None = None
    """The reduction that computes each term, when a term is itself a sum (a dot product)."""

    @model_validator(mode="after")
    def _parameters_fit_order(self) -> Reduction:
        if (self.order == "k_tree") != (self.leaf is not None):
            raise ValueError("leaf is required for order k_tree, and only for it")
        if (self.order == "lanes_tree") != (self.lanes is not None):
            raise ValueError("lanes is required for order lanes_tree, and only for it")
        if (self.order == "online_blocks") != (self.block is not None):
            raise ValueError("block is required for order online_blocks, and only for it")
        if (self.order == "pair_chunks") != (self.chunk is not None):
            raise ValueError("chunk is required for order pair_chunks, and only for it")
        if self.order == "pair_chunks" and self.step != "fma":
            raise ValueError("order pair_chunks joins each term by one fused multiply-add: it needs step: fma")
        for name, value in (("lanes", self.lanes), ("block", self.block), ("chunk", self.chunk)):
            if value is not None and value & (value - 1):
                raise ValueError(f"{name} must be a power of two, got {value}")
        if self.inner is not None and self.inner.dim == self.dim:
            raise ValueError(f"inner reduces over {self.dim}, the dimension of the reduction it computes terms for; it needs a dimension of its own")
        return self


class DynamicDim(StrictModel):
    """An output dimension known only from the data, e.g. the number of true entries of a mask."""

    count_nonzero: Identifier
    """The argument whose nonzero entries are counted (synchronises with the device)."""


class DerivedDim(StrictModel):
    """An output dimension a fixed offset from an argument's, e.g. B1 = B + 1 for cu_seqlens."""

    dim: DimName
    plus: StrictInt = Field(ge=-64, le=64)


class BackwardStep(StrictModel):
    """One call of the backward pass: ``op(*args)`` returns the gradients of ``gives``, in order.

    An arg is a forward argument or output name, or ``grad(<output>)`` for the incoming gradient.
    A ``null`` in ``gives`` drops that output of the step (e.g. pack's cu_seqlens in unpack's backward).
    """

    op: Identifier
    args: tuple[Annotated[str, _Matching(r"grad\([a-z][a-z0-9_]*\)|[a-z][a-z0-9_]*", "backward argument", "grad(y)")], ...]
    gives: tuple[Identifier | None, ...] = Field(min_length=1)
    attrs: tuple[Identifier, ...] | None = None
    """Attributes passed on; null: every attribute the step's op shares by name with this op."""


Autocast = Literal["lower_precision", "float32", "none"]
AUTOCAST: dict[str, str] = {
    "lower_precision": "cast to the autocast dtype (bfloat16 or float16), as torch does mm, linear and sdpa",
    "float32": "cast to float32, as torch does log_softmax, sum, norms and losses",
    "none": "run on the inputs as given, as torch does embedding, silu and elementwise ops",
}
"""The autocast policies an op may declare."""


# Headers rendered next to a platform's kernels only when a kernel there asks for them
# (templates/package/<name>.j2).
SupportHeader = Literal["rlk_tensor_core.h"]


def _at_most(limit: int, what: str) -> Callable[[bool | int | str], bool | int | str]:
    def check(value: bool | int | str) -> bool | int | str:
        if isinstance(value, int) and not isinstance(value, bool) and not 1 <= value <= limit:
            raise ValueError(f"{what} must be between 1 and {limit}, got {value}")
        return value

    return check


TileRows = Annotated[StrictInt | Identifier, AfterValidator(_at_most(MAX_TILE_ROWS, "rows"))]
TileReduction = Annotated[StrictInt | Identifier, AfterValidator(_at_most(MAX_TILE_REDUCTION, "a reduction step"))]
TileStages = Annotated[StrictInt | Identifier, AfterValidator(_at_most(MAX_STAGES, "stages"))]
"""A size in rows or elements, or a step count, or the name of one of the kernel's integer ``params``
that holds it (``contracts`` holds the param to the same bound)."""


class Tiles(StrictModel):
    """The extents at which a kernel's work changes shape: the generated tests cross each of them.

    A kernel that claims ``batch_invariant`` must say how many rows of the batch dimension one
    block or tile covers (``rows``); one that reduces must say how many elements of the reduction
    dimension one step consumes (``reduction``) and how many steps are in flight (``stages``).
    Each may list several values where code paths differ (a device tile and a host strip).
    """

    rows: tuple[TileRows, ...] = Field(default=(), max_length=8)
    reduction: tuple[TileReduction, ...] = Field(default=(), max_length=8)
    stages: TileStages = 1


class NativeKernel(StrictModel):
    kind: Literal["native"]
    template: Annotated[str, _Matching(r"kernels/[a-z0-9_]+\.j2", "kernel template", "kernels/det_gemm_simt.j2")]
    guarantees: tuple[Guarantee, ...]
    functor: Identifier | None = None
    """The per-element math of an elementwise kernel (kernels/elementwise.j2): the file
    templates/kernels/functors/<functor>.j2, one of those the project has."""
    platforms: tuple[Identifier, ...] | None = None
    """Platforms the template can render for (e.g. a tensor-core kernel); null: every platform."""
    params: dict[Identifier, Annotated[StrictBool | StrictInt, AfterValidator(_at_most(MAX_PARAM, "an integer param"))]] = {}
    """Template parameters, so one template serves several ops (e.g. operand layouts)."""
    support_headers: tuple[SupportHeader, ...] = ()
    """Package headers the kernel includes beyond the ones every kernel may use."""
    reduction_for: dict[Dtype, Reduction] = Field(default={}, max_length=3)
    """Operand dtypes for which this kernel reduces in another order than the op's ``reduction``
    (e.g. ``bfloat16: {order: pair_chunks, ...}``): the order its template states for them.  Such a
    kernel gives other bits than the op's other kernels for those dtypes, so it cannot claim
    ``portable``."""
    tiles: Tiles | None = None
    """Where the kernel's work changes shape; the generated tests take their sizes from it."""
    archs: tuple[ArchEntry, ...] = Field(default=(), max_length=1)
    """The one arch-specific target the kernel's instructions need (e.g. "9.0a"): each platform it
    renders for must build that arch and name its macro (``build.arch_macros``); its launcher runs
    it on a device of that architecture only and hands every other device to the next backend."""
    doc: Text = ""


class ReferenceKernel(StrictModel):
    """A Python callable: the op's reference, or a baseline to compare with.  It carries no
    guarantee, since nothing generated controls its reduction order (``contracts`` refuses one)."""

    kind: Literal["reference"]
    python: DottedName
    """The callable, e.g. torch.matmul or rlkernels._references.det_gemm."""
    kwargs: dict[Identifier, StrictBool | StrictInt | FiniteFloat | Annotated[str, _Matching(IDENTIFIER, "keyword value", "tanh")]] = Field(
        default={}, max_length=8
    )
    """Keyword arguments the callable is always called with, after the op's own (e.g.
    ``approximate: tanh`` for torch.nn.functional.gelu)."""
    guarantees: tuple[Guarantee, ...] = ()
    doc: Text = ""


Kernel = Annotated[NativeKernel | ReferenceKernel, Field(discriminator="kind")]


def _fits_a_test_run(shape: dict[str, int]) -> dict[str, int]:
    if math.prod(shape.values()) > MAX_TEST_ELEMENTS:
        sizes = " x ".join(f"{d}={n}" for d, n in shape.items())
        raise ValueError(f"shape {sizes} is {math.prod(shape.values())} elements, more than the {MAX_TEST_ELEMENTS} a CPU test run can afford")
    return shape


class Sequences(StrictModel):
    """Packed variable-length sequences (the flash-attention varlen layout): rows of a dimension
    belong to sequences whose boundaries an int argument holds as offsets (cu_seqlens).

    The generated tests fill each offsets argument with a valid split of its dimension, and check
    that a sequence's rows of every output that has that dimension do not depend on the other
    sequences packed with it (``batch_invariant`` for such ops).  With ``prefix``, the first
    dimension's rows (queries) see the second's (keys) aligned to the end, each query only the
    keys up to its own position: then a sequence's queries in chunks, each against its whole
    prefix (chunked prefill), and one query against the cached keys (decode) must give the bits
    of one pass."""

    offsets: dict[DimName, Identifier] = Field(min_length=1, max_length=2)
    """Dimension → the argument of shape [sequences + 1] holding its offsets."""
    prefix: StrictBool = False
    prefix_if: Identifier | None = None
    """A bool attribute under which alone ``prefix`` holds (attention's ``causal``)."""


class PackedEquivalent(StrictModel):
    """The op of packed sequences (``tests.sequences`` with a queries' and a keys' dimension) whose
    bits a paged op gives on the same keys: ``args`` are the paged op's arguments, in the order
    of the packed op's.  A cache becomes the packed keys' rows (each sequence's keys in order,
    the sequences back to back), the lengths become the keys' offsets, and every other argument
    (the queries, their offsets) is passed as it is; attributes go by name."""

    op: Identifier
    args: tuple[Identifier, ...] = Field(min_length=1, max_length=16)


class Paged(StrictModel):
    """Sequences whose keys lie in a paged cache (vLLM's layout): key j of sequence b is row
    j % BS of block block_table[b, j / BS] of each cache [NB, BS, ...], and its queries are
    packed rows of ``queries``, aligned to the end of its ``lengths[b]`` keys.

    The generated tests hold a sequence's rows, bit for bit, to the same whatever the placement
    of its blocks (shuffled, other sequences' blocks and unused ones among them), the block size
    (on either side of the kernel's reduction block), and the other sequences of the step; with
    ``prefix`` (under ``prefix_if``), its queries in one pass, in chunks against their prefix and
    one at a time (decode) give the same bits; with ``packed``, they are the packed op's bits."""

    queries: DimName
    """The packed queries' dimension: the first of the outputs whose rows the sequences own."""
    query_offsets: Identifier
    """The argument of shape [sequences + 1] holding the queries' offsets (query_start_loc)."""
    lengths: Identifier
    """The argument of shape [sequences] holding each sequence's number of keys (seq_lens)."""
    block_table: Identifier
    """The argument of shape [sequences, blocks per sequence] holding each key block's cache block."""
    caches: tuple[Identifier, ...] = Field(min_length=1, max_length=4)
    """The arguments of shape [cache blocks, block size, ...] holding the keys' rows."""
    prefix: StrictBool = True
    prefix_if: Identifier | None = None
    """A bool attribute under which alone ``prefix`` holds (attention's ``causal``)."""
    packed: PackedEquivalent | None = None


class TestPlan(StrictModel):
    """Shapes the generated contract tests use, scaled to run on a CPU in seconds."""

    shapes: tuple[Annotated[dict[DimName, Annotated[StrictInt, Field(ge=1, le=1 << 16)]], AfterValidator(_fits_a_test_run)], ...] = Field(min_length=1, max_length=16)
    """Sizes of every dimension of the required arguments; the first shape, every size at least 2, builds the bad-input cases."""
    batch_dim: DimName | None = None
    """The dimension whose size must not change any row's bits; null when the op has none.
    The batch sizes, chunk and pad splits come from each kernel's ``tiles``."""
    sequences: Sequences | None = None
    paged: Paged | None = None
    variants: tuple[dict[Identifier, StrictBool | StrictInt | FiniteFloat], ...] = Field(default=(), max_length=4)
    """Attribute settings the contract tests also run under (e.g. a sliding window)."""



# --------------------------------------------------------------------------- bench cases

TorchBaseline = Literal[
    "linear", "matmul_tn", "silu_mul", "silu", "rms_norm", "log_softmax_gather", "linear_log_softmax_gather", "embedding", "rotary_llama", "sdpa_causal"
]
"""PyTorch code a benchmark may compare an op with, by name.  tools/bench/baselines.py holds the
callable behind each name: a closed vocabulary, so a spec never names code to run."""

LayerDim = Literal["tokens", "hidden", "intermediate", "vocab", "heads", "kv_heads", "head_dim"]
"""A size of the decoder layer whose ops tools/bench's model table measures, at each of its model
sizes: tokens T, hidden H, MLP width I, vocabulary V, query heads, key/value heads, head dim."""

BenchSize = Annotated[StrictInt, Field(ge=1, le=1 << 20)]


def _layer_size(value: int | str) -> int | str:
    if isinstance(value, int) and not 1 <= value <= 1 << 20:
        raise ValueError(f"a size must be between 1 and {1 << 20}, got {value}")
    if isinstance(value, str) and value not in get_args(LayerDim):
        raise ValueError(f"{value!r} is not a size of the layer ({', '.join(get_args(LayerDim))})")
    return value


LayerSize = Annotated[StrictInt | str, AfterValidator(_layer_size)]


class BenchBaseline(StrictModel):
    """What the op is timed against: PyTorch code by name, or a reference kernel of the same spec."""

    torch: TorchBaseline | None = None
    kernel: Identifier | None = None
    """A kernel of ``kind: reference`` declared in the same spec (e.g. torch_matmul)."""

    @model_validator(mode="after")
    def _one_baseline(self) -> BenchBaseline:
        if (self.torch is None) == (self.kernel is None):
            raise ValueError("give exactly one of torch (a PyTorch baseline by name) and kernel (a reference kernel of this op)")
        return self


class LayerCase(StrictModel):
    """Where the decoder layer calls the op: a row kind of the model table."""

    sizes: dict[DimName, LayerSize]
    """Every dimension of the op's required arguments: a number, or a size of the layer."""
    label: Text | None = None
    """The row's name (default: the op's name)."""
    backward: StrictBool = False
    """Also time the forward and the backward together (the op needs a ``backward``)."""


class Bench(StrictModel):
    """How tools/bench and tools/gpu_check.py's benchmark measure the op: against what, at which
    sizes, in which dtypes.  The inputs are drawn from the signature; nothing here is code."""

    baseline: BenchBaseline
    dtypes: tuple[Literal["float32", "float16", "bfloat16"], ...] = Field(min_length=1, max_length=3)
    """Every dtype variable of the op takes each of these in turn."""
    shapes: tuple[dict[DimName, BenchSize], ...] = Field(default=(), max_length=16)
    """Sizes of the op's own benchmark rows (every dimension of its required arguments)."""
    layer: tuple[LayerCase, ...] = Field(default=(), max_length=16)
    """The op inside the decoder layer: rows of the model table."""


def _bench_problems(bench: Bench, info: ValidationInfo) -> list[tuple[tuple[str | int, ...], str]]:
    """Where ``bench`` does not fit the op it belongs to (the fields validated before it), and why."""
    problems: list[tuple[tuple[str | int, ...], str]] = []
    kernels = info.data.get("kernels")
    name = bench.baseline.kernel
    if name is not None and kernels is not None and not isinstance(kernels.get(name), ReferenceKernel):
        references = sorted(k for k, v in kernels.items() if isinstance(v, ReferenceKernel))
        problems.append((("baseline", "kernel"), f"{name} is not a kernel of kind reference of this op (its reference kernels: {', '.join(references) or 'none'})"))
    dtype_vars = info.data.get("dtype_vars")
    if dtype_vars is not None:
        for index, dtype in enumerate(bench.dtypes):
            refused = [var for var, allowed in dtype_vars.items() if Dtype(dtype) not in allowed]
            if refused:
                problems.append((("dtypes", index), f"{dtype} is not a dtype that dtype variable {refused[0]} allows"))
    args = info.data.get("args")
    if args is not None:
        bound = {d for a in args if not a.optional for d in a.shape}
        cases: list[tuple[tuple[str | int, ...], set[str]]] = [(("shapes", i), set(shape)) for i, shape in enumerate(bench.shapes)]
        cases += [(("layer", i, "sizes"), set(case.sizes)) for i, case in enumerate(bench.layer)]
        for where, dims in cases:
            if dims != bound:
                problems.append((where, f"gives the dimensions {', '.join(sorted(dims)) or 'none'}; it must give exactly {', '.join(sorted(bound))}"))
    if "backward" in info.data and not info.data["backward"]:
        problems += [(("layer", i, "backward"), "the op declares no backward to time") for i, case in enumerate(bench.layer) if case.backward]
    return problems


class OpSpec(StrictModel):
    name: Identifier
    """The public function (``rlkernels.<name>``) and the torch op (``torch.ops.rlkernels.<name>``)."""
    summary: Text
    """One line: the operator table, REGISTRY.md and the docstrings show it."""
    aliases: tuple[Identifier, ...] = ()
    """More public names for the same function (e.g. det_linear)."""
    dtype_vars: dict[TypeVar, Annotated[tuple[Dtype, ...], Field(min_length=1)]] = {}
    """Dtype variable → the floating dtypes it ranges over; the tests run every combination."""
    args: tuple[TensorArg, ...] = Field(min_length=1)
    """The tensor arguments, in the signature's order; optional ones last."""
    attrs: tuple[Attr, ...] = ()
    """Scalar attributes, after the tensors in the signature."""
    outputs: tuple[Output, ...] = Field(min_length=1)
    dynamic_dims: dict[DimName, DynamicDim] = {}
    derived_dims: dict[DimName, DerivedDim] = {}
    leading_dim: DimName | None = None
    """A first dimension callers may pass as several ([B, T, H] for [N, H]): the public function
    flattens them for the kernels and restores them on the outputs."""
    constraints: tuple[DimConstraint, ...] = ()
    """Rules on sizes the input checks enforce, each naming the dimension."""
    reduction: Reduction | None = None
    """The order every kernel reduces in; null for an op without a reduction."""
    tolerance: Identifier
    """A class of the package's ``tolerances``: accuracy against the reference."""
    reference: Identifier
    """The kernel (of kind reference) the tests compare every kernel with."""
    requires: tuple[Guarantee, ...]
    """The guarantees every backend listed for the op must keep; generate refuses one that lacks any."""
    kernels: dict[Identifier, Kernel] = Field(min_length=1)
    """Every implementation: native kernels (a template) and Python references."""
    backends: dict[Identifier, tuple[Identifier, ...]]
    """Platform → the kernels that may run the op there, first available first; [] means unsupported. Every platform needs an entry."""
    tests: TestPlan
    backward: tuple[BackwardStep, ...] = ()
    """How autograd differentiates the op, with other ops of the catalog (never torch.matmul)."""
    autocast: Autocast = "none"
    """What ``torch.autocast`` does to the op's inputs, as torch's own autocast does to the aten op
    it stands for (``AUTOCAST``).  The arguments it casts are the floating ones whose dtype is a
    dtype variable; fixed-dtype arguments (a float32 logsumexp, int ids) keep theirs."""
    bench: Bench | None = None
    """What tools/bench times the op against, and at which sizes; null: no benchmark rows."""

    @field_validator("args")
    @classmethod
    def _test_values_fit_the_dtypes(cls, args: tuple[TensorArg, ...], info: ValidationInfo) -> tuple[TensorArg, ...]:
        """Every integer a test may store in an argument (``low``, ``high`` - 1 where ``high`` is a
        number, each of ``include``) is one each dtype the argument may take holds exactly
        (``EXACT_INTEGERS``); otherwise the tests would run on another value than the spec says."""
        dtype_vars = info.data.get("dtype_vars")
        if dtype_vars is None:
            return args  # dtype_vars failed its own validation, reported there
        problems: list[tuple[tuple[str | int, ...], str]] = []
        for index, arg in enumerate(args):
            values = arg.values
            if values is None:
                continue
            dtypes = [d.value for d in dtype_vars.get(arg.dtype, ())] if arg.dtype in dtype_vars else [arg.dtype]
            if not all(d in EXACT_INTEGERS for d in dtypes):
                continue  # an undeclared dtype variable, reported by the op's own check
            stored: list[tuple[tuple[str | int, ...], str, int]] = [(("values", "low"), "low", values.low)]
            if isinstance(values.high, int):
                stored.append((("values", "high"), "high - 1 (the greatest value of [low, high))", values.high - 1))
            stored += [(("values", "include", i), "include value", v) for i, v in enumerate(values.include)]
            for where, what, value in stored:
                for dtype in dtypes:
                    least, greatest = EXACT_INTEGERS[dtype]
                    if not least <= value <= greatest:
                        of = f"{dtype} (a dtype of {arg.dtype})" if arg.dtype in dtype_vars else dtype
                        problems.append(
                            ((index, *where), f"{what} {value} is not an integer that {of} holds exactly: argument {arg.name} stores only [{least}, {greatest}]")
                        )
                        break
        if problems:
            details = [InitErrorDetails(type=PydanticCustomError("values", message), loc=where, input=args) for where, message in problems]
            raise ValidationError.from_exception_data("args", details)
        return args

    @field_validator("bench")
    @classmethod
    def _bench_fits_the_op(cls, bench: Bench | None, info: ValidationInfo) -> Bench | None:
        problems = _bench_problems(bench, info) if bench is not None else []
        if problems:
            details = [InitErrorDetails(type=PydanticCustomError("bench", message), loc=where, input=bench) for where, message in problems]
            raise ValidationError.from_exception_data("bench", details)
        return bench

    # Rules local to one op; cross-file rules live in ``contracts``.
    @model_validator(mode="after")
    def _names_resolve(self) -> OpSpec:
        names = [a.name for a in self.args] + [a.name for a in self.attrs] + [o.name for o in self.outputs]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"duplicate argument/attribute/output names: {', '.join(dupes)}")
        declared: tuple[TensorArg | Output, ...] = (*self.args, *self.outputs)
        for tensor in declared:
            if len(tensor.dtype) == 1 and tensor.dtype not in self.dtype_vars:
                raise ValueError(f"{tensor.name}: dtype variable {tensor.dtype} is not declared in dtype_vars")
        all_dims = {d for t in declared for d in t.shape} | set(self.dynamic_dims) | set(self.derived_dims)
        optional_seen = False
        for arg in self.args:
            if arg.optional:
                optional_seen = True
            elif optional_seen:
                raise ValueError(f"argument {arg.name} is required but follows an optional argument; optional arguments come last")
        for var, dtypes in self.dtype_vars.items():
            if len(set(dtypes)) != len(dtypes):
                raise ValueError(f"dtype variable {var} lists a dtype twice")
            if any(d not in FLOAT_DTYPES for d in dtypes):
                raise ValueError(f"dtype variable {var} may only range over float32, float16 and bfloat16 (kernels dispatch on those)")
            if var in all_dims:
                raise ValueError(f"dtype variable {var} has the name of a dimension; both become C++ names in kernels")
            if not any(a.dtype == var and not a.optional for a in self.args):
                raise ValueError(f"dtype variable {var} is not the dtype of any required argument")
        bool_attrs = {a.name for a in self.attrs if a.type == "bool"}
        for out in self.outputs:
            if out.float32_if is not None and out.float32_if not in bool_attrs:
                raise ValueError(f"output {out.name}: float32_if names {out.float32_if}, which is not a bool attribute")
        bound = {d for a in self.args if not a.optional for d in a.shape}
        if self.leading_dim is not None:
            if self.leading_dim not in bound:
                raise ValueError(f"leading_dim {self.leading_dim} appears in no required argument's shape")
            for tensor in declared:
                if self.leading_dim in tensor.shape[1:]:
                    raise ValueError(f"leading_dim {self.leading_dim} must be the first dimension of {tensor.name}")
        for arg in self.args:
            for d in arg.shape:
                if d not in bound:
                    raise ValueError(f"argument {arg.name}: dimension {d} appears in no required argument's shape")
            if arg.values is not None and isinstance(arg.values.high, str) and arg.values.high not in bound:
                raise ValueError(f"argument {arg.name}: values.high {arg.values.high} is not a dimension")
        tensors = {a.name for a in self.args} | {o.name for o in self.outputs}
        for index, step in enumerate(self.backward):
            for source in step.args:
                name = source[5:-1] if source.startswith("grad(") else source
                if name not in tensors or (source.startswith("grad(") and name not in {o.name for o in self.outputs}):
                    raise ValueError(f"backward step {index}: {source} names no forward {'output' if source.startswith('grad(') else 'argument or output'}")
            if all(name is None for name in step.gives):
                raise ValueError(f"backward step {index}: gives no gradient (every entry is null)")
            for given in step.gives:
                if given is not None and given not in {a.name for a in self.args}:
                    raise ValueError(f"backward step {index}: gives {given}, which is not a forward argument")
        for dim, dynamic in self.dynamic_dims.items():
            if dim in bound:
                raise ValueError(f"dynamic dimension {dim} is already bound by an argument's shape")
            if dynamic.count_nonzero not in {a.name for a in self.args if not a.optional}:
                raise ValueError(f"dynamic dimension {dim}: {dynamic.count_nonzero} is not a required argument")
        for dim, derived in self.derived_dims.items():
            if dim in bound or dim in self.dynamic_dims:
                raise ValueError(f"derived dimension {dim} is already bound by an argument or a dynamic dimension")
            if derived.dim not in bound:
                raise ValueError(f"derived dimension {dim}: {derived.dim} appears in no required argument's shape")
        for out in self.outputs:
            for d in out.shape:
                if d not in bound and d not in self.dynamic_dims and d not in self.derived_dims:
                    raise ValueError(f"output {out.name}: dimension {d} does not appear in any argument's shape")
        output_dims = {d for out in self.outputs for d in out.shape}
        for kind, dims in (("dynamic", self.dynamic_dims), ("derived", self.derived_dims)):
            for dim in dims:
                if dim not in output_dims:
                    raise ValueError(f"{kind} dimension {dim} appears in no output's shape; use it or remove it")
        for c in self.constraints:
            if c.dim not in bound:
                raise ValueError(f"constraint on {c.dim}: no argument has that dimension")
            if c.multiple_of_dim is not None and (c.multiple_of_dim not in bound or c.multiple_of_dim == c.dim):
                raise ValueError(f"constraint on {c.dim}: multiple_of_dim {c.multiple_of_dim} is not another dimension of a required argument")
            if c.count_nonzero_of is not None and c.count_nonzero_of not in {a.name for a in self.args if not a.optional}:
                raise ValueError(f"constraint on {c.dim}: {c.count_nonzero_of} is not a required argument")
            if c.equals_dim is not None and (c.equals_dim not in bound or c.equals_dim == c.dim):
                raise ValueError(f"constraint on {c.dim}: equals_dim {c.equals_dim} is not another dimension of a required argument")
        reduction = self.reduction
        while reduction is not None:
            if reduction.dim not in bound:
                raise ValueError(f"reduction over {reduction.dim}: no argument has that dimension")
            reduction = reduction.inner
        if self.tests.batch_dim is not None and self.tests.batch_dim not in bound:
            raise ValueError(f"tests.batch_dim {self.tests.batch_dim}: no argument has that dimension")
        if self.tests.sequences is not None:
            if self.tests.batch_dim is not None:
                raise ValueError("tests: give batch_dim or sequences, not both (packed rows have no batch axis to slice)")
            int_args = {a.name: a for a in self.args if a.dtype in ("int32", "int64") and not a.optional}
            for dim, offsets in self.tests.sequences.offsets.items():
                if dim not in bound:
                    raise ValueError(f"tests.sequences.offsets: {dim} is not a dimension of a required argument")
                holder = int_args.get(offsets)
                if holder is None or len(holder.shape) != 1:
                    raise ValueError(f"tests.sequences.offsets.{dim}: {offsets} is not a required 1-D int32 or int64 argument")
            shapes = {self.args[[a.name for a in self.args].index(o)].shape for o in self.tests.sequences.offsets.values()}
            if len(shapes) != 1:
                raise ValueError("tests.sequences.offsets: the offsets arguments must share their shape (one entry per sequence boundary)")
            if self.tests.sequences.prefix and len(self.tests.sequences.offsets) != 2:
                raise ValueError("tests.sequences.prefix needs two offset dimensions: the queries', then the keys'")
            condition = self.tests.sequences.prefix_if
            if condition is not None and (not self.tests.sequences.prefix or condition not in {a.name for a in self.attrs if a.type == "bool"}):
                raise ValueError(f"tests.sequences.prefix_if: {condition} is not a bool attribute, or prefix is not set")
        if self.tests.paged is not None:
            self._check_paged(bound)
        attrs_by_name = {a.name: a for a in self.attrs}
        for index, variant in enumerate(self.tests.variants):
            for name, value in variant.items():
                attr = attrs_by_name.get(name)
                if attr is None:
                    raise ValueError(f"tests.variants[{index}]: {name} is not an attribute")
                if isinstance(value, bool) != (attr.type == "bool") or (attr.type == "int" and not isinstance(value, int)):
                    raise ValueError(f"tests.variants[{index}]: {name} = {value!r} is not a {attr.type}")
                if attr.type == "int" and not INT64_MIN <= value <= INT64_MAX:
                    raise ValueError(f"tests.variants[{index}]: {name} = {value!r} does not fit int64, which the kernels receive")
                if attr.type == "float" and (trouble := float32_trouble(value)):
                    raise ValueError(f"tests.variants[{index}]: {name} = {value!r} {trouble}, which the kernels receive")
        for index, shape in enumerate(self.tests.shapes):
            if set(shape) != bound:
                raise ValueError(f"tests.shapes entries must give exactly the dimensions {', '.join(sorted(bound))}")
            for c in self.constraints:
                if c.equals_dim is not None and shape[c.dim] != shape[c.equals_dim] + c.plus:
                    raise ValueError(
                        f"tests.shapes[{index}]: {c.dim} = {shape[c.dim]}, but the constraint says {c.dim} = {c.equals_dim} {'+' if c.plus >= 0 else '-'} "
                        f"{abs(c.plus)} = {shape[c.equals_dim] + c.plus}"
                    )
        small = sorted(d for d, size in self.tests.shapes[0].items() if size < 2)
        if small:
            # The bad-input tests start from the first shape: a size-1 dimension cannot be made
            # non-contiguous, and shrinking it leaves nothing.
            raise ValueError(f"tests.shapes: the first shape must have every dimension at least 2 (it builds the bad-input cases); {', '.join(small)} is 1")
        return self

    def _check_paged(self, bound: set[str]) -> None:
        """tests.paged names arguments of the roles it gives them, of the shapes those roles have."""
        paged = self.tests.paged
        assert paged is not None
        if self.tests.batch_dim is not None or self.tests.sequences is not None:
            raise ValueError("tests: give paged, or batch_dim or sequences, not several (a paged op's rows belong to its sequences)")
        args = {a.name: a for a in self.args if not a.optional}

        def arg(role: str, name: str, rank: int | None, integer: bool) -> TensorArg:
            found = args.get(name)
            if found is None:
                raise ValueError(f"tests.paged.{role}: {name} is not a required argument")
            if rank is not None and len(found.shape) != rank:
                raise ValueError(f"tests.paged.{role}: {name} must be {rank}-D, it has shape [{', '.join(found.shape)}]")
            if integer != (found.dtype in ("int32", "int64")):
                raise ValueError(f"tests.paged.{role}: {name} must be {'an int32 or int64' if integer else 'a floating'} tensor")
            return found

        if paged.queries not in bound:
            raise ValueError(f"tests.paged.queries: {paged.queries} is not a dimension of a required argument")
        offsets = arg("query_offsets", paged.query_offsets, 1, True)
        lengths = arg("lengths", paged.lengths, 1, True)
        table = arg("block_table", paged.block_table, 2, True)
        if table.shape[0] != lengths.shape[0]:
            raise ValueError(f"tests.paged.block_table: {table.name}'s first dimension must be {lengths.name}'s, the sequences ({lengths.shape[0]})")
        follows = [c for c in self.constraints if c.dim == offsets.shape[0] and c.equals_dim == lengths.shape[0] and c.plus == 1]
        if not follows:
            raise ValueError(
                f"tests.paged.query_offsets: {offsets.name} holds one offset more than there are sequences: constrain it "
                f"({{dim: {offsets.shape[0]}, equals_dim: {lengths.shape[0]}, plus: 1}})"
            )
        caches = [arg("caches", name, None, False) for name in paged.caches]
        for cache in caches:
            if len(cache.shape) < 2 or cache.shape[:2] != caches[0].shape[:2]:
                raise ValueError(f"tests.paged.caches: {cache.name} must have the blocks and the block size as its first two dimensions, as {caches[0].name}")
        if len(set(paged.caches)) != len(paged.caches):
            raise ValueError("tests.paged.caches: a cache is named twice")
        roles = [paged.query_offsets, paged.lengths, paged.block_table, *paged.caches]
        if len(set(roles)) != len(roles):
            raise ValueError("tests.paged: one argument is given two roles")
        if not any(out.shape[:1] == (paged.queries,) for out in self.outputs):
            raise ValueError(f"tests.paged.queries: no output has {paged.queries} as its first dimension")
        if paged.prefix_if is not None and (not paged.prefix or paged.prefix_if not in {a.name for a in self.attrs if a.type == "bool"}):
            raise ValueError(f"tests.paged.prefix_if: {paged.prefix_if} is not a bool attribute, or prefix is not set")
        if paged.packed is not None:
            for index, name in enumerate(paged.packed.args):
                if name not in args:
                    raise ValueError(f"tests.paged.packed.args[{index}]: {name} is not a required argument")
                if name == paged.block_table:
                    raise ValueError(f"tests.paged.packed.args[{index}]: the block table has no place among packed sequences' arguments")
