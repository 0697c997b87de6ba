"""Per-target pins: one asset per target, all from one tag, verified together or not at all.

A three-target artifact on a loopback GitHub (tests/support/github.py): every asset is
downloaded, cross-checked and attestation-verified; one tampered asset or one missing target
leaves pins.toml and the notices byte-for-byte unchanged and names the target.
"""

from __future__ import annotations

import hashlib
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest

from release.bill.components import LicenceText
from release.bill.third_party_notices import Distribution, generate_notices
from release.pins.pinfile import PinsError, check_pins, load_pins
from release.publish.formats import format_sha256sums
from release.rehearsal.fake_sigstore import FakeSigstore
from release.upkeep.repin import Checkout, RepinRefused, Upstream, repin
from tests.support.github import FakeGitHub, serve_github
from updater.errors import NetworkError, VerificationError

REPO = "acme/libvt"
WORKFLOW = ".github/workflows/release.yml"
TARGETS = ("x86_64-unknown-linux-gnu", "aarch64-apple-darwin", "x86_64-apple-darwin")

PINS = f"""\
# Per-target pins (test copy). This comment must survive every rewrite.
schema = 1

# libvt: the terminal library, one build per platform.
[artifacts.libvt]
repository = "{REPO}"
asset = "libvt-{{target}}.tar.gz"
targets = {list(TARGETS)!r}
license = "MIT"
license_file = "licenses/libvt.txt"

[artifacts.libvt.attestation]
repository = "{REPO}"
signer_workflow = "{WORKFLOW}"
""".replace("'", '"')

DISTRIBUTIONS = [Distribution("zz-dep", "1.0", "MIT", (LicenceText("zz/LICENSE", "MIT\n"),))]


def asset(target: str) -> str:
    return f"libvt-{target}.tar.gz"


def payload(tag: str, target: str) -> bytes:
    return f"libvt {tag} for {target}\n".encode() * 5_000


@pytest.fixture(scope="module")
def sigstore(tmp_path_factory: pytest.TempPathFactory) -> FakeSigstore:
    return FakeSigstore.create(tmp_path_factory.mktemp("sigstore"))


@pytest.fixture
def github(tmp_path: Path) -> Iterator[FakeGitHub]:
    releases = tmp_path / "releases"
    releases.mkdir()
    with serve_github(FakeGitHub(root=releases, repo=REPO)) as fake:
        yield fake


