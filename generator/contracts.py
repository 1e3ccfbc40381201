"""The rules that span files, above all: no backend may break its op's contract.

Every rule lives here once and reports ``file:line: field: message``.  The
generator writes nothing unless ``check`` passes.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import get_args

from . import reserved, vocabulary
from .admission import admissible
from .errors import ContractError, SpecError, SpecProblem
from .load import PACKAGE_KEY, Catalog, SourceMap
from .model import (
    IDENTIFIER,
    MAX_STAGES,
    MAX_TILE_REDUCTION,
    MAX_TILE_ROWS,
    Dtype,
    Guarantee,
    NativeKernel,
    OpSpec,
    Output,
    ReferenceKernel,
    SupportHeader,
    TensorArg,
)
from .runtime_tree import PackageNames


def _one_of(kind: str, name: str, known: list[str]) -> str:
    return f"Unknown {kind} {name}. Expected one of {', '.join(sorted(known)) or '(none)'}"


def _op_problems(catalog: Catalog, op: OpSpec) -> tuple[list[SpecProblem], list[SpecProblem]]:
    src = catalog.op_source(op.name)
    platforms = [p.name for p in catalog.platforms]
    problems: list[SpecProblem] = []
    violations: list[SpecProblem] = []

    if op.tolerance not in catalog.package.tolerances:
        problems.append(src.problem(("tolerance",), _one_of("tolerance class", op.tolerance, list(catalog.package.tolerances))))
    reference = op.kernels.get(op.reference)
    if reference is None:
        problems.append(src.problem(("reference",), _one_of("kernel", op.reference, list(op.kernels))))
    elif not isinstance(reference, ReferenceKernel):
        problems.append(src.problem(("reference",), f"{op.reference} is a {reference.kind} kernel; the reference must be kind: reference"))

    for platform in op.backends:
        if platform not in platforms:
            problems.append(src.problem(("backends", platform), _one_of("platform", platform, platforms)))
    for platform in platforms:
        if platform not in op.backends:
            problems.append(
                src.problem(("backends",), f"no entry for platform {platform}; list its backends, or [] to mark the op unsupported there")
            )

    for platform, names in op.backends.items():
        for index, name in enumerate(names):
            path = ("backends", platform, index)
            if names.index(name) != index:
                problems.append(src.problem(path, f"backend {name} is listed twice for {platform}"))
                continue
            verdict = admissible(op, platform, name)
            if not verdict.declared:
                problems.append(src.problem(path, _one_of("backend", name, list(op.kernels))))
                continue
            if not verdict.runs_here:
                problems.append(
                    src.problem(path, f"kernel {name} cannot run on {platform}; it is written for {', '.join(verdict.written_for or ())} only")
                )
                continue
            offered = ", ".join(g.value for g in verdict.kept) or "none"
            if verdict.reference is not None:
                offered = f"none: a Python reference ({verdict.reference}) keeps none, whatever it declares"
            for missing in verdict.missing:
                violations.append(
                    src.problem(
                        path,
                        f"refusing to map op {op.name} on platform {platform} to backend {name}: "
                        f"it lacks the guarantee '{missing.value}' that {op.name} requires "
                        f"(requires: {', '.join(g.value for g in op.requires)}; "
                        f"{name} guarantees: {offered})",
                    )
                )
    ops = {o.name: o for o in catalog.ops}
    for index, step in enumerate(op.backward):
        target = ops.get(step.op)
        if target is None:
            problems.append(src.problem(("backward", index, "op"), _one_of("op", step.op, list(ops))))
            continue
        # Trailing optional arguments may be left out (the step's op then runs without them).
        required = sum(1 for a in target.args if not a.optional)
        if not required <= len(step.args) <= len(target.args):
            takes = f"{len(target.args)}" if required == len(target.args) else f"{required} to {len(target.args)}"
            problems.append(src.problem(("backward", index, "args"), f"{step.op} takes {takes} tensor arguments, got {len(step.args)}"))
        if len(step.gives) != len(target.outputs):
            problems.append(
                src.problem(("backward", index, "gives"), f"{step.op} returns {len(target.outputs)} outputs, gives lists {len(step.gives)}")
            )
        for attr_index, attr in enumerate(step.attrs or ()):
            if attr not in {a.name for a in op.attrs} or attr not in {a.name for a in target.attrs}:
                problems.append(src.problem(("backward", index, "attrs", attr_index), f"attribute {attr} is not shared by {op.name} and {step.op}"))
    problems += _backward_problems(catalog, src, op)
    problems += _packed_equivalent_problems(catalog, src, op)
    problems += _autocast_problems(src, op)
    problems += _layout_problems(src, op)
    # Batch invariance is defined on the outputs that carry the batch dimension; without one
    # the promise means nothing and no test could hold a kernel to it.
    # For packed sequences (tests.sequences) it is defined on the outputs whose rows belong to them.
    batch_dim = op.tests.batch_dim
    row_batched = batch_dim is not None and any(batch_dim in out.shape for out in op.outputs)
    packed = op.tests.sequences is not None and any(out.shape[:1] and out.shape[0] in op.tests.sequences.offsets for out in op.outputs)
    # A paged op's model holds an output led by its queries' dimension.
    paged = op.tests.paged is not None
    batched = row_batched or packed or paged
    if not batched:
        if batch_dim is not None:
            why = f"no output has the batch dimension {batch_dim}"
        elif op.tests.sequences is None:
            why = "the op names no batch dimension (tests.batch_dim), packed sequences (tests.sequences) or paged ones (tests.paged)"
        else:
            why = f"no output's first dimension is one of the packed dimensions {', '.join(op.tests.sequences.offsets)}"
        problems += _undefined_claims(src, op, Guarantee.batch_invariant, f"{why}, so nothing defines or tests it")
    for name, kernel in op.kernels.items():
        if isinstance(kernel, ReferenceKernel) and kernel.guarantees:
            problems.append(
                src.problem(
                    ("kernels", name, "guarantees"),
                    f"kernel {name} is a Python reference ({kernel.python}): it cannot carry a guarantee, since nothing "
                    f"generated controls its reduction order or tests it as a backend; use guarantees: []",
                )
            )
        elif isinstance(kernel, NativeKernel):
            problems += _tile_problems(src, op, name, kernel, row_batched)
            problems += _reduction_for_problems(src, op, name, kernel)
    for name, kernel in op.kernels.items():
        for index, platform in enumerate(kernel.platforms or () if isinstance(kernel, NativeKernel) else ()):
            if platform not in platforms:
                problems.append(src.problem(("kernels", name, "platforms", index), _one_of("platform", platform, platforms)))
        if isinstance(kernel, NativeKernel):
            problems += _arch_problems(src, catalog, op, name, kernel)
        if isinstance(kernel, NativeKernel) and not any(name in names for names in op.backends.values()):
            problems.append(src.problem(("kernels", name), f"native kernel {name} is used by no platform; add it to a backends list or remove it"))
    return problems, violations


def _backward_problems(catalog: Catalog, src: SourceMap, op: OpSpec) -> list[SpecProblem]:
    """A backward that computes what it says: each step is another op, each gradient is given once,
    and each step's arguments and results fit the step op's signature -- shapes that agree
    dimension for dimension (so swapped arguments, or a result that does not have its argument's
    shape, are refused), integer tensors where it takes integers.  Ops may be each other's
    derivatives (det_gemm's gradients are det_gemm_nt's and det_gemm_tn's, and theirs include
    det_gemm's; pack and unpack): a chain of backwards may lead back, for second derivatives, but
    one step never calls the op it differentiates."""
    ops = {o.name: o for o in catalog.ops}
    problems: list[SpecProblem] = []
    given: dict[str, int] = {}
    tensors: dict[str, TensorArg | Output] = {a.name: a for a in op.args} | {o.name: o for o in op.outputs}
    for index, step in enumerate(op.backward):
        target = ops.get(step.op)
        if target is None or not target.args:
            continue  # an unknown op: reported above
        if step.op == op.name:
            problems.append(src.problem(("backward", index, "op"), f"{op.name}'s backward calls {op.name} itself; a backward step runs another op of the catalog"))
            continue
        for position, name in enumerate(step.gives):
            if name is None:
                continue
            if name in given:
                problems.append(
                    src.problem(("backward", index, "gives", position), f"the gradient of {name} is given by step {given[name]} already; each gradient comes from one step")
                )
            given.setdefault(name, index)
        binding: dict[str, str] = {}
        roles = _gradient_parameters(target)
        params = {p.name for p in target.args}
        for position, source in enumerate(step.args):
            if position >= len(target.args):
                break
            name = source[5:-1] if source.startswith("grad(") else source
            tensor = tensors.get(name)
            if tensor is None:
                continue  # reported by the model
            param = target.args[position]
            described = f"argument {position} ({source}) of {step.op}, its {param.name},"
            if roles:
                role = _role_mismatch(source, name, param.name, roles, params)
                if role:
                    problems.append(src.problem(("backward", index, "args", position), f"{described} {role}"))
            mismatch = _bind_dims(binding, tensor.shape, param.shape, step.op)
            if mismatch:
                problems.append(src.problem(("backward", index, "args", position), f"{described} {mismatch}"))
            if _is_integer(tensor.dtype) != _is_integer(param.dtype):
                kind = "an integer" if _is_integer(param.dtype) else "a floating"
                problems.append(src.problem(("backward", index, "args", position), f"{described} takes {kind} tensor, and {source} is not one"))
        for position, name in enumerate(step.gives):
            if name is None or position >= len(target.outputs) or name not in tensors:
                continue
            result = target.outputs[position]
            described = f"{step.op}'s output {result.name}, given as the gradient of {name},"
            mapped = tuple(binding.get(d, "?") for d in result.shape)  # ?: a size the step op knows only from the data
            expected = tensors[name].shape
            if len(mapped) != len(expected) or any(m not in ("?", e) for m, e in zip(mapped, expected, strict=False)):
                problems.append(
                    src.problem(("backward", index, "gives", position), f"{described} has shape [{', '.join(mapped)}], not {name}'s [{', '.join(expected)}]")
                )
    return problems


GRADIENT_PREFIX = "grad_"
"""A backward op names each parameter that takes an incoming gradient ``grad_<output>`` after the
forward output it is the gradient of (logp_backward's grad_lp), and its other parameters after the
forward tensors they take (logits, lse)."""


def _gradient_parameters(op: OpSpec) -> frozenset[str]:
    """The parameters of ``op`` that take an incoming gradient, by their names; none for an op
    that is a forward op in its own right (det_gemm_nt computing det_gemm's gradient)."""
    return frozenset(a.name for a in op.args if a.name.startswith(GRADIENT_PREFIX))


def _role_mismatch(source: str, name: str, param: str, gradients: frozenset[str], params: set[str]) -> str | None:
    """Why a backward step's argument ``source`` does not belong at the step op's parameter
    ``param``, the op declaring its gradient parameters (``gradients``): a gradient goes to the
    gradient parameter, to the one named for its output where the op has one; a forward tensor to
    a parameter that is no gradient, to the one of its own name where the op has one.  Shapes and
    dtypes cannot tell ``[x, grad(y)]`` from ``(grad_y, x)``, nor two tensors of one shape from
    each other; the names can.  A backward op is an op of its own: its names need not follow the
    forward op's, so a gradient parameter of another name is accepted when none is named for it."""
    if source.startswith("grad("):
        wanted = f"{GRADIENT_PREFIX}{name}"
        if param == wanted:
            return None
        if wanted in params:
            return f"takes {'a forward tensor' if param not in gradients else 'another gradient'}; {source} goes to its parameter {wanted} (arguments swapped?)"
        if param in gradients:
            return None
        return f"takes a forward tensor, and {source} is an incoming gradient (its gradient parameters: {', '.join(sorted(gradients)) or 'none'})"
    if param in gradients:
        return f"takes an incoming gradient, and {source} is a forward tensor (arguments swapped?)"
    if name in params and param != name:
        return f"takes a forward tensor of another name; {source} goes to its parameter {name} (arguments swapped?)"
    return None


def _packed_equivalent_problems(catalog: Catalog, src: SourceMap, op: OpSpec) -> list[SpecProblem]:
    """A paged op's ``tests.paged.packed``: an op of packed sequences (a queries' and a keys'
    dimension), called with the paged op's arguments in its own order, each of the role its place
    there asks for -- a cache where the packed keys' rows go (the same row shape), the lengths
    where the keys' offsets go, the queries' offsets where its queries' offsets go, any other
    argument where an argument of the same shape goes -- and giving outputs of the same shapes."""
    paged = op.tests.paged
    if paged is None or paged.packed is None:
        return []
    where = ("tests", "paged", "packed")
    target = next((o for o in catalog.ops if o.name == paged.packed.op), None)
    if target is None:
        return [src.problem((*where, "op"), _one_of("op", paged.packed.op, [o.name for o in catalog.ops]))]
    sequences = target.tests.sequences
    if target.name == op.name or sequences is None or len(sequences.offsets) != 2:
        return [src.problem((*where, "op"), f"{target.name} is not an op of packed sequences with a queries' and a keys' dimension (tests.sequences.offsets)")]
    (queries, query_offsets), (keys, key_offsets) = sequences.offsets.items()
    required = sum(1 for a in target.args if not a.optional)
    if not required <= len(paged.packed.args) <= len(target.args):
        takes = f"{len(target.args)}" if required == len(target.args) else f"{required} to {len(target.args)}"
        return [src.problem((*where, "args"), f"{target.name} takes {takes} tensor arguments, got {len(paged.packed.args)}")]
    ours = {a.name: a for a in op.args}
    binding: dict[str, str] = {queries: paged.queries, keys: keys}  # the packed keys have no dimension of ours
    problems: list[SpecProblem] = []
    for index, name in enumerate(paged.packed.args):
        arg, param = ours.get(name), target.args[index]
        if arg is None:
            continue  # the model reported it
        described = f"argument {index} of {target.name}, its {param.name}, given {name},"
        if name in paged.caches:
            mismatch = None if param.shape[:1] == (keys,) else f"is not one of its keys' rows [{keys}, ...]"
            mismatch = mismatch or _bind_dims(binding, arg.shape[2:], param.shape[1:], target.name)
        elif name == paged.lengths:
            mismatch = None if param.name == key_offsets else f"is the lengths of the keys, which go where its keys' offsets ({key_offsets}) go"
        elif name == paged.query_offsets:
            mismatch = None if param.name == query_offsets else f"is the queries' offsets, which go where its queries' offsets ({query_offsets}) go"
        else:
            mismatch = _bind_dims(binding, arg.shape, param.shape, target.name)
            if mismatch is None and _is_integer(arg.dtype) != _is_integer(param.dtype):
                mismatch = f"takes {'an integer' if _is_integer(param.dtype) else 'a floating'} tensor, and {name} is not one"
        if mismatch:
            problems.append(src.problem((*where, "args", index), f"{described} {mismatch}"))
    if problems:
        return problems
    if len(target.outputs) != len(op.outputs):
        return [src.problem(where, f"{target.name} returns {len(target.outputs)} outputs, {op.name} {len(op.outputs)}")]
    for mine, theirs in zip(op.outputs, target.outputs, strict=True):
        mapped = tuple(binding.get(d, "?") for d in theirs.shape)
        if mapped != mine.shape:
            problems.append(src.problem(where, f"{target.name}'s output {theirs.name} has shape [{', '.join(mapped)}], {op.name}'s {mine.name} [{', '.join(mine.shape)}]"))
    return problems


def _bind_dims(binding: dict[str, str], ours: tuple[str, ...], theirs: tuple[str, ...], op: str) -> str | None:
    """Bind ``op``'s dimensions ``theirs`` to ours, in ``binding``; what does not fit, or None."""
    if len(ours) != len(theirs):
        return f"has {len(ours)} dimensions, {op} takes {len(theirs)} there"
    for axis, (mine, other) in enumerate(zip(ours, theirs, strict=True)):
        bound = binding.setdefault(other, mine)
        if bound != mine:
            return f"has {mine} as dimension {axis}, but {op}'s {other} is already {bound} (arguments swapped?)"
    return None


def _is_integer(dtype: str) -> bool:
    return dtype in ("int64", "int32", "bool")


def _arch_problems(src: SourceMap, catalog: Catalog, op: OpSpec, name: str, kernel: NativeKernel) -> list[SpecProblem]:
    """A kernel that needs an arch-specific target: every platform that runs it builds that arch,
    names the macro its compilation defines, and lets the launcher ask the device what it is."""
    problems: list[SpecProblem] = []
    using = [p for p in catalog.platforms if name in op.backends.get(p.name, ())]
    for index, arch in enumerate(kernel.archs):
        for platform in using:
            build = platform.build
            if arch not in build.archs:
                problems.append(src.problem(("kernels", name, "archs", index), f"kernel {name} needs arch {arch}, which platform {platform.name} does not build "
                                            f"(build.archs: {', '.join(build.archs) or 'none'})"))
            elif arch not in build.arch_macros:
                problems.append(src.problem(("kernels", name, "archs", index), f"kernel {name} needs arch {arch}, but platform {platform.name} names no macro "
                                            f"for it (build.arch_macros), so its body cannot be compiled for that target alone"))
            runtime = platform.runtime
            missing = [field for field in ("current_device", "device_attribute", "compute_major", "compute_minor", "copy_from_symbol")
                       if runtime is None or getattr(runtime, field) is None]
            if missing:
                problems.append(src.problem(("kernels", name, "archs", index), f"kernel {name} needs arch {arch}, but platform {platform.name}'s runtime "
                                            f"lacks {', '.join(missing)}, so its launcher cannot tell which device it runs on"))
    return problems


def _layout_problems(src: SourceMap, op: OpSpec) -> list[SpecProblem]:
    """Layout invariance is defined on a k_tree reduction: its parts are the tree's own subtrees,
    combined by the tree's own adds.  Any other order (one accumulator, lanes, online blocks) sums
    a split's parts in another order than the whole, so the claim could not hold or be tested."""
    reduction = op.reduction
    if reduction is not None and reduction.order == "k_tree":
        return []
    why = (
        f"{op.name} declares no reduction"
        if reduction is None
        else f"{op.name} reduces over {reduction.dim} in order {reduction.order}"
    )
    why += "; only a k_tree reduction's parts combine into the whole (reduction: {dim: ..., order: k_tree, leaf: ...})"
    return _undefined_claims(src, op, Guarantee.layout_invariant, why)


def _reduction_for_problems(src: SourceMap, op: OpSpec, name: str, kernel: NativeKernel) -> list[SpecProblem]:
    """A kernel's own order for some dtypes (``reduction_for``) is another order than the op's over
    the same dimension, for dtypes the op takes; its bits there are not its sibling kernels', so it
    cannot claim ``portable``."""
    problems: list[SpecProblem] = []
    if not kernel.reduction_for:
        return problems
    allowed = {d for dtypes in op.dtype_vars.values() for d in dtypes}
    for dtype, reduction in kernel.reduction_for.items():
        where = ("kernels", name, "reduction_for", dtype.value)
        if op.reduction is None:
            problems.append(src.problem(where, f"kernel {name} states an order for {dtype.value}, but {op.name} declares no reduction"))
            continue
        if reduction.dim != op.reduction.dim:
            problems.append(
                src.problem(where, f"kernel {name} reduces {dtype.value} over {reduction.dim}, but {op.name} reduces over {op.reduction.dim}")
            )
        if dtype not in allowed:
            problems.append(src.problem(where, f"kernel {name} states an order for {dtype.value}, which no dtype variable of {op.name} allows"))
    if Guarantee.portable in kernel.guarantees and any(r != op.reduction for r in kernel.reduction_for.values()):
        dtypes = ", ".join(sorted(d.value for d, r in kernel.reduction_for.items() if r != op.reduction))
        problems.append(
            src.problem(
                ("kernels", name, "guarantees", kernel.guarantees.index(Guarantee.portable)),
                f"kernel {name} declares portable, but reduces {dtypes} in its own order (reduction_for), not in {op.name}'s: "
                f"its bits there are not those of the op's kernels on other platforms",
            )
        )
    return problems


def _undefined_claims(src: SourceMap, op: OpSpec, guarantee: Guarantee, why: str) -> list[SpecProblem]:
    """A problem at each place ``op`` requires ``guarantee`` or a kernel declares it, saying ``why`` it cannot hold."""
    problems = []
    if guarantee in op.requires:
        problems.append(src.problem(("requires", op.requires.index(guarantee)), f"{guarantee.value} is required, but {why}"))
    for name, kernel in op.kernels.items():
        if guarantee in kernel.guarantees:
            index = kernel.guarantees.index(guarantee)
            problems.append(src.problem(("kernels", name, "guarantees", index), f"kernel {name} declares {guarantee.value}, but {why}"))
    return problems


def _autocast_problems(src: SourceMap, op: OpSpec) -> list[SpecProblem]:
    """An autocast policy must name a dtype every argument it casts accepts: autocast casts the
    arguments whose dtype is a variable, to float32 or to the autocast dtype (bfloat16 or float16)."""
    if op.autocast == "none":
        return []
    cast = [a for a in op.args if a.dtype in op.dtype_vars]
    if not cast:
        return [src.problem(("autocast",), f"autocast: {op.autocast} casts the arguments whose dtype is a dtype variable, and {op.name} has none; use autocast: none")]
    targets = [Dtype.float32] if op.autocast == "float32" else [Dtype.bfloat16, Dtype.float16]
    problems = []
    for arg in cast:
        lacking = [d.value for d in targets if d not in op.dtype_vars[arg.dtype]]
        if lacking:
            problems.append(
                src.problem(
                    ("autocast",),
                    f"autocast: {op.autocast} casts argument {arg.name} to {' or '.join(lacking)}, which its dtype variable "
                    f"{arg.dtype} ({', '.join(d.value for d in op.dtype_vars[arg.dtype])}) does not allow",
                )
            )
    return problems


def _tile_problems(src: SourceMap, op: OpSpec, name: str, kernel: NativeKernel, batched: bool) -> list[SpecProblem]:
    """A kernel's claims need the extents its tests cross: rows for batch_invariant, a step for a reduction."""
    problems: list[SpecProblem] = []
    tiles = kernel.tiles
    claims = set(kernel.guarantees)
    if batched and Guarantee.batch_invariant in claims and not (tiles and tiles.rows):
        problems.append(
            src.problem(
                ("kernels", name, "guarantees", kernel.guarantees.index(Guarantee.batch_invariant)),
                f"kernel {name} claims batch_invariant but declares no tiles.rows (rows of {op.tests.batch_dim} one block or tile "
                f"covers; 1 where each row is handled on its own): the generated tests take their batch sizes from it",
            )
        )
    if op.reduction is not None and claims & {Guarantee.deterministic, Guarantee.batch_invariant} and not (tiles and tiles.reduction):
        problems.append(
            src.problem(
                ("kernels", name),
                f"kernel {name} reduces over {op.reduction.dim} and claims {', '.join(sorted(g.value for g in claims))}, but declares no "
                f"tiles.reduction (elements of {op.reduction.dim} one step consumes): the generated tests take their reduction extents from it",
            )
        )
    if tiles is None:
        return problems
    if tiles.rows and not batched:
        problems.append(src.problem(("kernels", name, "tiles", "rows"), f"tiles.rows means nothing for {op.name}: no output has a batch dimension"))
    if tiles.reduction and op.reduction is None:
        problems.append(src.problem(("kernels", name, "tiles", "reduction"), f"tiles.reduction means nothing for {op.name}: the op declares no reduction"))
    named: list[tuple[tuple[str | int, ...], int | str]] = [(("rows", i), v) for i, v in enumerate(tiles.rows)]
    named += [(("reduction", i), v) for i, v in enumerate(tiles.reduction)]
    named.append((("stages",), tiles.stages))
    for where, value in named:
        if isinstance(value, str) and not (isinstance(kernel.params.get(value), int) and not isinstance(kernel.params.get(value), bool)):
            ints = [k for k, v in kernel.params.items() if isinstance(v, int) and not isinstance(v, bool)]
            problems.append(src.problem(("kernels", name, "tiles", *where), _one_of("integer param", value, ints)))
        elif isinstance(value, str):
            limit = {"rows": MAX_TILE_ROWS, "reduction": MAX_TILE_REDUCTION, "stages": MAX_STAGES}[str(where[0])]
            held = kernel.params[value]
            if held > limit:
                problems.append(src.problem(("kernels", name, "params", value), f"param {value} = {held} is the kernel's tiles.{where[0]}, which may be at most {limit}"))
    return problems


# Headers rendered next to the kernels ({stem}.h), which no {op}_{kernel} may be named like.
PACKAGE_HEADERS = frozenset({"rlk_numerics", "rlk_math", "rlk_reduce", "rlk_parallel", "rlk_lanes", "rlk_scratch"} | {h.removesuffix(".h") for h in get_args(SupportHeader)})

def _name_clashes(catalog: Catalog, names: PackageNames | None) -> list[SpecProblem]:
    """Distinct spec names that would generate the same Python or C++ name, and op names the
    package's own names (``names``: its modules, what its ``__init__`` binds) already take."""
    problems: list[SpecProblem] = []
    exported: dict[str, str] = {}
    # Kernel files share their folder with the package headers (rlk_numerics.h, ...).
    symbols: dict[str, str] = {stem: "a package header" for stem in PACKAGE_HEADERS}
    for op in catalog.ops:
        src = catalog.op_source(op.name)
        for path, name in [(("name",), op.name), *((("aliases", i), alias) for i, alias in enumerate(op.aliases))]:
            taken = names.clash(name) if names is not None else None
            if taken is not None:
                problems.append(src.problem(path, f"{name} is already {taken}; the package would export it twice"))
                continue
            if name in exported:
                problems.append(src.problem(path, f"{name} is already exported by {exported[name]}; the package would export it twice"))
            exported.setdefault(name, f"op {op.name}")
        # The bindings' own functions of the op: check_{op} and {op}_unsupported_{platform}.
        for name in [f"check_{op.name}", *(f"{op.name}_unsupported_{p.name}" for p in catalog.platforms)]:
            clashes = reserved.clash(name)
            if clashes is not None:
                problems.append(src.problem(("name",), f"op {op.name} generates the name {name}, which clashes with {clashes}; pick another name"))
                break
        for kernel in op.kernels:
            if not isinstance(op.kernels[kernel], NativeKernel):
                continue
            # Launchers, headers and sources are named {op}_{kernel}: a name that can meet a macro of
            # a header the sources include (st + atime is <sys/stat.h>'s st_atime) like any other.
            symbol = f"{op.name}_{kernel}"
            derived = [symbol, f"{symbol}_kernel", *(f"{symbol}_{p.name}" for p in catalog.platforms)]
            for name in derived:
                clashes = reserved.clash(name)
                if clashes is not None:
                    problems.append(src.problem(("kernels", kernel), f"op {op.name} kernel {kernel} generates the name {name}, which clashes with {clashes}; pick another name"))
                    break
            if symbol in symbols:
                problems.append(
                    src.problem(("kernels", kernel), f"op {op.name} kernel {kernel} and {symbols[symbol]} both generate the name {symbol} (launcher, header, source)")
                )
            symbols.setdefault(symbol, f"op {op.name} kernel {kernel}")
    return problems


def _reference_problems(catalog: Catalog, names: PackageNames) -> list[SpecProblem]:
    """A reference kernel's callable is one the package's tests may call: a function of the package's
    own references (runtime/rlkernels/_references.py) or one of PyTorch's the vocabulary lists --
    never a name of any other code, which every package would import and call."""
    own = {f"{catalog.package.name}._references.{name}" for name in names.references}
    known = sorted(own | vocabulary.REFERENCE_CALLABLES)
    problems: list[SpecProblem] = []
    for op in catalog.ops:
        for name, kernel in op.kernels.items():
            if isinstance(kernel, ReferenceKernel) and kernel.python not in own and kernel.python not in vocabulary.REFERENCE_CALLABLES:
                problems.append(catalog.op_source(op.name).problem(("kernels", name, "python"), _one_of("reference callable", kernel.python, known)))
    return problems


def _integration_problems(catalog: Catalog, names: PackageNames) -> list[SpecProblem]:
    """Every op an integration module of the package calls must be in the catalog, so that removing
    one is refused here, naming the module, not found when the module is imported."""
    src = catalog.source(PACKAGE_KEY)
    callable_names = {o.name for o in catalog.ops} | {alias for o in catalog.ops for alias in o.aliases}
    problems: list[SpecProblem] = []
    for module, ops in catalog.package.integrations.items():
        if module not in names.modules:
            problems.append(src.problem(("integrations", module), _one_of("package module", module, sorted(m for m in names.modules if not m.startswith("_")))))
            continue
        for index, op in enumerate(ops):
            if op not in callable_names:
                problems.append(
                    src.problem(("integrations", module, index), f"{module} calls op {op}, which no spec defines (ops and aliases: {', '.join(sorted(callable_names))})")
                )
    return problems


FUNCTORS = "kernels/functors"
"""Where the elementwise kernels' functors live, under the templates folder: one file <name>.j2 each."""


def _functors(templates: Path) -> dict[str, bool]:
    """Each functor file's name -> whether it may be used: a regular file, or a symbolic link to one
    inside the project (the templates folder's parent).  Files whose names are not identifiers
    (``_shared.j2``) are the functors' own helpers, not functors."""
    folder = templates / FUNCTORS
    project = templates.resolve().parent
    found: dict[str, bool] = {}
    try:
        entries = sorted(folder.iterdir())
    except OSError:
        return found
    for entry in entries:
        stem = entry.name.removesuffix(".j2")
        if not entry.name.endswith(".j2") or not re.fullmatch(IDENTIFIER, stem):
            continue
        try:
            target = entry.resolve(strict=True)
        except (OSError, RuntimeError):
            continue  # a dangling or looping link: not a functor
        found[stem] = target.is_file() and target.is_relative_to(project)
    return found


def _functor_problem(name: str, functors: dict[str, bool]) -> str | None:
    usable = [n for n, ok in functors.items() if ok]
    if name in functors and not functors[name]:
        return f"functor file templates/{FUNCTORS}/{name}.j2 is a symbolic link leading outside the project (or not to a file); refusing it"
    if name not in usable:
        return _one_of("functor", name, usable)
    return None


def check(catalog: Catalog, templates: Path | None = None, names: PackageNames | None = None) -> None:
    """Raise ``ContractError`` (guarantee violations) or ``SpecError`` (dangling names).
    ``templates``: the templates folder, where each native kernel's template must exist;
    ``names``: the package's own names (``runtime_tree``), which no op may take and among whose
    modules the integrations are."""
    problems: list[SpecProblem] = []
    functors = _functors(templates) if templates is not None else None
    for op in catalog.ops:
        for name, kernel in op.kernels.items():
            if templates is not None and isinstance(kernel, NativeKernel) and not (templates / kernel.template).is_file():
                problems.append(catalog.op_source(op.name).problem(("kernels", name, "template"), f"template {kernel.template} does not exist under templates/"))
            if functors is not None and isinstance(kernel, NativeKernel) and kernel.functor is not None:
                problem = _functor_problem(kernel.functor, functors)
                if problem is not None:
                    problems.append(catalog.op_source(op.name).problem(("kernels", name, "functor"), problem))
    violations: list[SpecProblem] = []
    for op in catalog.ops:
        p, v = _op_problems(catalog, op)
        problems += p
        violations += v
    problems += _name_clashes(catalog, names)
    if names is not None:
        problems += _integration_problems(catalog, names)
        problems += _reference_problems(catalog, names)
    orders: dict[int, str] = {}
    for platform in catalog.platforms:
        if platform.detection.order in orders:
            src = catalog.platform_source(platform.name)
            problems.append(
                src.problem(("detection", "order"), f"order {platform.detection.order} is also used by {orders[platform.detection.order]}")
            )
        orders[platform.detection.order] = platform.name
    hosts = [p for p in catalog.platforms if p.kind == "host"]
    if not hosts:
        problems.append(SpecProblem(catalog.package_file, 1, "", "no host platform (kind: host) is defined; every package carries CPU kernels"))
    for extra in hosts[1:]:
        # Every package carries the host's kernels: a second host would register two CPU kernels per op.
        problems.append(catalog.platform_source(extra.name).problem(("kind",), f"a second host platform (the first is {hosts[0].name}); a catalog has exactly one"))
    if violations:
        raise ContractError(violations + problems)
    if problems:
        raise SpecError(problems)
