"""The layering of ``updater/`` as a checked contract, counting imports inside functions.

``.ci/run`` holds the contract with import-linter (``[tool.importlinter]`` in pyproject.toml);
these tests hold the same contract from the source with :mod:`ast`, so that it is checked
wherever the tests run, and prove that import-linter sees what they see: an import inside a
function body, or in an ``if TYPE_CHECKING:`` block (annotations), is an import like any other.
"""

from __future__ import annotations

import ast
import shutil
import subprocess
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "updater"
# Imports of mux's own modules that may stay inside a function: each where a fast path or a
# process's start must not pay for what is behind it (docs/build.md), with its reason beside it.
MAX_FUNCTION_IMPORTS = 26  # 26: __main__'s path for a staged release (updater.cli.staged)


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def resolve(name: str) -> str:
    """The module ``name`` (``a.b.c``, maybe ``module.attribute``) stands for."""
    while name not in MODULES:
        name = name.rpartition(".")[0]
    return name


def imports(path: Path, *, type_checking: bool = False) -> Iterator[tuple[str, int, bool]]:
    """(imported module, line, inside a function) for every import of ``updater`` in
    ``path``; those in ``if TYPE_CHECKING:`` blocks only with ``type_checking``."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    skipped: set[int] = set()
    in_function: set[int] = set()
    for node in ast.walk(tree):
        if (
            not type_checking
            and isinstance(node, ast.If)
            and getattr(node.test, "id", None) == "TYPE_CHECKING"
        ):
            skipped |= {id(child) for child in ast.walk(node)}
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            in_function |= {id(child) for child in ast.walk(node) if child is not node}
    package = module_name(path).rpartition(".")[0]
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: only the protocol-bearing file keeps its own spelling
                parent = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parent, *([node.module] if node.module else [])])
            names = [f"{base}.{alias.name}" for alias in node.names] or [base]
        for name in names:
            if name == "updater" or name.startswith("updater."):
                yield resolve(name), node.lineno, id(node) in in_function


def graph(*, type_checking: bool = False) -> dict[str, set[str]]:
    """Every module's imports of updater's modules (annotations' too with
    ``type_checking``)."""
    edges: dict[str, set[str]] = {name: set() for name in MODULES}
    for name, path in MODULES.items():
        found = imports(path, type_checking=type_checking)
        edges[name] |= {target for target, _, _ in found if target != name}
    return edges


def test_no_module_of_updater_is_in_an_import_cycle() -> None:
    # Annotations' imports count: a circle only the type checker walks is still one a
    # reader follows.
    edges = graph(type_checking=True)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles: list[list[str]] = []

    def visit(node: str) -> None:  # Tarjan's strongly connected components
        index[node] = low[node] = len(index)
        stack.append(node)
        for target in sorted(edges[node]):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for node in sorted(edges):
        if node not in index:
            visit(node)
    assert cycles == []


def layers() -> list[list[str]]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    contracts = config["tool"]["importlinter"]["contracts"]
    (contract,) = [
        c for c in contracts if c["type"] == "layers" and c["layers"][0].startswith("updater.")
    ]
    return [
        [part.strip() for part in layer.replace("|", ":").split(":")]
        for layer in contract["layers"]
    ]


def layer_of(module: str, order: list[list[str]]) -> int | None:
    for position, layer in enumerate(order):
        if any(module == top or module.startswith(top + ".") for top in layer):
            return position
    return None


def test_each_layer_imports_only_the_layers_below_it() -> None:
    order = layers()
    placed = {name: layer_of(name, order) for name in MODULES}
    assert [name for name, at in placed.items() if at is None] == ["updater"]
    upward = sorted(
        f"{name} -> {target}"
        # Annotations' imports count: an interface a layer uses sits beside it, not above.
        for name, targets in graph(type_checking=True).items()
        for target in targets
        if placed[name] is not None and placed[target] is not None and placed[target] < placed[name]  # type: ignore[operator]
    )
    assert upward == []


def test_few_imports_of_mux_s_own_modules_sit_inside_functions_each_with_its_reason() -> None:
    inside = sorted(
        {
            (name, line)
            for name, path in MODULES.items()
            for _target, line, in_function in imports(path)
            if in_function
        }
    )
    assert len(inside) <= MAX_FUNCTION_IMPORTS, inside
    unexplained = []
    for name, line in inside:
        lines = MODULES[name].read_text(encoding="utf-8").splitlines()
        if "#" not in lines[line - 1] and not lines[line - 2].strip().startswith("#"):
            unexplained.append(f"{name}:{line}: {lines[line - 1].strip()}")
    assert unexplained == []


def test_every_subpackage_of_updater_has_an_empty_init() -> None:
    inits = sorted(PACKAGE.glob("*/**/__init__.py"))
    assert len(inits) >= 10
    assert [str(p.relative_to(ROOT)) for p in inits if p.read_bytes().strip()] == []


@pytest.fixture(scope="module")
def lint_imports() -> list[str]:
    uv = shutil.which("uv")
    if uv is None:
        pytest.skip("uv is not installed (import-linter runs in its own locked group)")
    return [
        *(uv, "run", "--project", str(ROOT), "--isolated", "--only-group", "lint"),
        *("lint-imports", "--no-cache"),
    ]


def test_import_linter_holds_the_contract_and_sees_imports_inside_functions(
    lint_imports: list[str], tmp_path: Path
) -> None:
    kept = subprocess.run(
        lint_imports, cwd=ROOT, capture_output=True, text=True, timeout=300, check=False
    )
    assert kept.returncode == 0, kept.stdout[-3000:] + kept.stderr[-3000:]
    # A copy of the tree where one leaf imports the CLI, inside a function only.
    copy = tmp_path / "tree"
    for package in ("updater", "release"):
        shutil.copytree(
            ROOT / package, copy / package, ignore=shutil.ignore_patterns("__pycache__")
        )
    shutil.copy2(ROOT / "pyproject.toml", copy / "pyproject.toml")
    errors = copy / "updater" / "errors.py"
    errors.write_text(
        errors.read_text(encoding="utf-8")
        + "\n\ndef _probe() -> None:\n    from updater.cli import app  # noqa: F401\n",
        encoding="utf-8",
    )
    broken = subprocess.run(
        [*lint_imports, "--config", str(copy / "pyproject.toml")],
        cwd=copy,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert broken.returncode != 0
    assert "updater.errors -> updater.cli.app" in broken.stdout


def function_imports(path: Path) -> Iterator[tuple[int, bool]]:
    """(line, explained) for every import inside a function of ``path``, of any module: its
    group of imports carries a comment, on a line of the group or just above it."""
    text = path.read_text(encoding="utf-8")
    lines = text.splitlines()
    tree = ast.parse(text)
    skipped: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and getattr(node.test, "id", None) == "TYPE_CHECKING":
            skipped |= {id(child) for child in ast.walk(node)}
    for function in ast.walk(tree):
        if not isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        found = [
            node
            for node in ast.walk(function)
            if isinstance(node, ast.Import | ast.ImportFrom) and id(node) not in skipped
        ]
        covered = {line for node in found for line in range(node.lineno, node.end_lineno + 1)}
        for node in found:
            first = node.lineno
            while first - 1 in covered:
                first -= 1
            last = first
            while last + 1 in covered:
                last += 1
            explained = any("#" in lines[line - 1] for line in range(first, last + 1)) or (
                lines[first - 2].strip().startswith("#")
            )
            yield node.lineno, explained


def test_every_import_inside_a_function_says_why_it_is_not_at_the_top() -> None:
    unexplained = [
        f"{path.relative_to(ROOT)}:{line}"
        for root in (PACKAGE, ROOT / "release")
        for path in sorted(root.rglob("*.py"))
        for line, explained in function_imports(path)
        if not explained
    ]
    assert unexplained == []


def test_no_test_module_imports_another_test_module_or_the_conftest() -> None:
    """What two test files share lives in tests/support/, once: a test module that imports
    another (or conftest.py) runs that module's fixtures and import-time work, and a helper
    moved out of it breaks the importer."""
    offenders = []
    for path in sorted((ROOT / "tests").rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            names = (
                [alias.name for alias in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
                if isinstance(node, ast.ImportFrom) and node.level == 0
                else []
            )
            offenders += [
                f"{path.relative_to(ROOT)}:{node.lineno} {name}"
                for name in names
                if name.startswith(("tests.test_", "tests.conftest"))
            ]
    assert offenders == [], "import it from tests/support/ instead"
