"""The direction of imports between the parts of the house (docs/architecture.md).

Every module's imports are read with :mod:`ast` — those at module level and those inside functions (the
lazy ones count: a lazy import up the stack is still an arrow up) — and each must point at a part that is
not higher than the importer's own. The order, lowest first:

    schemas < core (ledger.errors, ledger.redact, ledger.sdk, ledger.kv, ledger.mfu, ledger.jsonsafe,
      ledger.process, ledger.progress, ledger._native, and ledger.store.layout: the names of the directories, which
      the SDK writes by) < integrations
      (adapters that speak the SDK) < store < ingest
      < record < analyses < replay < planning < report < the facade (ledger/__init__, ledger.api) < cli

``schemas`` imports nothing of ``ledger``; ``runners`` import only ``ledger.sdk`` of it.
"""

from __future__ import annotations

import ast
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import child_env

ROOT = Path(__file__).resolve().parents[1]

ORDER = ("schemas", "core", "integrations", "store", "ingest", "record", "analyses", "replay", "planning", "report",
         "facade", "cli")
"""Parts of the house, lowest first. A module may import its own part and those before it."""
RANK = {part: i for i, part in enumerate(ORDER)}
PACKAGES = ("integrations", "store", "ingest", "record", "analyses", "replay", "planning", "report", "cli")
CORE = ("errors", "redact", "sdk", "kv", "mfu", "jsonsafe", "process", "progress", "_native")
FACADE = ("api",)


def part_of(module: str) -> str | None:
    """The part a dotted module name belongs to (None: not ours, e.g. numpy; or ``runners``)."""
    head, *rest = module.split(".")
    if head == "schemas":
        return "schemas"
    if head != "ledger":
        return None
    if not rest:
        return "facade"
    if rest[:2] == ["store", "layout"]:
        return "core"  # the names of the ledger and staging directories: the SDK writes by them
    if rest[0] in PACKAGES:
        return rest[0]
    if rest[0] in CORE:
        return "core"
    if rest[0] in FACADE:
        return "facade"
    raise AssertionError(f"{module}: a top-level module of ledger that no part claims; add it to the layout "
                         "(tests/test_layout.py and docs/architecture.md)")


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


@dataclass(frozen=True)
class Arrow:
    """One import: who imports what, where."""

    importer: str
    imported: str
    line: int
    lazy: bool
    """Inside a function, or under ``if TYPE_CHECKING:`` (not run when the module is imported)."""


