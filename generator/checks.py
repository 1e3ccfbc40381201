"""The input checks of an op, derived from its signature once.

The C++ bindings render them as ``TORCH_CHECK``s and the Python runtime reads them as data; both
give the same message, each followed by what it got (", got shape [3, 4]").
"""

from __future__ import annotations

from dataclasses import replace

from .interchange import interchange
from .model import FLOAT32_MAX, FLOAT32_ZERO_BELOW
from .signature import Signature

# The check declaration is the package's (its bindings and its Python read these checks back).
Check = interchange.Check
CheckKind = interchange.CheckKind
Relation = interchange.Relation
ATTRIBUTE_KINDS = interchange.ATTRIBUTE_CHECKS
"""Checks of an attribute's value (``arg`` names the attribute); the others check a tensor."""


def _words(items: tuple[str, ...]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " or " + items[-1]


def attribute_checks(sig: Signature) -> tuple[Check, ...]:
    """Every check of the op's number attributes' values: a float finite, within float32's range and
    not a nonzero value that float32 holds as 0 (the kernels receive float32; NaN would pass every
    comparison a kernel makes, and a scale of 1e-46 would arrive as the 0 that means "the
    default"), then the spec's range bounds, which a float meets both as given and in float32."""
    op = sig.spec.name
    out: list[Check] = []
    for a in sig.spec.attrs:
        if a.type == "float":
            out.append(
                Check(
                    "finite",
                    a.name,
                    f"{op}: attribute '{a.name}' must be a finite number that float32, which the kernels receive, holds: 0 or "
                    f"{FLOAT32_ZERO_BELOW:.9g} < |x| <= {FLOAT32_MAX:.9g}",
                )
            )
        for relation, bound in a.range.bounds() if a.range is not None else ():
            out.append(Check("bound", a.name, f"{op}: attribute '{a.name}' must be {relation} {bound!r}", relation=relation, bound=bound))  # type: ignore[arg-type]
    return tuple(out)


LAYOUT_RULE = "must be a dense tensor (layout torch.strided, not nested)"
"""What the layout check asks of every tensor argument; each language appends what it got
(``torch.sparse_coo``, ``torch._mkldnn``, ``a nested tensor``)."""


def input_checks(sig: Signature) -> tuple[Check, ...]:
    """Every check of the op's inputs, in the order they run: the tensors' layouts, attribute
    values, then the tensors' ranks, dtypes, devices, shared dimensions, the spec's constraints,
    contiguity.

    The layouts come first, for every tensor argument: a sparse, nested or mkldnn tensor has no
    strides (several not even sizes), so any later check would fail on it with torch's own words
    ("Sparse CSR tensors do not have is_contiguous") or a message about something else."""
    spec = sig.spec
    op = spec.name
    first = spec.args[0].name
    out: list[Check] = [Check("layout", a.name, f"{op}: argument '{a.name}' {LAYOUT_RULE}") for a in spec.args]
    out += attribute_checks(sig)
    for a in spec.args:
        dims = ", ".join(a.shape)
        out.append(Check("rank", a.name, f"{op}: argument '{a.name}' must be {len(a.shape)}-D with shape [{dims}]", rank=len(a.shape)))
    for a in spec.args:
        leader = sig.dtype_leader(a.dtype) if a.dtype in spec.dtype_vars else a
        if leader.name == a.name:
            allowed = sig.allowed_dtypes(a)
            out.append(Check("dtype", a.name, f"{op}: argument '{a.name}' must have dtype {_words(allowed)}", dtypes=allowed))
        else:
            out.append(Check("same_dtype", a.name, f"{op}: argument '{a.name}' must have the same dtype as argument '{leader.name}' ({a.dtype})", other=leader.name))
    for a in spec.args[1:]:
        out.append(Check("same_device", a.name, f"{op}: argument '{a.name}' must be on the same device as argument '{first}'", other=first))
    for c in sig.dim_checks:
        out.append(
            Check(
                "dim",
                c.arg,
                f"{op}: dimension {c.dim} of argument '{c.arg}' (axis {c.axis}) must equal dimension {c.dim} of argument '{c.bound.arg}' (axis {c.bound.axis})",
                axis=c.axis,
                other=c.bound.arg,
                other_axis=c.bound.axis,
                dim=c.dim,
            )
        )
    bound = {d.dim: d for d in sig.dims}
    for constraint in spec.constraints:
        b = bound[constraint.dim]
        where = f"dimension {constraint.dim} (axis {b.axis} of argument '{b.arg}')"
        if constraint.count_nonzero_of is not None:
            message = f"{op}: {where} must equal the number of nonzero entries of argument '{constraint.count_nonzero_of}'"
            out.append(Check("count_nonzero", b.arg, message, axis=b.axis, other=constraint.count_nonzero_of, dim=constraint.dim))
        elif constraint.equals_dim is not None:
            d = bound[constraint.equals_dim]
            plus = f" {'plus' if constraint.plus >= 0 else 'minus'} {abs(constraint.plus)}" if constraint.plus else ""
            message = f"{op}: {where} must equal dimension {d.dim} (axis {d.axis} of argument '{d.arg}'){plus}"
            out.append(Check("equals_dim", b.arg, message, axis=b.axis, other=d.arg, other_axis=d.axis, dim=constraint.dim, plus=constraint.plus))
        elif constraint.multiple_of_dim is not None:
            d = bound[constraint.multiple_of_dim]
            message = f"{op}: {where} must be a multiple of dimension {d.dim} (axis {d.axis} of argument '{d.arg}')"
            out.append(Check("multiple_of_dim", b.arg, message, axis=b.axis, other=d.arg, other_axis=d.axis, dim=constraint.dim))
        else:
            message = f"{op}: {where} must be a multiple of {constraint.multiple_of}"
            out.append(Check("multiple_of", b.arg, message, axis=b.axis, multiple_of=constraint.multiple_of or 1, dim=constraint.dim))
    for a in spec.args:
        out.append(Check("contiguous", a.name, f"{op}: argument '{a.name}' must be contiguous (call .contiguous() on it)", rank=len(a.shape)))
    optional = {a.name for a in spec.args if a.optional}
    return tuple(replace(c, optional=c.arg in optional) for c in out)
