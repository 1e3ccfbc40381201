"""``python -m generator generate | check | diff | explain | schema | evidence``.

A ``generate`` that changes nothing is answered from digests (``noop``) before the models, the
loader or the renderer are imported, so this module imports them only where a command needs them.
"""

from __future__ import annotations

import argparse
import difflib
import errno
import os
import re
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from . import noop
from .errors import ContractError, GeneratorError, SpecError, one_line
from .files import MAX_JSON_BYTES, FileProblem, read_json, read_regular
from .paths import EVIDENCE_DIR, MANIFEST, README, Layout
from .write import Changes, compute_changes, exclusive, manifest_bytes, recover, write_files, write_tree

if TYPE_CHECKING:
    from .evidence import Evidence
    from .pipeline import Output

EXIT_OK, EXIT_DIFFERS, EXIT_ERROR = 0, 1, 2
EXIT_INTERRUPTED = 130  # 128 + SIGINT, as a shell reports a command stopped by Ctrl-C
EXIT_BROKEN_PIPE = 141  # 128 + SIGPIPE: the reader of the output went away (``diff | head``)
REGISTRY = "registry.json"
MAX_SHOWN_BYTES = 16 * 1024 * 1024
"""``diff`` shows at most this much of a file that is in the way (the rest is past any output's size)."""
MAX_EXACT_DIFF_LINES = 40_000
"""``diff`` matches every line of two versions of a file up to this many lines in all (``unified_diff``)."""


def _expected(layout: Layout, workers: int | None = None) -> Output:
    from .pipeline import Output, produce_all

    output = produce_all(layout, workers)
    return Output({**output.files, MANIFEST: manifest_bytes(output.files)}, output.extras, output.evidence)


def _report_evidence(output: Output, command: str) -> None:
    """Stale and orphaned evidence records: shown, never a failure (CI has no GPU to refresh device records)."""
    from . import evidence

    if output.evidence is None:
        return
    out, err = evidence.report_lines(output.evidence, command)
    for line in out:
        print(line)
    for line in err:
        print(line, file=sys.stderr)


def _shown(changes: Changes) -> Iterable[tuple[str, str]]:
    """(path relative to the root, path relative to generated/ or the root) for every changed file."""
    for rel in (*changes.written, *changes.removed):
        yield f"generated/{rel}", rel
    for rel in changes.extra:
        yield rel, rel


def cmd_generate(layout: Layout, args: argparse.Namespace) -> int:
    start = time.perf_counter()
    # Digested before anything is read for rendering: an input edited during the run then no longer
    # matches what is stored, and the next run renders again.
    inputs = noop.inputs_digest(layout.root)
    if inputs is not None and not args.full:
        state = noop.unchanged(layout.root, inputs)
        if state is not None:
            elapsed = time.perf_counter() - start
            extras = f"; outside it {state.extras} files, 0 written" if state.extras else ""
            print(
                f"generate: generated/ {state.files} files, 0 written, 0 removed, {state.files} unchanged{extras} ({elapsed * 1000:.0f} ms; "
                f"specs, templates, evidence/, the generator and every output are as the last generate left them, so nothing was rendered)"
            )
            for line in state.report_out:
                print(line)
            for line in state.report_err:
                print(line, file=sys.stderr)
            return EXIT_OK
    from . import evidence
    from .pipeline import produce_all

    output = produce_all(layout, args.jobs)
    changes = write_tree(layout.generated, output.files, output.extras)
    elapsed = time.perf_counter() - start
    for rel in changes.written:
        print(f"wrote   generated/{rel}")
    for rel in changes.extra:
        print(f"wrote   {rel}")
    for rel in changes.removed:
        print(f"removed generated/{rel}")
    total = len(output.files) + 1
    extras = f"; outside it {len(output.extras)} files, {len(changes.extra)} written" if output.extras else ""
    print(
        f"generate: generated/ {total} files, {len(changes.written)} written, {len(changes.removed)} removed, "
        f"{total - len(changes.written)} unchanged{extras} ({elapsed * 1000:.0f} ms)"
    )
    report = evidence.report_lines(output.evidence, "generate") if output.evidence is not None else ([], [])
    _report_evidence(output, "generate")
    # Digested again: an input edited while this ran (even if put back before the next run) may
    # have been read for rendering, so these outputs are not known to be those of the inputs.
    if inputs is not None and noop.inputs_digest(layout.root) == inputs:
        noop.record(layout.root, inputs, {**output.files, MANIFEST: changes.manifest}, output.extras, report)
    else:
        noop.forget(layout.root)
    return EXIT_OK


