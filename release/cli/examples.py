"""Two or three examples for each ``mux-release`` command's help, by the command's words.

One table, so that tests/test_release_cli.py parses every example against the real command
tree (an option renamed here and not there fails it). Each example is what a release engineer
types, with what it does beside it; the layout is mux's own (:mod:`updater.cli.helptext`).
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence

_KEY = "--private-key-file minisign.key"
_TUF = "--tuf-release-private-key file2:release.pem --tuf-online-private-key file2:online.pem"

EXAMPLES: Mapping[str, Sequence[tuple[str, str]]] = {
    "build": [
        ("mux-release build --public-key RWQ...", "a standalone build for this machine in dist/"),
        (
            "mux-release build --standin --out /tmp/b --public-key RWQ...",
            "a fast stand-in build (tests, rehearsal)",
        ),
    ],
    "package": [
        (
            "mux-release package dist/mux-* --out site/v1.2.0",
            "archives, manifest.json and SHA256SUMS of a release",
        ),
        (
            "mux-release package dist/mux-* --out site/v1.2.0 --notes NOTES.md",
            "the same, with signed release notes",
        ),
    ],
    "delta": [
        (
            "mux-release delta site/v1.2.0 --previous site/v1.1.0",
            "file lists, and deltas from 1.1.0",
        ),
        (
            "mux-release delta site/v1.2.0 --previous site/v1.1.0 --previous site/v1.0.0",
            "deltas from two earlier releases",
        ),
    ],
    "packager-marker": [
        (
            "mux-release packager-marker mux-x86_64-linux --manager Nix "
            "--update-command 'nix profile upgrade mux'",
            "mux update then names the package manager's command",
        ),
        (
            "mux-release packager-marker build --manager Homebrew "
            "--update-command 'brew upgrade mux' --announce-delay 24h",
            "and --check waits a day before announcing a release",
        ),
    ],
    "fetch-artifacts": [
        (
            "mux-release fetch-artifacts --target x86_64-linux --out artifacts",
            "the pinned artifacts an x86_64 Linux build ships",
        ),
        (
            "mux-release fetch-artifacts --target aarch64-macos --out a --pins pins.toml",
            "from another pins.toml",
        ),
    ],
    "glibc": [
        ("mux-release glibc dist/mux-x86_64-linux", "the newest glibc the build needs"),
        ("mux-release glibc dist/mux-x86_64-linux --max 2.28", "fail above glibc 2.28"),
    ],
    "compare-builds": [
        ("mux-release compare-builds one/mux-x86_64-linux two/mux-x86_64-linux", "identical?"),
        (
            "mux-release compare-builds a b --environments a.json b.json",
            "builds from two machines: a difference is reported, not failed",
        ),
    ],
    "sign": [
        (f"mux-release sign site/v1.2.0 {_KEY}", "SHA256SUMS.minisig, the password from env"),
        (
            "mux-release sign site/v1.2.0 --private-key-env MUX_MINISIGN_SECRET_KEY",
            "the key's text from a variable (CI)",
        ),
    ],
    "feed": [
        (f"mux-release feed site {_KEY}", "write and sign releases.json (seq + 1)"),
        (f"mux-release feed site {_KEY} --refresh", "re-sign it before it expires"),
        (f"mux-release feed site {_KEY} {_TUF}", "and list new releases in its TUF repository"),
    ],
    "keygen": [
        ("mux-release keygen --out keys", "a key pair, the password from MINISIGN_PASSWORD"),
        ("mux-release keygen --out keys --no-password", "an unencrypted one (tests)"),
    ],
    "install-sh": [
        (
            "mux-release install-sh --out site/install.sh --public-key RWQ... --repo acme/mux",
            "the install.sh a release publishes",
        ),
        (
            "mux-release install-sh --out i.sh --public-key RWQ... --public-key RWR...",
            "trusting the current and the next key (a rotation)",
        ),
    ],
    "publish-flags": [
        (
            "mux-release publish-flags --tag 1.2.0 --published releases.json",
            "--latest=true or false for gh release",
        ),
        (
            "gh release list --json tagName | mux-release publish-flags --tag 1.2.0 --published -",
            "from gh directly",
        ),
    ],
    "verify": [
        (
            "mux-release verify site/v1.2.0 --public-key RWQ... --repo acme/mux",
            "a release folder, layer by layer",
        ),
        ("mux-release verify 1.2.0 --repo acme/mux", "the published release on GitHub"),
    ],
    "rollout": [
        (
            f"mux-release rollout site --tag 1.2.0 --stages 5,25@1d,100@3d {_KEY}",
            "5 % now, 25 % tomorrow, everyone in three days",
        ),
        (f"mux-release rollout site --tag 1.2.0 --full {_KEY}", "offer it to everyone now"),
        (
            f"mux-release rollout site --tag 1.2.0 --interval 1d {_KEY} --dry-run",
            "print what would be signed; sign nothing",
        ),
    ],
    "halt": [
        (f"mux-release halt site --tag 1.2.0 {_KEY}", "offer 1.2.0 to nobody new"),
        (f"mux-release halt site --tag 1.2.0 {_KEY} --dry-run", "print it; sign nothing"),
    ],
    "resume": [
        (f"mux-release resume site --tag 1.2.0 {_KEY}", "the halted rollout goes on"),
        (f"mux-release resume site --tag 1.2.0 {_KEY} --dry-run", "print it; sign nothing"),
    ],
    "withdraw": [
        (
            f"mux-release withdraw site --tag 1.2.0 --reason 'corrupts sessions' {_KEY}",
            "never installed again; machines on it move back",
        ),
        (
            f"mux-release withdraw site --tag 1.2.0 --reason bad --replacement 1.2.1 {_KEY}",
            "machines on it move to 1.2.1",
        ),
    ],
    "critical": [
        (f"mux-release critical site --tag 1.2.1 {_KEY}", "offered at once, skipping stages"),
        (
            f"mux-release critical site --tag 1.2.1 --minimum-version 1.2.1 {_KEY}",
            "every older install needs it",
        ),
    ],
    "repin": [
        ("mux-release repin libfoo --latest", "pin libfoo's newest release, verified"),
        ("mux-release repin libfoo --tag v3.5.0 --dry-run", "verify and print; write nothing"),
    ],
    "pins": [
        ("mux-release pins", "list the pinned artifacts"),
        ("mux-release pins --check", "check every pin and the notices (CI)"),
    ],
    "notices": [
        ("mux-release notices", "write THIRD_PARTY_NOTICES.md"),
        ("mux-release notices --check", "fail with a diff when it is stale"),
        ("mux-release notices --check-build dist/mux-x86_64-linux", "check a build's notices"),
    ],
    "protocol": [
        ("mux-release protocol", "the protocol version; fails on an unbumped change"),
        ("mux-release protocol --record", "record the fingerprint after a bump"),
    ],
    "rehearse": [
        ("mux-release rehearse --standin", "the whole release with stand-in builds (fast)"),
        ("mux-release rehearse --build dist/mux-x86_64-linux --keep", "with a real build"),
    ],
    "tuf-client": [
        (
            "mux-release tuf-client init root.json --metadata-dir m",
            "trust a root (the suite's CLIENT-CLI.md)",
        ),
        (
            "mux-release tuf-client refresh --metadata-dir m --metadata-url http://x/metadata",
            "refresh the trusted metadata",
        ),
    ],
    "tuf keygen": [
        ("mux-release tuf keygen root-1 root-2 --out keys", "two root keys"),
        ("mux-release tuf keygen release online --out keys", "the workflow's keys"),
    ],
    "tuf init": [
        (
            "mux-release tuf init site --root-public-key r1.pub.json --targets-public-key "
            "t1.pub.json --online-public-key online.pub.json --release-public-key "
            "release.pub.json --private-key file2:r1.pem",
            "root v1, targets v1, snapshot and timestamp",
        ),
        (
            "mux-release tuf init site --root-public-key r1.pub.json --targets-public-key "
            "t1.pub.json --online-public-key o.pub.json --release-public-key "
            "r.pub.json --root-threshold 1 --targets-threshold 1",
            "one key each (a rehearsal)",
        ),
    ],
    "tuf add-release": [
        (
            "mux-release tuf add-release site site/v1.2.0 --release-private-key "
            "file2:release.pem --online-private-key file2:online.pem",
            "list 1.2.0's files as targets",
        ),
        (
            "mux-release tuf add-release site site/v1.2.0 --release-private-key env:RELEASE "
            "--online-private-key env:ONLINE",
            "the keys from variables (CI)",
        ),
    ],
    "tuf timestamp": [
        (
            "mux-release tuf timestamp site --online-private-key file2:online.pem",
            "a new timestamp (the feed workflow's schedule)",
        ),
        (
            "mux-release tuf timestamp site --online-private-key env:ONLINE --expires-in 12h",
            "one that holds 12 hours",
        ),
    ],
    "tuf rotate": [
        (
            "mux-release tuf rotate site --role root --add-public-key r4.pub.json "
            "--private-key file2:r1.pem",
            "add a root key",
        ),
        (
            "mux-release tuf rotate site --role root --remove-key-id 0123abcd "
            "--private-key file2:r1.pem",
            "revoke one",
        ),
    ],
    "tuf sign": [
        ("mux-release tuf sign site root --private-key file2:r2.pem", "a second root signature"),
        (
            "mux-release tuf sign site targets --private-key file2:t2.pem",
            "a second targets signature",
        ),
    ],
    "completions": [
        ('eval "$(mux-release completions bash)"', "complete mux-release in this bash"),
        ("mux-release completions zsh > ~/.zfunc/_mux-release", "install it for zsh"),
    ],
}


def shown(command: str, width: int = 72) -> str:
    """``command`` as help shows it: lines of at most ``width`` (the help indents them by
    four), continued with a backslash before an option, so that it fits 80 columns."""
    if len(command) <= width:
        return command
    groups: list[str] = []  # an option with its value stays on one line
    words = shlex.shlex(command, posix=False)  # posix=False: quotes stay as written
    words.whitespace_split = True
    for word in words:
        if groups and not word.startswith("-") and groups[-1].startswith("--"):
            groups[-1] += " " + word
        else:
            groups.append(word)
    lines: list[str] = []
    line = ""
    for group in groups:
        if line and len(f"{line} {group}") > width - 2:
            lines.append(line + " \\")
            line = "    " + group
        else:
            line = f"{line} {group}" if line else group
    return "\n".join([*lines, line])
