"""release/bill/third_party_notices.py: deterministic THIRD_PARTY_NOTICES.md from distributions and pins."""

from __future__ import annotations

import hashlib
import platform
import random
import subprocess
import sys
import sysconfig
from importlib import metadata
from pathlib import Path

import pytest

from release.bill.components import LicenceText, normalise_text
from release.bill.third_party_notices import (
    Distribution,
    NoticesError,
    PinnedArtifact,
    RuntimeComponent,
    check_notices,
    cpython_component,
    generate_notices,
    load_overrides,
    pyinstaller_bootloader_component,
    render_notices,
    shipped_distributions,
    standalone_components,
)
from release.pins.pinfile import (
    DEFAULT_NOTICES_PATH,
    DEFAULT_PINS_PATH,
    Pin,
    PinIdentity,
    PinnedAsset,
    check_pins,
)

REPO_ROOT = Path(__file__).resolve().parent.parent
MIT = "MIT License\n\nCopyright (c) 2020 Someone\n\nPermission is hereby granted...\n"
APACHE = "Apache License\nVersion 2.0, January 2004\n"


def run_release(*args: str, cwd: Path = REPO_ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", "from release.cli import main; main()", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


# --- fake installed distributions ---------------------------------------------------------


def make_dist(
    site: Path,
    name: str,
    version: str = "1.0",
    *,
    requires: tuple[str, ...] = (),
    headers: tuple[str, ...] = ("License-Expression: MIT",),
    files: dict[str, str] | None = None,
) -> None:
    """An installed distribution: ``files`` maps paths (relative to site) to their text."""
    dist_info = f"{name.replace('-', '_')}-{version}.dist-info"
    lines = ["Metadata-Version: 2.4", f"Name: {name}", f"Version: {version}", *headers]
    lines += [f"Requires-Dist: {requirement}" for requirement in requires]
    all_files = {f"{dist_info}/METADATA": "\n".join(lines) + "\n\n", **(files or {})}
    for relative, text in all_files.items():
        path = site / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    record = "".join(f"{relative},,\n" for relative in [*all_files, f"{dist_info}/RECORD"])
    (site / dist_info / "RECORD").write_text(record)


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "site"
    folder.mkdir()
    monkeypatch.syspath_prepend(str(folder))
    return folder


def pin(name: str = "libfoo", *, tag: str = "v1.2.3", sha: str = "ab" * 32) -> Pin:
    return Pin(
        name=name,
        repository=f"acme/{name}",
        license="MIT",
        license_file=f"licenses/{name}.txt",
        identity=PinIdentity(f"acme/{name}", ".github/workflows/release.yml"),
        files=(
            PinnedAsset(
                target=None,
                asset=f"{name}.tar.gz",
                url=f"https://github.com/acme/{name}/releases/download/{tag}/{name}.tar.gz",
                sha256=sha,
                size=10,
            ),
        ),
        tag=tag,
    )


# --- the collection of installed distributions --------------------------------------------


def test_the_runtime_closure_follows_requirements_markers_and_requested_extras(site: Path) -> None:
    make_dist(
        site,
        "zz-root",
        requires=(
            "zz-a>=1",
            "zz-b[fast]",
            'zz-never; sys_platform == "no-such-platform"',
            'zz-dev; extra == "dev"',
        ),
        files={"zz_root-1.0.dist-info/licenses/LICENSE": MIT},
    )
    make_dist(site, "zz-a", files={"zz_a-1.0.dist-info/licenses/LICENSE": MIT})
    make_dist(
        site,
        "zz-b",
        "2.0",
        requires=('zz-c; extra == "fast"', 'zz-d; extra == "slow"'),
        files={"zz_b-2.0.dist-info/licenses/LICENSE": APACHE},
    )
    make_dist(site, "zz-c", files={"zz_c-1.0.dist-info/licenses/LICENSE": MIT})
    dists = shipped_distributions("zz-root")
    # The root itself is first-party; zz-never (marker), zz-dev (root's extra) and zz-d (an
    # extra nobody asked for) are not shipped, and are not even installed here.
    assert [(d.name, d.version) for d in dists] == [
        ("zz-a", "1.0"),
        ("zz-b", "2.0"),
        ("zz-c", "1.0"),
    ]


def test_licence_files_are_found_where_each_metadata_version_puts_them(site: Path) -> None:
    make_dist(site, "zz-root", requires=("zz-new", "zz-old", "zz-vendoring"))
    make_dist(
        site,
        "zz-new",
        headers=(
            "License-Expression: Apache-2.0 OR MIT",
            "License-File: LICENSE",
            "License-File: NOTICE",
        ),
        files={
            "zz_new-1.0.dist-info/licenses/LICENSE": APACHE,
            "zz_new-1.0.dist-info/licenses/NOTICE": "zz-new notice\n",
        },
    )
    make_dist(
        site,
        "zz-old",
        headers=("License: BSD", "Classifier: License :: OSI Approved :: BSD License"),
        files={"zz_old-1.0.dist-info/LICENSE.txt": "BSD text\n"},
    )
    make_dist(
        site,
        "zz-vendoring",
        headers=("Classifier: License :: OSI Approved :: MIT License",),
        files={
            "zz_vendoring-1.0.dist-info/licenses/LICENSE": MIT,
            "zz_vendoring/_vendor/thing/LICENSE": "vendored thing's licence\n",
            "zz_vendoring/licenses.py": "# not a licence text\n",
        },
    )
    found = {d.name: d for d in shipped_distributions("zz-root")}
    assert [t.label for t in found["zz-new"].licence_files] == [
        "zz_new-1.0.dist-info/licenses/LICENSE",
        "zz_new-1.0.dist-info/licenses/NOTICE",
    ]
    assert found["zz-new"].licence == "Apache-2.0 OR MIT"
    assert [t.label for t in found["zz-old"].licence_files] == ["zz_old-1.0.dist-info/LICENSE.txt"]
    assert found["zz-old"].licence == "BSD"
    assert [t.label for t in found["zz-vendoring"].licence_files] == [
        "zz_vendoring-1.0.dist-info/licenses/LICENSE",
        "zz_vendoring/_vendor/thing/LICENSE",
    ]
    assert found["zz-vendoring"].licence == "MIT License (classifier)"


def test_a_distribution_without_a_licence_file_is_an_error_naming_it(site: Path) -> None:
    make_dist(site, "zz-root", requires=("zz-fine", "zz-bare"))
    make_dist(site, "zz-fine", files={"zz_fine-1.0.dist-info/licenses/LICENSE": MIT})
    make_dist(site, "zz-bare", "3.1", headers=("License: MIT",))
    with pytest.raises(NoticesError) as caught:
        shipped_distributions("zz-root")
    assert caught.value.message == "zz-bare 3.1 ships no licence file"
    assert "overrides.toml" in str(caught.value.hint)


def test_a_missing_requirement_is_an_error_naming_it(site: Path) -> None:
    make_dist(site, "zz-root", requires=("zz-not-installed>=1",))
    with pytest.raises(
        NoticesError, match=r"zz-not-installed \(required by zz-root\) is not installed"
    ):
        shipped_distributions("zz-root")


def write_override(folder: Path, name: str, text: str, *, sha: str | None = None) -> Path:
    (folder / f"{name}.txt").write_text(text)
    digest = sha or hashlib.sha256(text.encode()).hexdigest()
    path = folder / "overrides.toml"
    path.write_text(
        f'[distributions.{name}]\nfile = "{name}.txt"\nsha256 = "{digest}"\n'
        'reason = "the wheel ships no licence file; text from its repository at a commit"\n'
    )
    return path


def test_a_reviewed_override_supplies_a_missing_licence(site: Path, tmp_path: Path) -> None:
    make_dist(site, "zz-root", requires=("zz-bare",))
    make_dist(site, "zz-bare", headers=("License: MIT",))
    overrides = load_overrides(write_override(tmp_path, "zz-bare", MIT))
    (dist,) = shipped_distributions("zz-root", overrides=overrides)
    assert dist.licence_files == (
        LicenceText("release/licenses/zz-bare.txt", normalise_text(MIT.encode())),
    )


def test_an_override_whose_text_changed_since_review_fails(site: Path, tmp_path: Path) -> None:
    make_dist(site, "zz-root", requires=("zz-bare",))
    make_dist(site, "zz-bare")
    overrides = load_overrides(write_override(tmp_path, "zz-bare", MIT, sha="00" * 32))
    with pytest.raises(NoticesError, match="reviewed licence text for zz-bare changed"):
        shipped_distributions("zz-root", overrides=overrides)


def test_an_override_no_longer_needed_fails(site: Path, tmp_path: Path) -> None:
    make_dist(site, "zz-root", requires=("zz-fine",))
    make_dist(site, "zz-fine", files={"zz_fine-1.0.dist-info/licenses/LICENSE": MIT})
    overrides = load_overrides(write_override(tmp_path, "zz-fine", MIT))
    with pytest.raises(NoticesError, match=r"zz-fine 1.0 now ships its own licence file"):
        shipped_distributions("zz-root", overrides=overrides)
    stale = load_overrides(write_override(tmp_path, "zz-gone", MIT))
    with pytest.raises(NoticesError, match=r"overrides.toml names zz-gone, which no release ships"):
        shipped_distributions("zz-root", overrides=stale)


# --- rendering ------------------------------------------------------------------------------


def sample_inputs() -> tuple[list[Distribution], list[PinnedArtifact]]:
    mit = LicenceText("a-1.0.dist-info/licenses/LICENSE", normalise_text(MIT.encode()))
    dists = [
        Distribution("beta", "2.0", "MIT", (LicenceText("beta-2.0.dist-info/LICENSE", mit.text),)),
        Distribution(
            "alpha",
            "1.0",
            "Apache-2.0 OR MIT",
            (
                LicenceText("alpha-1.0.dist-info/licenses/LICENSE.MIT", mit.text),
                LicenceText("alpha-1.0.dist-info/licenses/LICENSE.APACHE", APACHE),
            ),
        ),
        Distribution(
            "Zulu", "0.1", "BSD-3-Clause", (LicenceText("z/LICENSE", "has ``` fences\n"),)
        ),
        Distribution("gamma", "1.0", "MIT", (mit,)),
    ]
    pins = [
        PinnedArtifact(
            pin("libzed", sha="cd" * 32), LicenceText("release/licenses/libzed.txt", APACHE)
        ),
        PinnedArtifact(pin("libfoo"), LicenceText("release/licenses/libfoo.txt", mit.text)),
    ]
    return dists, pins


def sample_components() -> list[RuntimeComponent]:
    return [
        RuntimeComponent(
            "PyInstaller bootloader",
            "6.0",
            "GPL-2.0-or-later WITH Bootloader-exception",
            "the executable",
            LicenceText("pyinstaller-6.0.dist-info/licenses/COPYING.txt", "GPL and exception\n"),
        ),
        RuntimeComponent(
            "CPython",
            "3.11",
            "PSF-2.0",
            "the interpreter",
            LicenceText("python3.11/LICENSE.txt", normalise_text(MIT.encode())),
        ),
    ]


def test_notices_from_shuffled_inputs_are_identical() -> None:
    dists, pins = sample_inputs()
    components = sample_components()
    expected = render_notices(dists, pins, components)
    shuffler = random.Random(1234)
    for _ in range(20):
        shuffled_dists = [
            Distribution(
                d.name,
                d.version,
                d.licence,
                tuple(shuffler.sample(d.licence_files, len(d.licence_files))),
            )
            for d in shuffler.sample(dists, len(dists))
        ]
        assert (
            render_notices(
                shuffled_dists,
                shuffler.sample(pins, len(pins)),
                shuffler.sample(components, len(components)),
            )
            == expected
        )


def test_each_licence_text_is_printed_once_and_referenced_by_every_user() -> None:
    dists, pins = sample_inputs()
    text = render_notices(dists, pins)
    mit_id = hashlib.sha256(normalise_text(MIT.encode()).encode()).hexdigest()[:12]
    assert text.count("Permission is hereby granted") == 1
    assert text.count(f"](#licence-{mit_id})") == 4  # alpha, beta, gamma and libfoo
    assert "Used by: alpha 1.0, beta 2.0, gamma 1.0, libfoo v1.2.3." in text
    assert text.count(f"### Licence {mit_id}") == 1


def test_entries_are_sorted_by_code_point_and_the_output_is_plain_lf() -> None:
    dists, pins = sample_inputs()
    text = render_notices(dists, pins)
    headings = [
        line for line in text.splitlines() if line.startswith("### ") and "Licence " not in line
    ]
    # Code point order: "Zulu" (upper case) sorts before the lower-case names.
    assert headings == [
        "### libfoo v1.2.3",
        "### libzed v1.2.3",
        "### Zulu 0.1",
        "### alpha 1.0",
        "### beta 2.0",
        "### gamma 1.0",
    ]
    assert "\r" not in text and text.endswith("\n") and not text.endswith("\n\n")
    assert "<!-- pin: libfoo tag=v1.2.3 sha256=" + "ab" * 32 + " -->" in text
    # A text holding a code fence is printed inside a longer one.
    assert "````text\nhas ``` fences\n````" in text


def test_licence_texts_are_normalised_before_deduplication() -> None:
    assert normalise_text(b"\xef\xbb\xbfMIT  \r\nline two\r\n\r\n") == "MIT\nline two\n"
    assert normalise_text(b"caf\xe9\n") == "caf\u00e9\n"  # Latin-1, not a crash
    crlf = LicenceText("x", normalise_text(MIT.replace("\n", "\r\n").encode()))
    assert crlf.text_id == LicenceText("y", normalise_text(MIT.encode())).text_id


def test_generated_notices_are_reproducible_from_the_installed_distributions() -> None:
    first = shipped_distributions()
    assert shipped_distributions() == first
    names = [d.name for d in first]
    assert names == sorted(names)
    assert "mux" not in names and {"httpx", "sigstore"} <= set(names)
    # mux's extras are not followed: the release tooling's tomlkit (mux[release]) never ships.
    assert "tomlkit" not in names


# --- the committed file and the CLI ---------------------------------------------------------


def test_the_committed_notices_are_current() -> None:
    # What CI's `mux-release notices --check` enforces: regenerate after changing dependencies.
    assert check_notices(DEFAULT_NOTICES_PATH, generate_notices(DEFAULT_PINS_PATH)) is None
    assert check_pins(DEFAULT_PINS_PATH, notices_path=DEFAULT_NOTICES_PATH) == []


def test_notices_check_exits_non_zero_with_a_diff_when_stale(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from release.cli import app

    pins = tmp_path / "release" / "pins.toml"
    pins.parent.mkdir()
    pins.write_text("schema = 1\n")
    output = tmp_path / "THIRD_PARTY_NOTICES.md"
    options = ["--pins", str(pins), "--out", str(output)]
    runner = CliRunner()
    written = runner.invoke(app, ["notices", *options])
    assert written.exit_code == 0, written.output
    assert runner.invoke(app, ["notices", "--check", *options]).exit_code == 0

    current = output.read_text()
    output.write_text(current.replace("### httpx ", "### httpx-renamed ", 1))
    stale = run_release("notices", "--check", *options)  # a real process, as CI runs it
    assert stale.returncode == 1
    assert "-### httpx-renamed " in stale.stdout and "+### httpx " in stale.stdout
    assert stale.stdout.startswith("--- THIRD_PARTY_NOTICES.md (committed)")
    assert stale.stderr.strip().endswith("is stale (run mux-release notices)")
    assert "### httpx-renamed" in output.read_text()  # --check never writes

    output.unlink()
    assert runner.invoke(app, ["notices", "--check", *options]).exit_code == 1
    assert not output.exists()


def test_notices_refuse_a_pin_whose_licence_text_is_missing(tmp_path: Path) -> None:
    pins = tmp_path / "release" / "pins.toml"
    pins.parent.mkdir()
    pins.write_text("schema = 1\n")
    dists, _ = sample_inputs()
    with pytest.raises(NoticesError, match=r"libfoo: its licence text .*libfoo.txt cannot be read"):
        generate_notices(pins, pins=[pin("libfoo")], distributions=dists)
    (pins.parent / "licenses").mkdir()
    (pins.parent / "licenses" / "libfoo.txt").write_text(MIT)
    text = generate_notices(pins, pins=[pin("libfoo")], distributions=dists)
    assert "(`release/licenses/libfoo.txt`)" in text


# --- the standalone build's runtime: CPython and PyInstaller's bootloader -------------------


def test_the_runtime_components_are_listed_once_with_their_texts() -> None:
    dists, pins = sample_inputs()
    text = render_notices(dists, pins, sample_components())
    headings = [line for line in text.splitlines() if line.startswith("### ")]
    assert headings.index("### CPython 3.11") < headings.index("### PyInstaller bootloader 6.0")
    assert headings.index("### libzed v1.2.3") < headings.index("### CPython 3.11")
    assert headings.index("### PyInstaller bootloader 6.0") < headings.index("### Zulu 0.1")
    assert "- Licence: GPL-2.0-or-later WITH Bootloader-exception" in text
    # CPython's text is the MIT sample here: printed once, used by it and the others.
    assert text.count("Permission is hereby granted") == 1
    assert "Used by: CPython 3.11, alpha 1.0, beta 2.0, gamma 1.0, libfoo v1.2.3." in text
    assert text.count("GPL and exception") == 1


def test_the_standalone_runtime_comes_from_this_interpreter_and_pyinstaller() -> None:
    cpython, bootloader = standalone_components()
    licence_file = Path(sysconfig.get_path("stdlib")) / "LICENSE.txt"
    assert cpython.name == "CPython"
    assert cpython.version == ".".join(platform.python_version_tuple()[:2])
    assert cpython.licence == "PSF-2.0"
    assert cpython.licence_text.text == normalise_text(licence_file.read_bytes())
    assert "PYTHON SOFTWARE FOUNDATION LICENSE VERSION 2" in cpython.licence_text.text

    pyinstaller = metadata.distribution("pyinstaller")
    copying = next(f for f in pyinstaller.files or [] if f.name == "COPYING.txt")
    assert bootloader.name == "PyInstaller bootloader"
    assert bootloader.version == pyinstaller.version
    assert bootloader.licence == "GPL-2.0-or-later WITH Bootloader-exception"
    assert bootloader.licence_text.label == copying.as_posix()
    assert bootloader.licence_text.text == normalise_text(Path(str(copying.locate())).read_bytes())
    assert "Bootloader Exception" in bootloader.licence_text.text


def test_the_committed_notices_cover_cpython_and_the_bootloader() -> None:
    committed = DEFAULT_NOTICES_PATH.read_text(encoding="utf-8")
    for component in standalone_components():
        assert f"### {component.name} {component.version}\n" in committed
        assert f"- Licence: {component.licence}\n" in committed
        assert f"### Licence {component.licence_text.text_id}\n" in committed
    assert generate_notices(DEFAULT_PINS_PATH, components=[]) != committed


def test_a_missing_cpython_licence_text_is_an_error_naming_it(tmp_path: Path) -> None:
    with pytest.raises(NoticesError) as caught:
        cpython_component(tmp_path)
    assert caught.value.message.startswith(
        f"CPython's licence text {tmp_path / 'LICENSE.txt'} cannot be read"
    )
    (tmp_path / "LICENSE.txt").write_text("\n \n")
    with pytest.raises(NoticesError, match=r"LICENSE\.txt is empty"):
        cpython_component(tmp_path)


def test_pyinstaller_missing_or_without_its_licence_is_an_error_naming_it(site: Path) -> None:
    with pytest.raises(NoticesError) as caught:
        pyinstaller_bootloader_component("zz-no-pyinstaller")
    assert caught.value.message.startswith("PyInstaller (zz-no-pyinstaller) is not installed")
    assert "uv sync" in str(caught.value.hint)

    make_dist(
        site,
        "zz-pyinstaller",
        "6.1",
        files={"zz_pyinstaller-6.1.dist-info/licenses/LICENSE": MIT},
    )
    with pytest.raises(NoticesError, match=r"zz-pyinstaller 6.1 carries no COPYING.txt"):
        pyinstaller_bootloader_component("zz-pyinstaller")
    make_dist(
        site,
        "zz-pyinstaller-ok",
        "6.2",
        headers=("License-File: COPYING.txt",),
        files={"zz_pyinstaller_ok-6.2.dist-info/licenses/COPYING.txt": "GPL text\r\n"},
    )
    found = pyinstaller_bootloader_component("zz-pyinstaller-ok")
    assert (found.version, found.licence_text.text) == ("6.2", "GPL text\n")
