"""The public function of every op and alias, under its name (``_ops.det_gemm``), and nothing else.

Every other name in this module starts with an underscore, which no op name does (the generator
refuses one), so no op can shadow a name of the module's own.  ``_public`` makes the functions.
"""

from collections.abc import Callable as _Callable
from typing import Any as _Any

from ._public import PUBLIC as _PUBLIC

globals().update(_PUBLIC)
__all__ = list(_PUBLIC)


def __getattr__(name: str) -> _Callable[..., _Any]:
    """Only for names the module does not hold (an op of another build): the same error as any
    module's.  Type checkers read its signature as "any name is a function"."""
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}; the ops of this build: {', '.join(sorted(_PUBLIC))}")
