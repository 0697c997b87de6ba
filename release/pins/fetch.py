"""``mux-release fetch-artifacts --target T --out DIR``: download what a target's build ships.

For each pin of ``release/pins.toml`` that a build for ``T`` ships (its single asset, or its
asset for ``T``), download the pinned URL into ``DIR/<asset>``, hashing while it streams, and
keep it only when its size and sha256 are the pin's (else nothing is left behind and the exit
is 3). Nothing else is downloaded: the release workflow runs this in each build job, so a
build fetches only what it ships, then ``mux-release build --artifacts DIR`` checks it again.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from release.pins.pinfile import Pin, PinnedAsset, check_file_against_pin, load_pins, shipped_pins
from updater.cli.render import make_progress
from updater.config import settings as mux_settings
from updater.config.targets import TARGETS
from updater.errors import UsageError
from updater.files import sha256_file
from updater.net.client import HttpClient
from updater.net.download import download
from updater.net.hosts import HostPolicy
from updater.sources.github import GITHUB_DOWNLOAD_HOSTS
from updater.urls import url_origin

if TYPE_CHECKING:
    from updater.config.settings import HttpSettings, Settings


@dataclass(frozen=True)
class Fetched:
    pin: str
    asset: str
    path: Path
    sha256: str
    reused: bool


def _client_for(url: str, http: HttpSettings) -> HttpClient:
    origin = url_origin(url)
    policy = HostPolicy(
        allowed_hosts=frozenset({*GITHUB_DOWNLOAD_HOSTS, origin, urlsplit(url).hostname or ""}),
        token_hosts=frozenset(),
    )
    return HttpClient(policy=policy, token=None, settings=http)


def fetch_one(
    pin: Pin, item: PinnedAsset, out: Path, *, quiet: bool, bar: bool, http: HttpSettings
) -> Fetched:
    assert item.url is not None and item.sha256 is not None
    destination = out / item.asset
    if destination.is_file() and sha256_file(destination) == item.sha256:
        return Fetched(pin.name, item.asset, destination, item.sha256, True)
    with _client_for(item.url, http) as client:
        fetched = download(
            item.url,
            out,
            size=item.size,
            max_size=item.size if item.size is not None else pin.max_bytes,
            client=client,
            label=item.asset,
            progress=make_progress(item.asset, quiet=quiet, bar=bar),
        )
    try:
        check_file_against_pin(pin, item, size=fetched.size, sha256=fetched.sha256, where=item.url)
        os.chmod(fetched.path, 0o644)
        os.replace(fetched.path, destination)
    finally:
        fetched.path.unlink(missing_ok=True)
    return Fetched(pin.name, item.asset, destination, item.sha256, False)


def fetch_artifacts(
    pins_path: Path, target: str, out: Path, *, quiet: bool = True, settings: Settings | None = None
) -> list[Fetched]:
    """``settings`` (default: read from the environment) give the HTTP limits and whether a
    progress bar may be drawn."""
    if target not in TARGETS:
        raise UsageError(f"{target!r} is not a published target", hint=", ".join(TARGETS))
    wanted = shipped_pins(load_pins(pins_path), target)
    out.mkdir(parents=True, exist_ok=True)
    settings = settings or mux_settings.load()
    return [
        fetch_one(pin, item, out, quiet=quiet, bar=settings.progress_bar, http=settings.http)
        for pin, item in wanted
    ]
