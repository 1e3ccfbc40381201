"""The package's data files (_catalog.json, _build.json, tests/contract_cases.json) against their one
declaration, runtime/rlkernels/_interchange.py, which the generator writes them from and the package
reads them with."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from generator import checks, signature, testplan
from generator.interchange import interchange as data

REPO = Path(__file__).resolve().parent.parent
GENERATED = REPO / "generated"
FILES = [
    *((path, data.CatalogFile) for path in sorted(GENERATED.glob(f"*/rlkernels/{data.CATALOG_FILE}"))),
    *((path, data.BuildFile) for path in sorted(GENERATED.glob(f"*/rlkernels/{data.BUILD_FILE}"))),
    *((path, data.ContractCases) for path in sorted(GENERATED.glob(f"*/tests/{data.CASES_FILE}"))),
]


def _raw(path: Path) -> dict[str, Any]:
    raw: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    raw.pop(data.PROVENANCE_KEY)
    return raw


def test_every_package_carries_the_three_files() -> None:
    assert len(FILES) == 3 * len(list(GENERATED.glob("*/rlkernels"))) >= 12, FILES


@pytest.mark.parametrize("path, cls", FILES, ids=[str(p.relative_to(GENERATED)) for p, _ in FILES])
def test_a_data_file_is_its_declared_class_encoded(path: Path, cls: type) -> None:
    """Decoding checks every field's type; encoding the result gives the file back, so no field of
    the file is outside the declaration and none is read differently than written."""
    decoded = data.read(cls, path)
    assert isinstance(decoded, cls)
    assert data.encode(decoded) == _raw(path)


def test_the_generator_uses_the_package_declaration() -> None:
    """The classes both sides share are one declaration, not two that agree today."""
    assert checks.Check is data.Check
    assert signature.DimBinding is data.DimBinding
    assert testplan.KernelSizes is data.KernelSizes


def _catalog() -> dict[str, Any]:
    return _raw(GENERATED / "cpu/rlkernels" / data.CATALOG_FILE)


def _refusal(raw: dict[str, Any]) -> str:
    with pytest.raises(data.DataError) as caught:
        data.decode(data.CatalogFile, raw)
    return str(caught.value)


def test_a_field_of_the_wrong_type_is_refused_naming_its_path() -> None:
    raw = _catalog()
    raw["ops"][0]["args"][0]["shape"] = "N"
    assert _refusal(raw) == "CatalogFile.ops[0].args[0].shape: expected a list, got 'N'"
    raw = _catalog()
    raw["ops"][1]["checks"][0]["kind"] = "rank2"
    assert _refusal(raw).startswith("CatalogFile.ops[1].checks[0].kind: expected one of 'layout', 'rank'")
    raw = _catalog()
    raw["ops"][0]["attrs"] = [{"name": "x", "type": "int", "default": "3"}]
    assert "CatalogFile.ops[0].attrs[0].default" in _refusal(raw)


def test_an_unknown_or_missing_field_is_refused() -> None:
    raw = _catalog()
    raw["ops"][0]["kernels"]["extra"] = {"kind": "native", "guarantees": [], "tiles": []}
    assert _refusal(raw) == "CatalogFile.ops[0].kernels['extra']: unknown field 'tiles'; expected one of kind, guarantees, python, kwargs, doc"
    raw = _catalog()
    del raw["ops"][0]["reference"]
    assert _refusal(raw) == "CatalogFile.ops[0]: missing field 'reference'"


def test_a_file_of_another_layout_is_refused_naming_both(tmp_path: Path) -> None:
    raw = _catalog()
    raw["schema"] = data.SCHEMA + 1
    path = tmp_path / data.CATALOG_FILE
    path.write_text(json.dumps(raw))
    with pytest.raises(data.DataError, match=f"written in data layout {data.SCHEMA + 1}, this package reads layout {data.SCHEMA}"):
        data.read(data.CatalogFile, path)
    path.write_text("[1, 2]")
    with pytest.raises(data.DataError, match="expected a JSON object, got list"):
        data.read(data.CatalogFile, path)


def test_defaults_are_left_out_and_filled_back_in() -> None:
    """A field at its default is not written (the files stay small) and reads back as the default;
    a value equal to the default but of another type (0.0 for 0) is written."""
    check = data.Check("bound", "eps", "m", relation=">", bound=0.0)
    assert data.encode(check) == {"kind": "bound", "arg": "eps", "message": "m", "relation": ">", "bound": 0.0}
    assert data.decode(data.Check, data.encode(check)) == check
    assert data.encode(data.Check("layout", "x", "m")) == {"kind": "layout", "arg": "x", "message": "m"}
