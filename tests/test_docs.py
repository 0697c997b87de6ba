"""The documentation stays true: links, anchors, named sections and shown commands resolve,
README.md and docs/ name no commit or issue, the README's first screen is for users, and
docs/performance.md is what the recorded bench results render to (tests/support/docs.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import docs, names

ROOT = docs.ROOT


def test_the_repository_docs_have_no_problem() -> None:
    assert docs.problems() == []


def test_every_module_function_and_file_the_docs_and_docstrings_name_exists() -> None:
    assert names.stale_names() == []


def test_a_name_that_no_longer_exists_is_found(tmp_path: Path) -> None:
    (tmp_path / "updater" / "sources").mkdir(parents=True)
    (tmp_path / "updater" / "sources" / "base.py").write_text(
        '"""Reads through :func:`updater.files.read_small_file`; see ``sources/gone.py``."""\n'
    )
    write_tree(
        tmp_path,
        {
            "README.md": "`updater.core.plan.settle`, `updater.servers.hub` and `release.cli`;\n"
            "`updater.files.no_such_reader`; .github/workflows/release.yml and release.md;\n"
            "`sources/base.py`, `updater/core/plan.py`.\n"
            "`servers.retention_reports`, `core.request.ReleaseRequest`, `tuf.ngclient`, and\n"
            "`lifecycle.withdrawn` (a JSON field).\n",
        },
    )
    assert names.stale_names(tmp_path) == [
        "README.md: servers.retention_reports does not exist",
        "README.md: updater.core.plan.settle does not exist",
        "README.md: updater.files.no_such_reader does not exist",
        "README.md: updater.servers.hub does not exist",
        "README.md: updater/core/plan.py does not exist",
        "updater/sources/base.py:1: sources/gone.py does not exist",
    ]


def write_tree(root: Path, pages: dict[str, str]) -> Path:
    for name, text in pages.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text, encoding="utf-8")
    return root


@pytest.mark.parametrize(
    ("readme", "found"),
    [
        ("[x](#nowhere)\n\n## Here\n", "no heading of README.md has the anchor #nowhere"),
        ("[x](docs/missing.md)\n", "docs/missing.md does not exist"),
        ("[x](docs/a.md#the-b)\n", "no heading of a.md has the anchor #the-b"),
        ('See docs/a.md, "The b".\n', 'docs/a.md has no section "The b"'),
        ("```sh\nmux update --chekc\n```\n", "mux update has no option --chekc"),
        ("```sh\nuv run mux-release frobnicate\n```\n", "mux-release has no command frobnicate"),
        ("```console\n$ FOO=1 mux server watch --sokcet s\nout\n```\n", "no option --sokcet"),
        ("```sh\nmux version && mux server status \\\n    --jsn\n```\n", "no option --jsn"),
        ("Fixed in issue 12.\n", "names 'issue 12'"),
    ],
)
def test_each_kind_of_problem_is_found(tmp_path: Path, readme: str, found: str) -> None:
    root = write_tree(tmp_path, {"README.md": readme, "docs/a.md": "# A\n\n## The a\n"})
    assert any(found in problem for problem in docs.problems(root, ROOT)), docs.problems(root, ROOT)


def test_what_is_right_is_not_a_problem(tmp_path: Path) -> None:
    readme = (
        "# T\n\n## `mux update --check`\n\n## The glibc floor: 2.17\n\n## Twice\n\n## Twice\n\n"
        "[a](#mux-update---check) [b](#the-glibc-floor-217) [c](#twice-1) [d](docs/a.md#the-a)"
        ' [e](https://example.com/#x) and docs/a.md, "The a".\n\n'
        "```sh\nmux update --check --json --max-age 15m  # a comment\n"
        'mux-release packager-marker "$p" \\\n    --manager M --update-command "m up"\n'
        "MUX_X=1 uv run mux -V | cat\n```\n\n"
        "```toml\n# a comment, not a heading\n```\n\n"
        "```\nmux update --no-such-option   # not a shell block\n```\n"
    )
    root = write_tree(tmp_path, {"README.md": readme, "docs/a.md": "# A\n\n## The a\n"})
    assert docs.problems(root, ROOT) == []


def test_a_commit_of_this_repository_is_found_and_other_hex_is_not(tmp_path: Path) -> None:
    head = subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.strip()
    text = f"Measured at {head[:9]}; not a commit: deadbeefcafe, {head[:9][::-1]}x.\n"
    root = write_tree(tmp_path, {"README.md": text, "docs/performance.md": f"at {head}\n"})
    assert docs.problems(root, ROOT) == [f"README.md:1: names the commit {head[:9]}"]


def test_the_readme_is_for_users_first() -> None:
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 320
    first_screen = "\n".join(lines[:60])
    assert '/releases/latest/download/install.sh" | sh\n' in first_screen
    assert "\nmux update\n" in first_screen
    runnable = [line for line in lines if line.startswith(("uv run ", "mux ", "curl "))]
    assert [line for line in runnable if line.startswith("uv run ")][:2] == [
        "uv run mux-release rehearse",
        "uv run pytest",
    ]


def test_performance_md_is_what_the_recorded_results_render_to() -> None:
    result = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "render.py"), "--check"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