@pytest.fixture
def checkout(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for variable in ("GITHUB_TOKEN", "MUX_GITHUB_TOKEN", "MUX_SIGSTORE_TRUSTED_ROOT"):
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv("MUX_HTTP_BACKOFF", "0.01")
    root = tmp_path / "checkout"
    (root / "release" / "licenses").mkdir(parents=True)
    (root / "release" / "licenses" / "libvt.txt").write_text("libvt MIT licence\n")
    (root / "release" / "pins.toml").write_text(PINS)
    notices = generate_notices(root / "release" / "pins.toml", distributions=DISTRIBUTIONS)
    (root / "THIRD_PARTY_NOTICES.md").write_text(notices)
    return root


def publish(
    github: FakeGitHub,
    sigstore: FakeSigstore,
    tag: str,
    targets: tuple[str, ...] = TARGETS,
    *,
    built_for: dict[str, str] | None = None,
) -> dict[str, str]:
    """Publish ``tag`` with one attested asset per target; ``built_for`` maps a target to the
    target whose build it really is (a producer's mix-up), left unattested under its name."""
    folder = github.root / tag
    folder.mkdir()
    digests = {}
    for target in targets:
        data = payload(tag, (built_for or {}).get(target, target))
        (folder / asset(target)).write_bytes(data)
        digests[target] = hashlib.sha256(data).hexdigest()
        if target in (built_for or {}):
            continue
        github.attestations[digests[target]] = sigstore.attest(
            {asset(target): digests[target]},
            repository=REPO,
            signer_workflow=WORKFLOW,
            ref=f"refs/tags/{tag}",
        )
    (folder / "SHA256SUMS").write_bytes(
        format_sha256sums({asset(t): d for t, d in digests.items()})
    )
    return digests


def run_repin(checkout: Path, github: FakeGitHub, sigstore: FakeSigstore, tag: str):  # type: ignore[no-untyped-def]
    return repin(
        "libvt",
        tag=tag,
        checkout=Checkout(
            checkout / "release" / "pins.toml", checkout / "THIRD_PARTY_NOTICES.md", DISTRIBUTIONS
        ),
        upstream=Upstream(
            github_url=github.web_url,
            api_url=github.api_url,
            trusted_root=sigstore.trusted_root_path,
        ),
    )


def snapshot(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()
    }


def test_an_entry_never_repinned_names_itself_in_the_check(checkout: Path) -> None:
    assert check_pins(checkout / "release" / "pins.toml") == [
        "libvt: not pinned yet; run mux-release repin libvt --tag <tag>"
    ]


def test_every_target_is_verified_and_pinned_from_one_tag(
    checkout: Path, github: FakeGitHub, sigstore: FakeSigstore
) -> None:
    digests = publish(github, sigstore, "v2.0.0")
    result = run_repin(checkout, github, sigstore, "v2.0.0")
    assert result.written
    assert {item.target: item.sha256 for item in result.files} == digests
    agreed = ("computed", "GitHub's asset digest", "SHA256SUMS")
    assert all(item.digests == agreed for item in result.files)
    assert all(item.attestation.signer_ref == "refs/tags/v2.0.0" for item in result.files)
    with pytest.raises(ValueError, match="one asset per target"):
        result.single  # noqa: B018 - never the first target's asset in disguise

    pins_text = (checkout / "release" / "pins.toml").read_text()
    for line in PINS.splitlines():  # every human-written line (comments too) is kept
        assert line in pins_text.splitlines()
    (pin,) = load_pins(checkout / "release" / "pins.toml")
    assert pin.tag == "v2.0.0" and pin.per_target and pin.targets == tuple(sorted(TARGETS))
    for target in TARGETS:
        item = pin.file_for(target)
        assert item is not None and (item.asset, item.sha256) == (asset(target), digests[target])
        assert item.url == f"{github.web_url}/{REPO}/releases/download/v2.0.0/{asset(target)}"
    assert pin.file_for("aarch64-unknown-linux-musl") is None  # not declared: not shipped there
    notices = checkout / "THIRD_PARTY_NOTICES.md"
    for target in TARGETS:
        marker = f"<!-- pin: libvt target={target} tag=v2.0.0 sha256={digests[target]} -->"
        assert marker in notices.read_text()
    assert check_pins(checkout / "release" / "pins.toml", notices_path=notices) == []
    # Every asset was downloaded once.
    downloads = [
        r.path for r in github.requests_to("api") if r.path.startswith("/_dl/v2.0.0/libvt-")
    ]
    assert sorted(downloads) == sorted(f"/_dl/v2.0.0/{asset(t)}" for t in TARGETS)


def test_one_tampered_asset_writes_nothing_and_names_its_target(
    checkout: Path, github: FakeGitHub, sigstore: FakeSigstore
) -> None:
    publish(github, sigstore, "v2.0.0")
    run_repin(checkout, github, sigstore, "v2.0.0")
    publish(github, sigstore, "v2.1.0")
    # The macOS arm64 asset is replaced after it was attested and listed in SHA256SUMS.
    (github.root / "v2.1.0" / asset("aarch64-apple-darwin")).write_bytes(b"tampered" * 1000)
    before = snapshot(checkout)
    with pytest.raises(VerificationError) as caught:
        run_repin(checkout, github, sigstore, "v2.1.0")
    assert "libvt-aarch64-apple-darwin.tar.gz" in str(caught.value)
    assert snapshot(checkout) == before  # pins.toml and the notices: unchanged, no temp file


def test_a_missing_target_is_named_before_anything_is_downloaded(
    checkout: Path, github: FakeGitHub, sigstore: FakeSigstore
) -> None:
    publish(github, sigstore, "v2.0.0", targets=TARGETS[:2])  # no x86_64-apple-darwin build
    before = snapshot(checkout)
    with pytest.raises(NetworkError) as caught:
        run_repin(checkout, github, sigstore, "v2.0.0")
    assert str(caught.value).startswith(
        f"release v2.0.0 of {REPO} has no asset libvt-x86_64-apple-darwin.tar.gz "
        "(for x86_64-apple-darwin)"
    )
    assert not [r for r in github.requests_to("api") if r.path.startswith("/_dl/")]
    assert snapshot(checkout) == before


def test_a_declared_target_without_a_pin_fails_the_check(checkout: Path) -> None:
    path = checkout / "release" / "pins.toml"
    sha = "ab" * 32
    text = PINS + "".join(
        f'\n[artifacts.libvt.pinned.{t}]\nurl = "https://github.com/{REPO}/releases/download/'
        f'v1.0.0/{asset(t)}"\nsha256 = "{sha}"\nsize = 1\n'
        for t in TARGETS[:2]
    )
    path.write_text(text.replace('license = "MIT"', 'license = "MIT"\ntag = "v1.0.0"'))
    assert check_pins(path) == [
        "libvt: x86_64-apple-darwin is declared but has no pin; run mux-release repin libvt "
        "--tag <tag>"
    ]


def test_another_targets_bytes_under_a_targets_name_are_refused(
    checkout: Path, github: FakeGitHub, sigstore: FakeSigstore
) -> None:
    """A producer mix-up: the aarch64 macOS asset is the x86_64 build republished under the
    aarch64 name, consistently listed in SHA256SUMS; the only attestation of those bytes names
    the x86_64 file. The digests agree and the signature verifies, but the name does not."""
    tag = "v2.0.0"
    publish(github, sigstore, tag, built_for={"aarch64-apple-darwin": "x86_64-apple-darwin"})
    before = snapshot(checkout)
    with pytest.raises(VerificationError) as caught:
        run_repin(checkout, github, sigstore, tag)
    message = str(caught.value)
    assert message.startswith("libvt (aarch64-apple-darwin) libvt-aarch64-apple-darwin.tar.gz: ")
    assert "is attested as libvt-x86_64-apple-darwin.tar.gz" in message
    assert "not as libvt-aarch64-apple-darwin.tar.gz" in message
    assert snapshot(checkout) == before


def test_the_same_bytes_attested_under_both_names_may_serve_both_targets(
    checkout: Path, github: FakeGitHub, sigstore: FakeSigstore
) -> None:
    """A universal2 macOS build published for both targets, attested under both names: the
    producer said so, so it is pinned for both."""
    tag = "v2.0.0"
    folder = github.root / tag
    folder.mkdir()
    universal = payload(tag, "universal2-apple-darwin")
    digests = {}
    for target in TARGETS:
        data = universal if target.endswith("apple-darwin") else payload(tag, target)
        (folder / asset(target)).write_bytes(data)
        digests[target] = hashlib.sha256(data).hexdigest()
    mac = [t for t in TARGETS if t.endswith("apple-darwin")]
    github.attestations[digests[mac[0]]] = sigstore.attest(
        {asset(t): digests[t] for t in mac},
        repository=REPO,
        signer_workflow=WORKFLOW,
        ref=f"refs/tags/{tag}",
    )
    linux = "x86_64-unknown-linux-gnu"
    github.attestations[digests[linux]] = sigstore.attest(
        {asset(linux): digests[linux]},
        repository=REPO,
        signer_workflow=WORKFLOW,
        ref=f"refs/tags/{tag}",
    )
    (folder / "SHA256SUMS").write_bytes(
        format_sha256sums({asset(t): d for t, d in digests.items()})
    )
    result = run_repin(checkout, github, sigstore, tag)
    assert result.written
    assert {item.target: item.attestation.subjects[0].name for item in result.files} == {
        t: asset(t) for t in TARGETS
    }


TARGET_LIST = repr(list(TARGETS)).replace("'", '"')
TEMPLATE_LINES = f'asset = "libvt-{{target}}.tar.gz"\ntargets = {TARGET_LIST}\n'


def test_a_single_asset_entry_becomes_per_target_by_repinning(
    checkout: Path, github: FakeGitHub, sigstore: FakeSigstore
) -> None:
    path = checkout / "release" / "pins.toml"
    single = 'asset = "libvt-x86_64-unknown-linux-gnu.tar.gz"\n'
    path.write_text(path.read_text().replace(TEMPLATE_LINES, single))
    publish(github, sigstore, "v2.0.0")
    assert run_repin(checkout, github, sigstore, "v2.0.0").written
    assert 'sha256 = "' in path.read_text()  # pinned as one asset

    # The release engineer changes the human part only, as pins.toml's header says.
    path.write_text(path.read_text().replace(single, TEMPLATE_LINES))
    problems = check_pins(path)
    assert problems == [
        "libvt: url, sha256, size: a per-target entry pins them in [pinned.<target>]; run "
        "mux-release repin libvt --tag <tag> to rewrite them"
    ]
    digests = publish(github, sigstore, "v2.1.0")
    result = run_repin(checkout, github, sigstore, "v2.1.0")
    assert result.written and result.old_tag == "v2.0.0"
    (pin,) = load_pins(path)
    assert {t: pin.file_for(t).sha256 for t in TARGETS} == digests  # type: ignore[union-attr]
    entry = tomllib.loads(path.read_text())["artifacts"]["libvt"]
    assert not {"url", "sha256", "size"} & set(entry)
    assert sorted(entry["pinned"]) == sorted(TARGETS)
    notices = checkout / "THIRD_PARTY_NOTICES.md"
    assert check_pins(path, notices_path=notices) == []
    # And back: one asset again, its per-target tables dropped.
    path.write_text(path.read_text().replace(TEMPLATE_LINES, single))
    publish(github, sigstore, "v2.2.0")
    assert run_repin(checkout, github, sigstore, "v2.2.0").written
    entry = tomllib.loads(path.read_text())["artifacts"]["libvt"]
    assert "pinned" not in entry and entry["sha256"] == digests_of(github, "v2.2.0")[TARGETS[0]]
    assert check_pins(path, notices_path=notices) == []


def digests_of(github: FakeGitHub, tag: str) -> dict[str, str]:
    return {
        t: hashlib.sha256((github.root / tag / asset(t)).read_bytes()).hexdigest() for t in TARGETS
    }


def test_a_per_target_entry_with_a_tag_but_no_pins_is_repinned(
    checkout: Path, github: FakeGitHub, sigstore: FakeSigstore
) -> None:
    path = checkout / "release" / "pins.toml"
    path.write_text(path.read_text().replace('license = "MIT"', 'license = "MIT"\ntag = "v1.0.0"'))
    assert check_pins(path) == [
        "libvt: [pinned] is missing; run mux-release repin libvt --tag <tag> to rewrite them"
    ]
    publish(github, sigstore, "v2.0.0")
    assert run_repin(checkout, github, sigstore, "v2.0.0").written
    assert check_pins(path, notices_path=checkout / "THIRD_PARTY_NOTICES.md") == []


def pin_then_drop_a_target(checkout: Path, github: FakeGitHub, sigstore: FakeSigstore) -> Path:
    """Pin all three targets at v2.0.0, then declare only the first two (by hand, as allowed)."""
    path = checkout / "release" / "pins.toml"
    publish(github, sigstore, "v2.0.0")
    run_repin(checkout, github, sigstore, "v2.0.0")
    kept = repr(list(TARGETS[:2])).replace("'", '"')
    path.write_text(path.read_text().replace(f"targets = {TARGET_LIST}", f"targets = {kept}"))
    return path


def test_a_removed_target_loses_its_pin_at_the_next_repin(
    checkout: Path, github: FakeGitHub, sigstore: FakeSigstore
) -> None:
    path = pin_then_drop_a_target(checkout, github, sigstore)
    assert check_pins(path) == [
        f"libvt: pinned.{TARGETS[2]}: the entry does not declare this target; run mux-release "
        "repin libvt --tag <tag> to rewrite them"
    ]
    publish(github, sigstore, "v2.1.0", targets=TARGETS[:2])
    assert run_repin(checkout, github, sigstore, "v2.1.0").written
    entry = tomllib.loads(path.read_text())["artifacts"]["libvt"]
    assert sorted(entry["pinned"]) == sorted(TARGETS[:2])
    assert check_pins(path, notices_path=checkout / "THIRD_PARTY_NOTICES.md") == []


def test_repin_still_refuses_a_broken_human_part_and_a_downgrade_after_a_shape_change(
    checkout: Path, github: FakeGitHub, sigstore: FakeSigstore
) -> None:
    path = pin_then_drop_a_target(checkout, github, sigstore)
    publish(github, sigstore, "v1.9.0", targets=TARGETS[:2])
    before = snapshot(checkout)
    with pytest.raises(RepinRefused, match=r"older than the pinned v2\.0\.0"):
        run_repin(checkout, github, sigstore, "v1.9.0")
    path.write_text(path.read_text().replace('license = "MIT"', 'license = "not a licence"'))
    with pytest.raises(PinsError, match="is not a valid SPDX expression"):
        run_repin(checkout, github, sigstore, "v2.0.0")
    path.write_text(path.read_text().replace('license = "not a licence"', 'license = "MIT"'))
    assert snapshot(checkout) == before