def cmd_check(layout: Layout, args: argparse.Namespace) -> int:
    recover(layout.generated, layout.extras, read_only=True)
    expected = _expected(layout, args.jobs)
    changes = compute_changes(layout.generated, expected.files, expected.extras)
    _report_evidence(expected, "check")
    if changes.empty:
        print("check: generated/, the README's generated tables, schema/ and docs/spec-language.md match the specs, templates and evidence/")
        return EXIT_OK
    for rel in changes.written:
        state = "differs from what the specs produce" if (layout.generated / rel).exists() else "is missing"
        print(f"stale: generated/{rel} {state}", file=sys.stderr)
    for rel in changes.removed:
        print(f"stale: generated/{rel} is no longer produced and should be removed", file=sys.stderr)
    for rel in changes.extra:
        state = "is missing" if not (layout.root / rel).exists() else "differs from what the specs produce"
        if rel == README:
            state = "has an operator table or a verification table (between GENERATED markers) that differs from what the specs and evidence/ produce"
        print(f"stale: {rel} {state}", file=sys.stderr)
    print("check: generated files are stale; run `make generate` and commit the result", file=sys.stderr)
    return EXIT_DIFFERS


def _git(layout: Layout, what: str, *args: str) -> subprocess.CompletedProcess[bytes]:
    try:
        return subprocess.run(["git", *args], cwd=layout.root, capture_output=True, check=False, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise GeneratorError(f"{what}: cannot run git ({exc})") from None


def _shown_value(value: str) -> str:
    """A command-line value as a message shows it: as typed, or quoted and escaped where it holds
    a character that could break or disguise the line."""
    return value if value and one_line(value) == value and not value.isspace() else ascii(value)


def _base_registry(layout: Layout, rev: str) -> bytes:
    """generated/registry.json as committed at ``rev``, which must name a commit: it is verified
    (never read as an option) and the file is read from the verified object id."""
    what = f"--base {_shown_value(rev)}"
    verified = _git(layout, what, "rev-parse", "--verify", "--quiet", "--end-of-options", f"{rev}^{{commit}}")
    commit = verified.stdout.decode(errors="replace").strip()
    if verified.returncode != 0 or not re.fullmatch(r"[0-9a-f]{40}|[0-9a-f]{64}", commit):
        raise GeneratorError(f"{what}: not a commit in this repository; --base takes a revision such as HEAD, main or origin/main")
    result = _git(layout, what, "show", f"{commit}:generated/{REGISTRY}")
    if result.returncode != 0:
        message = result.stderr.decode(errors="replace").strip().splitlines()
        raise GeneratorError(f"{what}: git show {commit}:generated/{REGISTRY} failed: {message[-1] if message else 'no output'}")
    return result.stdout


def _semantic(layout: Layout, args: argparse.Namespace, new_registry: bytes) -> list[str]:
    from . import semantic_diff

    if args.base is not None:
        source, old_bytes = f"{_shown_value(args.base)}:generated/{REGISTRY}", _base_registry(layout, args.base)
    else:
        source, path = f"generated/{REGISTRY}", layout.generated / REGISTRY
        if not os.path.lexists(path):
            old_bytes = b'{"ops": {}}'  # nothing generated yet: every op is new
        else:
            try:
                old_bytes = read_regular(path, MAX_JSON_BYTES)
            except FileProblem as problem:
                return [f"semantic changes: unavailable ({source}: {problem})"]
    try:
        old = semantic_diff.parse_state(old_bytes, source)
        new = semantic_diff.parse_state(new_registry, f"the rendered {REGISTRY}")
    except semantic_diff.StateError as exc:
        return [f"semantic changes: unavailable ({exc})"]
    return semantic_diff.report(semantic_diff.compare(old, new), source)


def _sources_on_disk(layout: Layout) -> dict[str, bytes]:
    """The packages' C++ sources under generated/, keyed as under it (what a record's hash covers)."""
    from .source_hash import package_files

    found: dict[str, bytes] = {}
    for package in sorted(layout.generated.iterdir()) if layout.generated.is_dir() else []:
        if package.is_dir() and not package.is_symlink() and (package / "csrc").is_dir():
            found |= package_files(package, package.name)
    return found


def _sources_at(layout: Layout, rev: str) -> dict[str, bytes]:
    """The packages' C++ sources under generated/ as committed at ``rev`` (verified as for the registry)."""
    what = f"--base {_shown_value(rev)}"
    verified = _git(layout, what, "rev-parse", "--verify", "--quiet", "--end-of-options", f"{rev}^{{commit}}")
    commit = verified.stdout.decode(errors="replace").strip()
    listed = _git(layout, what, "ls-tree", "-r", "-z", "--full-tree", commit, "--", "generated/")
    if verified.returncode != 0 or listed.returncode != 0:
        raise GeneratorError(f"{what}: cannot list generated/ at that commit")
    wanted: dict[str, str] = {}
    for entry in listed.stdout.split(b"\0"):
        meta, _, path = entry.decode(errors="replace").partition("\t")  # "<mode> <type> <object>\t<path>"
        kind, oid = (meta.split(" ") + ["", ""])[1:3]
        if kind == "blob" and path.split("/")[2:3] == ["csrc"]:
            wanted[path.removeprefix("generated/")] = oid
    if not wanted:
        return {}
    try:
        batch = subprocess.run(["git", "cat-file", "--batch"], cwd=layout.root, input="".join(f"{oid}\n" for oid in wanted.values()).encode(),
                               capture_output=True, check=False, timeout=120)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise GeneratorError(f"{what}: cannot run git ({exc})") from None
    out, at, found = batch.stdout, 0, {}
    for rel in wanted:
        header_end = out.index(b"\n", at)
        size = int(out[at:header_end].split()[2])
        found[rel] = out[header_end + 1 : header_end + 1 + size]
        at = header_end + 1 + size + 1
    return found


def _evidence_lines(layout: Layout, args: argparse.Namespace, expected: Output) -> list[str]:
    """The records the change makes stale (or current again), compared with generated/ as it is, or at --base."""
    from . import evidence

    if expected.evidence is None or not expected.evidence.ledger.records:
        return []
    try:
        before = _sources_at(layout, args.base) if args.base is not None else _sources_on_disk(layout)
    except (GeneratorError, OSError, ValueError, IndexError) as exc:
        return [f"evidence the change makes stale: unavailable ({exc})"]
    return evidence.consequence_lines(evidence.consequences(expected.evidence.ledger, before, expected.files))


def cmd_diff(layout: Layout, args: argparse.Namespace) -> int:
    recover(layout.generated, layout.extras, read_only=True)
    expected = _expected(layout, args.jobs)
    changes = compute_changes(layout.generated, expected.files, expected.extras)
    summary = _semantic(layout, args, expected.files.get(REGISTRY, b'{"ops": {}}'))
    semantic_changed = not summary[0].endswith(": none")
    summary += _evidence_lines(layout, args, expected)
    if changes.empty and not semantic_changed and args.base is None and not args.summary:
        return EXIT_OK
    print("\n".join(summary))
    if not args.summary:
        for shown, rel in _shown(changes):
            in_tree = shown.startswith("generated/")
            path = (layout.generated if in_tree else layout.root) / rel
            data = (expected.files if in_tree else expected.extras).get(rel)
            try:
                old = read_regular(path, MAX_SHOWN_BYTES).decode(errors="replace").splitlines(keepends=True) if os.path.lexists(path) else []
            except FileProblem as problem:
                old = [f"({shown}: {problem})\n"]
            new = data.decode().splitlines(keepends=True) if data is not None else []
            sys.stdout.writelines(unified_diff(old, new, f"a/{shown}", f"b/{shown}" if data is not None else "/dev/null"))
    return EXIT_DIFFERS if not changes.empty or semantic_changed else EXIT_OK


def unified_diff(a: list[str], b: list[str], fromfile: str, tofile: str, context: int = 3) -> Iterator[str]:
    """``difflib.unified_diff`` without its "popular line" heuristic, which in a file of more than
    200 lines takes every line that makes up more than 1% of it (a blank line, a table's header
    row: REGISTRY.md is made of them) for junk that never anchors a match: a one-line change then
    showed as a hundred unchanged lines removed and added again.  Matching every line costs more
    on a file of many distinct lines, so above MAX_EXACT_DIFF_LINES the heuristic stays."""
    matcher = difflib.SequenceMatcher(None, a, b, autojunk=len(a) + len(b) > MAX_EXACT_DIFF_LINES)
    for index, group in enumerate(matcher.get_grouped_opcodes(context)):
        if index == 0:
            yield f"--- {fromfile}\n"
            yield f"+++ {tofile}\n"
        first, last = group[0], group[-1]
        yield f"@@ -{_range(first[1], last[2])} +{_range(first[3], last[4])} @@\n"
        for tag, i1, i2, j1, j2 in group:
            if tag == "equal":
                yield from (f" {line}" for line in a[i1:i2])
                continue
            yield from (f"-{line}" for line in a[i1:i2])
            yield from (f"+{line}" for line in b[j1:j2])


def _range(start: int, stop: int) -> str:
    """A hunk's line range as unified diffs write it (difflib's _format_range_unified)."""
    length = stop - start
    beginning = start + 1 if length else start
    return f"{beginning}" if length == 1 else f"{beginning},{length}"


def _evidence_for_explain(layout: Layout) -> Evidence | str:
    """The ledger judged against the sources as rendered now, or why that cannot be had (explain also
    serves specs that ``generate`` refuses)."""
    from .pipeline import produce_all

    try:
        judged = produce_all(layout).evidence
    except GeneratorError as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        return f"unavailable: the specs do not generate ({first})"
    return judged if judged is not None else "unavailable"


def cmd_explain(layout: Layout, args: argparse.Namespace) -> int:
    from .explain import explain
    from .load import load_catalog

    catalog = load_catalog(layout.specs, layout.root)
    lines = explain(catalog, args.op, args.platform)
    print("\n".join(lines))
    judged = _evidence_for_explain(layout)
    print()
    if isinstance(judged, str):
        print(f"evidence: {judged}")
        return EXIT_OK
    print(f"evidence for {args.op} (from {EVIDENCE_DIR}/, judged against the sources as rendered now):")
    for platform in catalog.platforms:
        if args.platform in (None, platform.name):
            found = judged.explain_lines(args.op, platform.name)
            print(f"  {platform.name}:" + ("" if found else " no native backend"))
            for line in found:
                print(line)
    return EXIT_OK


def cmd_evidence(layout: Layout, args: argparse.Namespace) -> int:
    """``evidence record-executed RESULTS``: the generated tests' results (``$RLK_EVIDENCE_OUT``) into executed records."""
    from . import evidence, record
    from .pipeline import load_checked
    from .source_hash import package_files

    shown = str(args.results)
    try:
        results = read_json(args.results)
    except FileProblem as problem:
        raise GeneratorError(f"{shown}: {problem}") from None
    catalog = load_checked(layout)
    platform = results.get("package_platform") if isinstance(results, dict) else None
    files: dict[str, bytes] = {}
    if isinstance(platform, str):
        source = args.package_dir or layout.generated / platform
        files = package_files(source, platform) if source.is_dir() else {}
    records, skipped = record.executed_records(results, catalog, files, record.commit_of(layout.root), shown, args.check)
    for line in skipped:
        print(f"skipped  {line}")
    outcome = record.record(layout.root, records, refresh=not args.no_render)
    for item in outcome.changed:
        print(f"recorded {item.shown()} ({item.source_sha256[:12]}, commit {evidence.short_commit(item.commit)})")
    print(f"evidence: {len(records)} executed records from {shown}, {len(outcome.changed)} new or changed; {outcome.note}")
    return EXIT_OK


def cmd_schema(layout: Layout, args: argparse.Namespace) -> int:
    """Only the schemas: works while the specs themselves are broken, which is when an editor needs them."""
    from .schema import schema_files

    files = schema_files()
    written = write_files(layout.root, files)
    for rel in written:
        print(f"wrote   {rel}")
    print(f"schema: {len(files)} files, {len(written)} written")
    return EXIT_OK


COMMANDS: dict[str, Callable[[Layout, argparse.Namespace], int]] = {
    "generate": cmd_generate,
    "check": cmd_check,
    "diff": cmd_diff,
    "explain": cmd_explain,
    "schema": cmd_schema,
    "evidence": cmd_evidence,
}


MAX_JOBS = 256


def _jobs(value: str) -> int:
    try:
        count = int(value)
    except ValueError:
        count = 0
    if not 1 <= count <= MAX_JOBS:
        raise argparse.ArgumentTypeError(f"expected a whole number from 1 to {MAX_JOBS}, got {_shown_value(value)}")
    return count


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m generator", description="Generate per-platform kernel packages from specs.")
    parser.add_argument("--root", type=Path, default=Path.cwd(), help="project root holding specs/, templates/ and generated/")
    parser.add_argument(
        "-j",
        "--jobs",
        type=_jobs,
        metavar="N",
        help=(
            f"render in N processes, 1 to {MAX_JOBS}, and read the op specs in at most N (default: one per CPU for a catalog "
            "large enough to gain from it, else 1); the output is the same"
        ),
    )
    sub = parser.add_subparsers(dest="command", required=True)
    gen = sub.add_parser("generate", help="render generated/, the README's tables, schema/ and docs/spec-language.md (writes only changed files)")
    gen.add_argument(
        "--full",
        action="store_true",
        help="render even when the inputs and outputs are as the last generate left them (which is otherwise recognised and skipped)",
    )
    sub.add_parser("check", help="exit 1 when generated/, the README's tables, schema/ or docs/spec-language.md is not what the specs produce")
    diff = sub.add_parser("diff", help="what `generate` would change: a semantic summary, then a unified diff")
    diff.add_argument("--summary", action="store_true", help="print the semantic summary only")
    diff.add_argument("--base", metavar="REV", help="summarise against generated/registry.json at git revision REV (e.g. origin/main)")
    exp = sub.add_parser("explain", help="which backends an op runs on per platform, and why each candidate is accepted or refused")
    exp.add_argument("op", help="op name, e.g. det_gemm")
    exp.add_argument("--platform", help="one platform only (default: every platform)")
    sub.add_parser("schema", help="write the JSON Schema of the spec files to schema/ (for editors)")
    ev = sub.add_parser("evidence", help="write evidence records for a check that ran")
    ev_sub = ev.add_subparsers(dest="evidence_command", required=True)
    rec = ev_sub.add_parser(
        "record-executed",
        help="turn the generated tests' results ($RLK_EVIDENCE_OUT) into executed records: outcomes with passed > 0 and failed == 0",
    )
    rec.add_argument("results", type=Path, help="the JSON file the generated tests wrote")
    rec.add_argument("--package-dir", type=Path, help="the package the tests ran (hashes its csrc/); default generated/<package_platform>")
    rec.add_argument("--check", help="what ran, for the records (default: from the results file, else by package platform)")
    rec.add_argument("--no-render", action="store_true", help="write the ledger only; leave generated/ and the README to `make generate`")
    args = parser.parse_args(argv)
    layout = Layout(args.root.resolve())
    try:
        if args.command == "explain":  # reads specs (and renders in memory for the evidence)
            return COMMANDS[args.command](layout, args)
        if args.command == "evidence":  # takes the lock itself while it writes
            return COMMANDS[args.command](layout, args)
        # Every other command writes or may finish an interrupted commit: one run at a time.  check and
        # diff write nothing else, so where the lock file cannot be created they go on without it.
        with exclusive(
            layout.root,
            lambda: print(f"waiting for another generator run in {layout.root} to finish", file=sys.stderr, flush=True),
            read_only=args.command in ("check", "diff"),
            on_unlocked=lambda note: print(one_line(note), file=sys.stderr, flush=True),
        ):
            return COMMANDS[args.command](layout, args)
    except SpecError as exc:
        for problem in exc.problems:
            print(problem, file=sys.stderr)
        kind = "contract violation" if isinstance(exc, ContractError) else "spec error"
        count = len(exc.problems)
        print(f"error: {count} {kind}{'s' if count > 1 else ''}; nothing was written", file=sys.stderr)
        return EXIT_ERROR
    except GeneratorError as exc:
        print("\n".join(one_line(line) for line in f"error: {exc}".splitlines()), file=sys.stderr)
        return EXIT_ERROR


def _tolerant(stream: object) -> None:
    """Characters the stream's encoding lacks (an ASCII-only terminal) escaped, not an exception."""
    reconfigure = getattr(stream, "reconfigure", None)
    if reconfigure is not None:
        reconfigure(errors="backslashreplace")


def run(argv: list[str] | None = None) -> int:
    """``main`` as a command: the edges of a process end in a one-line message and the usual exit
    status, never a traceback -- Ctrl-C (130; a commit it interrupted is finished or undone by the
    next run, see ``write``), a reader that closed the pipe (141, silently), output that cannot be
    written (a full disk, /dev/full: 2)."""
    for stream in (sys.stdout, sys.stderr):
        _tolerant(stream)
    try:
        code = main(argv)
        sys.stdout.flush()  # here, where a failure can still be reported, not at interpreter exit
        return code
    except KeyboardInterrupt:
        print("error: interrupted; nothing half-written remains (an interrupted commit is finished by the next run)", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        _quiet_stdout()
        return EXIT_BROKEN_PIPE
    except OSError as exc:
        if exc.errno not in (errno.ENOSPC, errno.EIO, errno.EDQUOT, errno.EFBIG):
            raise
        _quiet_stdout()
        print(f"error: cannot write the output ({exc.strerror or exc})", file=sys.stderr)
        return EXIT_ERROR


def _quiet_stdout() -> None:
    """stdout pointed at /dev/null, so that the interpreter's own flush at exit finds nothing to fail on
    (what the failed stream still buffers goes there too)."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):
        pass
    sys.stdout = open(os.devnull, "w")  # noqa: SIM115 -- it lives until the process ends
