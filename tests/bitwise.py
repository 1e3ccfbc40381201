"""Bitwise comparison of tensors for the project's tests: the contract suite's own helpers
(``runtime/tests/bitwise.py``, which every package carries), read from that file so that there is
one definition.  Integer views of the bits: -0.0 is not +0.0 and a NaN equals only the same NaN."""

from __future__ import annotations

import importlib.util
from pathlib import Path

_spec = importlib.util.spec_from_file_location("rlkernels_suite_bitwise", Path(__file__).resolve().parent.parent / "runtime" / "tests" / "bitwise.py")
assert _spec is not None and _spec.loader is not None
_suite = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_suite)

bits = _suite.bits
same_bits = _suite.same_bits

__all__ = ["bits", "same_bits"]