def imports_of(source: str, importer: str, is_package: bool) -> list[Arrow]:
    """Every import statement of a module (module level and inside functions), as absolute names.
    ``from ledger import __version__`` names the core (the version lives in the package's light door)."""
    nodes = list(ast.walk(ast.parse(source)))  # walked once: the suite parses every module of the tree
    arrows: list[Arrow] = []
    function_lines = {n.lineno: n.end_lineno or n.lineno for n in nodes
                      if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)
                      or (isinstance(n, ast.If) and isinstance(n.test, ast.Name) and n.test.id == "TYPE_CHECKING")}

    def lazy(line: int) -> bool:
        return any(start < line <= end for start, end in function_lines.items())

    for node in nodes:
        if isinstance(node, ast.Import):
            arrows += [Arrow(importer, alias.name, node.lineno, lazy(node.lineno)) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                package = importer.split(".") if is_package else importer.split(".")[:-1]
                anchor = package[: len(package) - node.level + 1]
                base = ".".join([*anchor, *([base] if base else [])])
            for alias in node.names:
                if base == "ledger" and alias.name == "__version__":
                    target = "ledger.errors"  # the version string: a fact of the core, not the facade
                elif base in ("ledger", "schemas") and alias.name != "*":
                    target = f"{base}.{alias.name}"
                else:
                    target = base
                arrows.append(Arrow(importer, target, node.lineno, lazy(node.lineno)))
    return arrows


def violations(root: Path) -> list[str]:
    """Arrows that point up the house, or out of it where nothing may go, under ``root``."""
    found: list[str] = []
    seen: set[tuple[Path, int, str]] = set()
    for path in sorted([*root.glob("ledger/**/*.py"), *root.glob("schemas/**/*.py"), *root.glob("runners/**/*.py")]):
        importer = module_name(path, root)
        is_package = path.name == "__init__.py"
        for arrow in imports_of(path.read_text(), importer, is_package):
            if (path, arrow.line, arrow.imported) in seen:
                continue
            seen.add((path, arrow.line, arrow.imported))
            where = f"{path.relative_to(root)}:{arrow.line}{' (lazy)' if arrow.lazy else ''}"
            if importer.startswith("runners"):
                if arrow.imported.startswith("ledger") and arrow.imported not in ("ledger", "ledger.sdk"):
                    found.append(f"{where}: runners may import only ledger.sdk, not {arrow.imported}")
                continue
            own, target = part_of(importer), part_of(arrow.imported)
            if own is None or target is None:
                continue
            if importer == "ledger" and target == "facade":
                continue  # the package's door re-exports the facade (lazily)
            if RANK[target] > RANK[own]:
                found.append(f"{where}: {importer} ({own}) imports {arrow.imported} ({target}), "
                             f"which is above it (order: {' < '.join(ORDER)})")
    return found


@pytest.mark.slow  # parses every module of the tree: 3-13 s on a loaded 2-core machine
def test_no_import_points_up_the_house() -> None:
    assert violations(ROOT) == []


MUTUAL_LEFT: set[tuple[str, str]] = set()
"""Pairs of modules that still import each other: none (issue 34 took job and wrapper apart, issue 33 launch and
worker)."""


def mutual_imports(root: Path) -> set[tuple[str, str]]:
    """Pairs of modules of ``ledger`` under ``root`` that import each other (lazy imports included: a lazy arrow
    back is still a circle), each pair sorted. ``from ledger.store import index`` counts for the module
    ``ledger.store.index``; a name that is no module counts for the module or package that defines it."""
    paths = {module_name(p, root): p for p in sorted(root.glob("ledger/**/*.py"))}
    edges: dict[str, set[str]] = {}
    for name, path in paths.items():
        targets = set()
        package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                wanted = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    base = ".".join([*package[: len(package) - node.level + 1], *([base] if base else [])])
                wanted = [f"{base}.{alias.name}" for alias in node.names]
            else:
                continue
            for target in wanted:
                while target and target not in paths:
                    target = target.rpartition(".")[0]
                if target and target != name:
                    targets.add(target)
        edges[name] = targets
    return {(min(a, b), max(a, b)) for a, targets in edges.items() for b in targets
            if a in edges.get(b, set()) and not b.startswith(a + ".") and not a.startswith(b + ".")}


@pytest.mark.slow  # parses every module of the tree
def test_no_two_modules_import_each_other() -> None:
    """Issue 34: ``ledger.record.job`` and ``ledger.record.wrapper`` imported each other (the job's outcome, the
    wrapper's ``say``); both now take them from ``ledger.record.outcome``."""
    assert mutual_imports(ROOT) - MUTUAL_LEFT == set()


def test_a_planted_circle_is_found(tmp_path: Path) -> None:
    root = _tree(tmp_path, {
        "ledger/__init__.py": "",
        "ledger/record/__init__.py": "",
        "ledger/record/job.py": "def f():\n    from ledger.record.wrapper import say\n",
        "ledger/record/wrapper.py": "from ledger.record import job\n",
        "ledger/record/recover.py": "from ledger.record.job import f\n",
    })
    assert mutual_imports(root) == {("ledger.record.job", "ledger.record.wrapper")}


def _tree(tmp_path: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        path = tmp_path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    return tmp_path


def test_the_core_stays_a_leaf() -> None:
    """Importing ``ledger.store.layout`` (as the SDK does) runs ``ledger/store/__init__``: it must import
    nothing at module level, or the SDK would load the whole store (pydantic, DuckDB)."""
    init = ROOT / "ledger" / "store" / "__init__.py"
    eager = [a for a in imports_of(init.read_text(), "ledger.store", True) if not a.lazy and part_of(a.imported)]
    assert eager == []


def test_a_planted_upward_import_is_found(tmp_path: Path) -> None:
    """The check is not vacuous: a synthetic house with one arrow up at module level, one inside a function
    and one relative; each is named with its file and line."""
    root = _tree(tmp_path, {
        "ledger/__init__.py": "from ledger.api import open\n",
        "ledger/api.py": "from ledger.cli import main\n",  # facade -> cli: up
        "ledger/errors.py": "",
        "ledger/store/__init__.py": "",
        "ledger/store/index.py": "import duckdb\nfrom ledger.errors import LedgerError\n",
        "ledger/analyses/__init__.py": "",
        "ledger/analyses/goodput.py": """
            from ledger.store import index

            def render():
                from ledger.report.svg import plot  # analyses -> report: up, lazily
                return plot
        """,
        "ledger/report/__init__.py": "",
        "ledger/report/svg.py": "from ledger.analyses import goodput\n",  # down: fine
        "ledger/cli/__init__.py": "",
        "ledger/store/reading.py": "from ..record import wrapper\n",  # store -> record: up, relative
        "ledger/record/__init__.py": "",
        "ledger/record/wrapper.py": "from ledger import __version__\n",  # the version: fine
        "schemas/__init__.py": "from ledger.errors import BadInput\n",  # schemas -> ledger: up
        "runners/moe/train.py": "import ledger.sdk\nfrom ledger.store import index\n",  # runner -> store
    })
    found = violations(root)
    assert len(found) == 5, found
    assert any(v.startswith("ledger/api.py:1: ledger.api (facade) imports ledger.cli (cli)") for v in found)
    assert any(v.startswith("ledger/analyses/goodput.py:5 (lazy): ledger.analyses.goodput") for v in found)
    assert any(v.startswith("ledger/store/reading.py:1: ledger.store.reading (store) imports ledger.record")
               for v in found)
    assert any(v.startswith("schemas/__init__.py:1:") for v in found)
    assert any(v.startswith("runners/moe/train.py:2: runners may import only ledger.sdk") for v in found)


def test_an_unclaimed_top_level_module_is_refused() -> None:
    with pytest.raises(AssertionError, match="no part claims"):
        part_of("ledger.misc")


@pytest.mark.parametrize("package", PACKAGES)
def test_each_package_says_what_it_is_for_and_what_it_may_import(package: str) -> None:
    doc = ast.get_docstring(ast.parse((ROOT / "ledger" / package / "__init__.py").read_text())) or ""
    assert len(doc.split()) >= 10, f"ledger/{package}/__init__.py: say what the package is for"
    assert "may import" in doc.lower(), f"ledger/{package}/__init__.py: say what it may import"


def test_schemas_names_resolve_lazily() -> None:
    """``schemas`` loads each public name from its module on first use (``ledger --help`` imports none)."""
    import schemas

    assert set(schemas.__all__) == set(schemas._MODULES)
    for name in schemas.__all__:
        assert getattr(schemas, name) is getattr(__import__(schemas._MODULES[name], fromlist=[name]), name)


def test_cli_start_imports_no_heavy_module() -> None:
    """`ledger --help` imports click and the standard library only (bench/bench_startup.py times it)."""
    import subprocess
    import sys

    code = ("import sys; from ledger.cli.app import cli; "
            "print(sorted(m for m in ('pydantic', 'pyarrow', 'duckdb', 'numpy', 'rich', 'schemas', 'torch') "
            "if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True,
                         env=child_env())
    assert out.stdout.strip() == "[]"
