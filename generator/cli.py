"""``python -m generator generate | check | diff | schema``."""

from __future__ import annotations

import argparse
import difflib
import sys
import time
from pathlib import Path

from .errors import ContractError, GeneratorError, SpecError
from .pipeline import Layout, produce
from .write import MANIFEST, compute_changes, manifest_bytes, recover, write_tree

EXIT_OK, EXIT_DIFFERS, EXIT_ERROR = 0, 1, 2


def _expected(layout: Layout) -> dict[str, bytes]:
    files = produce(layout)
    return {**files, MANIFEST: manifest_bytes(files)}


def cmd_generate(layout: Layout, args: argparse.Namespace) -> int:
    start = time.perf_counter()
    files = produce(layout)
    changes = write_tree(layout.generated, files)
    elapsed = time.perf_counter() - start
    for rel in changes.written:
        print(f"wrote   generated/{rel}")
    for rel in changes.removed:
        print(f"removed generated/{rel}")
    print(
        f"generate: {len(files) + 1} files, {len(changes.written)} written, {len(changes.removed)} removed, "
        f"{len(files) + 1 - len(changes.written)} unchanged ({elapsed * 1000:.0f} ms)"
    )
    return EXIT_OK


def cmd_check(layout: Layout, args: argparse.Namespace) -> int:
    recover(layout.generated)
    changes = compute_changes(layout.generated, _expected(layout))
    if changes.empty:
        print("check: generated/ matches the specs and templates")
        return EXIT_OK
    for rel in changes.written:
        state = "differs from what the specs produce" if (layout.generated / rel).exists() else "is missing"
        print(f"stale: generated/{rel} {state}", file=sys.stderr)
    for rel in changes.removed:
        print(f"stale: generated/{rel} is no longer produced and should be removed", file=sys.stderr)
    print("check: generated/ is stale; run `make generate` and commit the result", file=sys.stderr)
    return EXIT_DIFFERS


def cmd_diff(layout: Layout, args: argparse.Namespace) -> int:
    recover(layout.generated)
    expected = _expected(layout)
    changes = compute_changes(layout.generated, expected)
    for rel in (*changes.written, *changes.removed):
        path = layout.generated / rel
        old = path.read_text(errors="replace").splitlines(keepends=True) if path.exists() else []
        new = expected[rel].decode().splitlines(keepends=True) if rel in expected else []
        sys.stdout.writelines(
            difflib.unified_diff(old, new, f"a/generated/{rel}", f"b/generated/{rel}" if rel in expected else "/dev/null")
        )
    return EXIT_DIFFERS if not changes.empty else EXIT_OK


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m generator", description="Generate per-platform kernel packages from specs.")
    parser.add_argument("--root", type=Path, default=Path.cwd(), help="project root holding specs/, templates/ and generated/")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("generate", help="render every package into generated/ (writes only changed files)")
    sub.add_parser("check", help="exit 1 when generated/ is not what the specs produce")
    sub.add_parser("diff", help="show, as a unified diff, what `generate` would change")
    args = parser.parse_args(argv)
    layout = Layout(args.root.resolve())
    command = {"generate": cmd_generate, "check": cmd_check, "diff": cmd_diff}[args.command]
    try:
        return command(layout, args)
    except SpecError as exc:
        for problem in exc.problems:
            print(problem, file=sys.stderr)
        kind = "contract violation" if isinstance(exc, ContractError) else "spec error"
        count = len(exc.problems)
        print(f"error: {count} {kind}{'s' if count > 1 else ''}; generated/ was not changed", file=sys.stderr)
        return EXIT_ERROR
    except GeneratorError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_ERROR
