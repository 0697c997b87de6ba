"""Every package a release installs has a wheel for each of the six targets, in uv.lock.

``[tool.uv] required-environments`` (with ``no-build``) makes ``uv lock`` fail when a package
loses its wheels for an OS and architecture, but markers cannot tell glibc from musl nor say
which glibc: this checks the lock's wheel tags for each target as its release job installs it
(gnu at the glibc floor of release/build/glibc.py with python-build-standalone 3.11, musl in
Alpine 3.22 with its Python 3.12, macOS 15 runners with 3.11). Offline: uv reads only the lock.
"""

from __future__ import annotations

import shutil
import subprocess
import tomllib
from pathlib import Path

import pytest
from packaging.markers import Marker
from packaging.requirements import Requirement
from packaging.tags import Tag, compatible_tags, cpython_tags, mac_platforms
from packaging.utils import canonicalize_name, parse_wheel_filename

from release.build.glibc import GLIBC_FLOOR
from updater.config.targets import TARGETS

REPO_ROOT = Path(__file__).resolve().parent.parent
GLIBC_FLOOR_MINOR = int(GLIBC_FLOOR.split(".")[1])


def _linux_platforms(arch: str, libc: str) -> list[str]:
    if libc == "musl":
        return [f"musllinux_1_{minor}_{arch}" for minor in (2, 1, 0)]
    platforms = [f"manylinux_2_{minor}_{arch}" for minor in range(GLIBC_FLOOR_MINOR, 4, -1)]
    return [*platforms, f"manylinux2014_{arch}", f"manylinux2010_{arch}", f"manylinux1_{arch}"]


def target_environment(target: str) -> tuple[dict[str, str], set[Tag]]:
    arch, _, system = target.partition("-")
    if "darwin" in system:
        machine = "arm64" if arch == "aarch64" else arch
        python = (3, 11)
        platforms = list(mac_platforms((15, 0), machine))
        markers = {
            "sys_platform": "darwin",
            "platform_system": "Darwin",
            "platform_machine": machine,
        }
    else:
        libc = system.rsplit("-", 1)[1]
        python = (3, 12) if libc == "musl" else (3, 11)
        platforms = _linux_platforms(arch, libc)
        markers = {"sys_platform": "linux", "platform_system": "Linux", "platform_machine": arch}
    version = f"{python[0]}.{python[1]}"
    markers |= {
        "os_name": "posix",
        "implementation_name": "cpython",
        "platform_python_implementation": "CPython",
        "python_version": version,
        "python_full_version": f"{version}.0",
        "extra": "",
    }
    abis = [f"cp{python[0]}{python[1]}", "abi3", "none"]
    tags = set(cpython_tags(python, abis, platforms)) | set(
        compatible_tags(python, platforms=platforms)
    )
    return markers, tags


@pytest.fixture(scope="module")
def lock() -> dict[tuple[str, str], list[str]]:
    doc = tomllib.loads((REPO_ROOT / "uv.lock").read_text(encoding="utf-8"))
    return {
        (str(canonicalize_name(p["name"])), p.get("version", "")): [
            w["url"].rsplit("/", 1)[1] for w in p.get("wheels", [])
        ]
        for p in doc["package"]
    }


@pytest.fixture(scope="module")
def release_requirements() -> list[Requirement]:
    uv = shutil.which("uv")
    if uv is None:
        pytest.skip("uv is not installed")
    exported = subprocess.run(
        [
            uv,
            "export",
            "--locked",
            "--no-dev",
            "--extra",
            "release",
            "--group",
            "build",
            "--no-hashes",
            "--no-emit-project",
            "--no-header",
            "--no-annotate",
        ],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout
    return [
        Requirement(line) for line in exported.splitlines() if line and not line.startswith("#")
    ]


def has_wheel(files: list[str], tags: set[Tag]) -> bool:
    return any(parse_wheel_filename(name)[3] & tags for name in files)


@pytest.mark.parametrize("target", TARGETS)
def test_every_release_package_has_a_wheel_for_the_target(
    target: str, lock: dict[tuple[str, str], list[str]], release_requirements: list[Requirement]
) -> None:
    markers, tags = target_environment(target)
    installed = 0
    for requirement in release_requirements:
        if requirement.marker is not None and not requirement.marker.evaluate(markers):
            continue
        (spec,) = requirement.specifier
        version = spec.version
        files = lock[(str(canonicalize_name(requirement.name)), version)]
        assert has_wheel(files, tags), f"{requirement.name} {version} has no wheel for {target}"
        installed += 1
    assert installed > 40  # the whole closure, not an empty export


def test_the_check_fails_for_a_package_without_a_wheel(
    lock: dict[tuple[str, str], list[str]],
) -> None:
    # cryptography 50 ships no x86_64 macOS wheel: what the lock's fork to 48.0.1 avoids.
    _, mac_intel = target_environment("x86_64-apple-darwin")
    _, mac_arm = target_environment("aarch64-apple-darwin")
    _, gnu_floor = target_environment("x86_64-unknown-linux-gnu")
    newest = lock[("cryptography", "50.0.2")]
    assert not has_wheel(newest, mac_intel)
    assert has_wheel(newest, mac_arm) and has_wheel(newest, gnu_floor)
    assert has_wheel(lock[("cryptography", "48.0.1")], mac_intel)
    only_2_34 = [n for n in newest if "manylinux_2_34_x86_64" in n and "manylinux2014" not in n]
    assert only_2_34 and not has_wheel(only_2_34, gnu_floor)  # the floor is enforced


def test_pyproject_requires_wheels_for_every_os_and_architecture() -> None:
    doc = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    uv = doc["tool"]["uv"]
    assert uv["no-build"] is True
    environments = {str(Marker(m)) for m in uv["required-environments"]}
    expected = set()
    for target in TARGETS:
        markers, _ = target_environment(target)
        expected.add(
            str(
                Marker(
                    f"sys_platform == '{markers['sys_platform']}' and "
                    f"platform_machine == '{markers['platform_machine']}'"
                )
            )
        )
    assert environments == expected
    assert "build" in doc["dependency-groups"]
