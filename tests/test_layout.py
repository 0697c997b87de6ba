"""updater.install.layout: the install on path strings (spelt and walked as pathlib would),
the versions it keeps and their protocols, the running install, and the package-manager
trees mux leaves alone."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from updater.install.layout import package_manager_for


@pytest.mark.parametrize(
    ("path", "command"),
    [
        ("/opt/homebrew/Cellar/mux/0.1.0/bin/mux", "brew upgrade mux"),
        ("/nix/store/abc-mux-0.1.0/bin/mux", "nix profile upgrade mux"),
        ("/home/u/.local/share/pipx/venvs/mux/bin/mux", "pipx upgrade mux"),
        ("/home/u/.local/share/uv/tools/mux/bin/mux", "uv tool upgrade mux"),
        ("/usr/lib/python3/site-packages/updater/cli.py", "pip install --upgrade mux"),
        ("/home/u/.cargo/bin/mux", "cargo install mux"),
    ],
)
def test_package_manager_trees(path: str, command: str) -> None:
    found = package_manager_for(Path(path))
    assert found is not None and command in found[1]


def test_our_own_layout_is_not_a_package_manager() -> None:
    assert package_manager_for(Path("/home/u/.local/share/mux/versions/0.1.0/mux")) is None


def test_a_versions_protocol_is_read_where_the_contract_pins_its_build_info(tmp_path):
    """``<folder>/<code folder>/updater/_build_info.json``, one level below the top, exactly
    once: a build whose info is anywhere else, or in two places, has no known protocol."""
    from updater.config.buildfolder import build_info_in
    from updater.install.layout import Layout, installed_protocol

    layout = Layout(home=str(tmp_path), bin_dir=str(tmp_path / "bin"))

    def info(version: str, code_folder: str, protocol: object) -> None:
        path = Path(layout.version_dir(version)) / code_folder / "updater" / "_build_info.json"
        path.parent.mkdir(parents=True)
        path.write_text(json.dumps({"protocol_version": protocol}))

    info("1.0.0", "_internal", 3)
    info("1.1.0", "lib", 4)
    info("1.2.0", "_internal", 3)
    info("1.2.0", "lib", 4)  # two candidates: which one is the build's cannot be told
    info("1.3.0", "lib", True)  # not a protocol number
    deep = Path(layout.version_dir("1.4.0")) / "a" / "b" / "updater" / "_build_info.json"
    deep.parent.mkdir(parents=True)
    deep.write_text(json.dumps({"protocol_version": 5}))
    assert build_info_in(str(layout.version_dir("1.0.0"))) == str(
        Path(layout.version_dir("1.0.0")) / "_internal" / "updater" / "_build_info.json"
    )
    assert [installed_protocol(layout, v) for v in ("1.0.0", "1.1.0", "1.2.0", "1.3.0")] == [
        3,
        4,
        None,
        None,
    ]
    assert installed_protocol(layout, "1.4.0") is None
    assert installed_protocol(layout, "9.9.9") is None


_PATH_PARTS = st.sampled_from(["", ".", "..", "a", "versions", "mux", ".hidden", "x.partial-1"])


@given(
    st.lists(_PATH_PARTS, max_size=6),
    st.sampled_from(["", "/", "//", "///"]),
    st.sampled_from(["", "/", "//"]),
)
def test_path_strings_are_spelt_and_walked_as_pathlib_does(
    parts: list[str], head: str, tail: str
) -> None:
    from pathlib import PurePosixPath

    from updater.install import layout as _layout_paths

    path = head + "/".join(parts) + tail
    if not path:
        return  # (Path("") is ".", and no caller passes an empty path)
    assert _layout_paths.pure(path) == str(PurePosixPath(path))
    walked = _layout_paths._parents(_layout_paths.pure(path))
    assert walked == [str(p) for p in PurePosixPath(path).parents]
    assert _layout_paths.absolute(path) == str(Path(path).absolute())


def test_the_layout_reads_an_install_on_path_strings_as_pathlib_would(tmp_path: Path) -> None:
    """The one layout type, on strings: what it says of an install, through a symlinked home,
    a relative link, partial and hidden folders and a link to a folder (each expected value
    is what pathlib's reading gives)."""
    from updater.install.layout import Layout

    real = tmp_path / "real-home"
    versions = real / "versions"
    for name in ("1.0.0", "1.1.0", ".trash-1", "1.2.0.partial-x", "1.3.0"):
        (versions / name).mkdir(parents=True)
    (versions / "1.3.0").rmdir()
    (versions / "1.3.0").symlink_to(versions / "1.1.0")  # a link to a folder counts
    (versions / "notes.txt").write_text("a file, not a version")
    (tmp_path / "home").symlink_to(real)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    layout = Layout(home=str(tmp_path / "home"), bin_dir=str(bin_dir))
    assert layout.versions == str(Path(layout.home) / "versions")
    assert layout.link == str(bin_dir / "mux")
    pathlib_versions = sorted(
        p.name
        for p in (tmp_path / "home" / "versions").iterdir()
        if p.is_dir() and not p.name.startswith(".") and ".partial-" not in p.name
    )
    assert layout.installed_versions() == pathlib_versions == ["1.0.0", "1.1.0", "1.3.0"]
    assert layout.active_version() is None  # no link yet
    (bin_dir / "mux").symlink_to("../home/versions/1.1.0/mux")  # relative, through the link
    assert layout.active_version() == "1.1.0"
    (bin_dir / "mux").unlink()
    (bin_dir / "mux").symlink_to(versions / "1.0.0" / "mux" / "")  # a trailing slash
    assert layout.active_version() == "1.0.0"
    (bin_dir / "mux").unlink()
    (bin_dir / "mux").symlink_to(versions / "1.0.0" / "other")
    assert layout.active_version() is None  # not mux
    (bin_dir / "mux").unlink()
    (bin_dir / "mux").symlink_to(tmp_path / "elsewhere" / "1.0.0" / "mux")
    assert layout.active_version() is None  # not this install's
    for executable, expected in [
        (versions / "1.0.0" / "_internal" / "mux", "1.0.0"),
        (versions / "1.2.0.partial-x" / "mux", None),
        (versions / ".trash-1" / "mux", None),
        (versions, None),
        (tmp_path / "home" / "versions" / "1.0.0" / "mux", None),  # not resolved: not ours
        (Path("versions/1.0.0/mux"), None),
    ]:
        assert layout.version_of(executable) == expected
        assert layout.version_of(str(executable)) == expected


def test_the_running_install_and_version_are_found_from_a_module_file(tmp_path: Path) -> None:
    from updater.install import layout

    home = tmp_path / "home"
    module = home / "versions" / "2.0.0" / "_internal" / "updater" / "layout.pyc"
    module.parent.mkdir(parents=True)
    module.write_bytes(b"")
    assert layout.running_install_home(str(module)) is None  # no install.json: not an install
    (home / "install.json").write_text("{}")
    assert layout.running_install_home(str(module)) == str(home)
    here = layout.Layout(home=str(home), bin_dir=str(tmp_path / "bin"))
    assert layout.running_version(here, str(module)) == "2.0.0"
    elsewhere = layout.Layout(home=str(tmp_path / "other"), bin_dir=str(tmp_path / "bin"))
    assert layout.running_version(elsewhere, str(module)) is None


def test_resolve_layout_spells_paths_as_pathlib_would(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from updater.install.layout import resolve_layout

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOME", str(tmp_path / "user"))
    (tmp_path / "h").mkdir()
    (tmp_path / "h" / "install.json").write_text(
        json.dumps({"versions": {}, "bin_dir": "/opt/b//in/"})
    )
    (tmp_path / "user" / "y").mkdir(parents=True)
    (tmp_path / "user" / "y" / "install.json").write_text(
        json.dumps({"versions": {}, "bin_dir": "/opt/y"})
    )
    cases: list[tuple[Path, Path | None, Path, Path]] = [
        (Path("h"), None, tmp_path / "h", Path("/opt/b/in")),  # the bin dir on record
        (Path("h/./"), Path("b"), tmp_path / "h", tmp_path / "b"),  # configured wins
        (Path("~/x"), None, tmp_path / "user" / "x", tmp_path / "user" / ".local" / "bin"),
        (Path("~/y"), None, tmp_path / "user" / "y", Path("/opt/y")),  # its record, ~ expanded
    ]
    for home, bin_dir, expected_home, expected_bin in cases:
        layout = resolve_layout(home, bin_dir, development=True)
        assert (layout.home, layout.bin_dir) == (str(expected_home), str(expected_bin))
        spelt = resolve_layout(
            str(home), None if bin_dir is None else str(bin_dir), development=True
        )
        assert (spelt.home, spelt.bin_dir) == (str(expected_home), str(expected_bin))
