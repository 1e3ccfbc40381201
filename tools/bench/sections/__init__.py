"""The sections of docs/performance.md, one module each, in the order the report shows them."""

from __future__ import annotations

from ..core import Section
from .decoder import DecoderSection, LargeDecoderSection, MoeDecoderSection
from .gemm import GemmSection
from .generate import GeneratorSection
from .model import ModelSection
from .ops import OpsSection
from .tp import TpSection
from .vllm import VllmSection


def all_sections() -> list[Section]:
    return [GemmSection(), OpsSection(), ModelSection(), DecoderSection(), MoeDecoderSection(), LargeDecoderSection(), TpSection(), VllmSection(), GeneratorSection()]
