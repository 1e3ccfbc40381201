"""docs/spec-language.md: rendered from the spec models, written by `generate`, held fresh by `check`."""

from __future__ import annotations

from pydantic import BaseModel, Field

from conftest import REPO, Project
from generator import spec_doc
from generator.model import Identifier, StrictModel
from generator.schema import MODELS


class Inner(StrictModel):
    """An inner part."""

    size: int = Field(default=2, ge=1, le=8)
    """How big it is."""


class Toy(StrictModel):
    name: Identifier
    """The toy's name."""
    inner: Inner | None = None
    tags: tuple[Identifier, ...] = ()


def _models(root: type[BaseModel]) -> list[type[BaseModel]]:
    seen: list[type[BaseModel]] = [root]
    for cls in seen:
        for info in cls.model_fields.values():
            seen += [c for c in spec_doc._classes(info.annotation) if c not in seen]
    return seen


def _section(page: str, name: str) -> str:
    """The text under the heading ``name`` (## or ###), up to the next heading."""
    lines = page.split("\n")
    starts = [i for i, line in enumerate(lines) if line in (f"## {name}", f"### {name}")]
    assert len(starts) == 1, f"{name}: {len(starts)} headings"
    rest = lines[starts[0] + 1 :]
    end = next((i for i, line in enumerate(rest) if line.startswith("#")), len(rest))
    return "\n".join(rest[:end])


def test_the_committed_page_is_what_the_models_render():
    assert (REPO / spec_doc.SPEC_DOC).read_text(encoding="utf-8") == spec_doc.render()


def test_every_field_of_every_spec_model_has_a_row_under_its_model():
    page = spec_doc.render()
    for root in MODELS.values():
        for cls in _models(root):
            section = _section(page, cls.__name__)
            for field in cls.model_fields:
                assert f"| `{field}` |" in section, f"{cls.__name__}.{field} has no row"


def test_a_fields_docstring_is_its_description():
    row = next(line for line in _section(spec_doc.render(), "OpSpec").split("\n") if line.startswith("| `leading_dim` |"))
    assert row.endswith("| A first dimension callers may pass as several ([B, T, H] for [N, H]): the public function "
                        "flattens them for the kernels and restores them on the outputs. |")


def test_types_defaults_descriptions_and_forms_of_a_model(monkeypatch):
    monkeypatch.setattr(spec_doc, "MODELS", {"op": Toy})
    page = spec_doc.render()
    toy, inner = _section(page, "Toy"), _section(page, "Inner")
    assert "| `name` | [name](#written-forms) | required | The toy's name. |" in toy
    assert "| `inner` | [Inner](#inner) or null | `null` |  |" in toy
    assert "| `tags` | list of [name](#written-forms) | `[]` |  |" in toy
    assert "An inner part." in inner and "| `size` | integer, 1 to 8 | `2` | How big it is. |" in inner
    assert "| name | `[a-z][a-z0-9_]{0,47}` | `det_gemm` |" in _section(page, "Written forms")


def test_generate_writes_the_page_and_check_finds_it_stale(small_project: Project, capsys):
    page = small_project.root / spec_doc.SPEC_DOC
    assert page.read_text(encoding="utf-8") == spec_doc.render()
    page.write_text(page.read_text(encoding="utf-8").replace("| `leading_dim` |", "| `leading_dims` |"), encoding="utf-8")
    capsys.readouterr()
    assert small_project.run("check") == 1
    assert f"stale: {spec_doc.SPEC_DOC} differs from what the specs produce" in capsys.readouterr().err
    assert small_project.run("generate") == 0
    assert page.read_text(encoding="utf-8") == spec_doc.render()
    assert small_project.run("check") == 0
