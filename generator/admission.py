"""Whether a kernel may run an op on a platform: the one rule, decided in one place.

``contracts`` refuses a spec whose backends list a kernel this rule does not admit, ``explain``
says why each candidate is admitted or refused, and the package data the runtime reads lists, per
op and platform, only the backends admitted here.  Each formats the same ``Admission``.
"""

from __future__ import annotations

from dataclasses import dataclass

from .model import Guarantee, NativeKernel, OpSpec, ReferenceKernel


@dataclass(frozen=True)
class Admission:
    """The verdict on running ``kernel`` as a backend of ``op`` on ``platform``."""

    op: str
    platform: str
    kernel: str
    declared: bool
    """The op declares a kernel of that name."""
    written_for: tuple[str, ...] | None
    """The platforms a native kernel is restricted to (None: any)."""
    reference: str | None
    """The callable of a Python reference kernel, which keeps no guarantee whatever it declares."""
    kept: tuple[Guarantee, ...]
    """The guarantees the kernel keeps: a native kernel's declared ones; none for a reference."""
    declares: tuple[Guarantee, ...]
    requires: tuple[Guarantee, ...]
    missing: tuple[Guarantee, ...]
    """What ``op`` requires and the kernel does not keep, in the op's order."""

    @property
    def runs_here(self) -> bool:
        """The kernel exists and may run on this platform (its guarantees aside)."""
        return self.declared and (self.written_for is None or self.platform in self.written_for)

    @property
    def accepted(self) -> bool:
        return self.runs_here and not self.missing


def admissible(op: OpSpec, platform: str, kernel: str) -> Admission:
    """The verdict for ``kernel`` as a backend of ``op`` on ``platform``."""
    spec = op.kernels.get(kernel)
    if spec is None:
        return Admission(op.name, platform, kernel, False, None, None, (), (), op.requires, ())
    written_for = spec.platforms if isinstance(spec, NativeKernel) else None
    reference = spec.python if isinstance(spec, ReferenceKernel) else None
    # Nothing generated controls a Python reference's reduction order (torch.matmul picks split-K
    # by shape): it keeps no guarantee, whatever it declares.
    kept = spec.guarantees if isinstance(spec, NativeKernel) else ()
    missing = tuple(g for g in op.requires if g not in kept)
    return Admission(op.name, platform, kernel, True, written_for, reference, kept, spec.guarantees, op.requires, missing)


def admitted_backends(op: OpSpec, platform: str) -> tuple[str, ...]:
    """The op's listed backends on ``platform`` that the rule admits, in the listed order (after
    ``contracts.check``, every listed one)."""
    return tuple(name for name in op.backends.get(platform, ()) if admissible(op, platform, name).accepted)
