"""``mux-release tuf-client``: mux's TUF client as tuf-conformance's client-under-test.

The suite (theupdateframework/tuf-conformance, CLIENT-CLI.md) drives a client through three
commands, each exiting 0 or 1::

    --metadata-dir D init ROOT
    --metadata-dir D --metadata-url U refresh
    --metadata-dir D --metadata-url U --target-name T [--target-name T2 ...]
        --target-base-url B --target-dir D download

This runs them through mux's own client code, not a second client: :class:`updater.trust.tuf_client.TufClient`
(python-tuf's workflow with mux's storage rules) over :class:`updater.sources.tuf_fetcher.HttpFetcher`
(every request through mux's :class:`~updater.net.client.HttpClient`: its host rules,
retries, deadlines and caps). Two things differ from ``mux update``, as the suite's protocol
asks: the trust anchor is the ``root.json`` that ``init`` copied into the metadata folder
(mux itself always starts from the root baked into the build), and targets are fetched by
the specification's default names (``<sha256>.<name>`` when the repository uses consistent
snapshots; mux's own repository names release files by their immutable tag folder instead).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from updater.config.settings import HttpSettings
from updater.errors import MuxError
from updater.files import NotReadable, TooLarge, read_small_file
from updater.net.client import HttpClient
from updater.net.hosts import HostPolicy
from updater.sources.tuf_fetcher import FolderFetcher, HttpFetcher
from updater.trust.tuf_client import TufClient, TufOptions
from updater.trust.tuf_store import make_private_folder
from updater.trust.tuf_targets import ROOT_LIMIT
from updater.urls import url_origin


def init(metadata_dir: str, trusted_root: str) -> None:
    """Trust ``trusted_root``: copied into the metadata folder, no request made."""
    try:  # a FIFO or a device in its place cannot hang it
        data = read_small_file(trusted_root, ROOT_LIMIT)
    except TooLarge:
        raise MuxError(f"{trusted_root} is larger than {ROOT_LIMIT} bytes") from None
    except NotReadable as exc:
        raise MuxError(f"{trusted_root} cannot be read: {exc}") from None
    if data is None:
        raise MuxError(f"{trusted_root} does not exist")
    make_private_folder(metadata_dir)
    with open(os.path.join(metadata_dir, "root.json"), "wb") as out:
        out.write(data)


def _client(
    metadata_dir: str,
    metadata_url: str,
    *,
    target_dir: str | None = None,
    target_base_url: str | None = None,
) -> tuple[TufClient, HttpClient | None]:
    origins = {url_origin(u) for u in (metadata_url, target_base_url) if u and "://" in u}
    http = None
    if metadata_url.startswith(("http://", "https://")):
        # Loopback http for the suite; https anywhere else. Short waits: the suite's server
        # answers at once, and a stalled test should fail fast.
        http = HttpClient(
            policy=HostPolicy(allowed_hosts=frozenset(origins)),
            settings=HttpSettings(timeout=10.0, retries=0, deadline=30.0),
            plain_loopback_only=metadata_url.startswith("http://"),
        )
        fetcher: HttpFetcher | FolderFetcher = HttpFetcher(http)
    else:
        fetcher = FolderFetcher()
    client = TufClient(
        metadata_url,
        metadata_dir,
        fetcher=fetcher,
        bootstrap=None,  # the root `init` stored (CLIENT-CLI.md)
        options=TufOptions(
            target_dir=target_dir,
            target_base_url=target_base_url,
            prefix_targets_with_hash=True,
        ),
    )
    return client, http


def refresh(metadata_dir: str, metadata_url: str) -> None:
    client, http = _client(metadata_dir, metadata_url)
    try:
        client.refresh_top_level()
    finally:
        if http is not None:
            http.close()


def download(
    metadata_dir: str,
    metadata_url: str,
    target_names: Sequence[str],
    target_dir: str,
    target_base_url: str,
) -> None:
    client, http = _client(
        metadata_dir, metadata_url, target_dir=target_dir, target_base_url=target_base_url
    )
    try:
        client.refresh_top_level()
        for name in target_names:
            client.download(name)
    finally:
        if http is not None:
            http.close()


def run(
    action: str,
    *,
    metadata_dir: str,
    metadata_url: str | None,
    trusted_root: str | None,
    target_names: Sequence[str],
    target_dir: str | None,
    target_base_url: str | None,
) -> int:
    """One command of the suite's protocol; 0 on success, 1 (and one line) on failure."""
    try:
        if action == "init":
            if not trusted_root:
                raise MuxError("init needs the trusted root file")
            init(metadata_dir, trusted_root)
        elif action in ("refresh", "download"):
            if not metadata_url:
                raise MuxError(f"{action} needs --metadata-url")
            if action == "refresh":
                refresh(metadata_dir, metadata_url)
            else:
                if not (target_names and target_dir and target_base_url):
                    raise MuxError(
                        "download needs --target-name, --target-dir and --target-base-url"
                    )
                download(metadata_dir, metadata_url, target_names, target_dir, target_base_url)
        else:
            raise MuxError(f"unknown command {action[:40]!r} (init, refresh or download)")
    except MuxError as exc:
        print(f"mux-release tuf-client: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:
        print(f"mux-release tuf-client: {exc}", file=sys.stderr)
        return 1
    return 0


def main(argv: Sequence[str]) -> int:
    """The suite's command line (the module docstring), parsed without typer (the fast path
    of ``mux-release tuf-client``: :mod:`release.__main__`)."""
    parser = argparse.ArgumentParser(prog="mux-release tuf-client")
    parser.add_argument("--metadata-dir", required=True)
    parser.add_argument("--metadata-url")
    parser.add_argument("--target-name", action="append", default=[])
    parser.add_argument("--target-base-url")
    parser.add_argument("--target-dir")
    parser.add_argument("action", choices=("init", "refresh", "download"))
    parser.add_argument("trusted_root", nargs="?")
    try:
        args = parser.parse_args(list(argv))
    except SystemExit as exc:
        return 1 if exc.code else 0
    return run(
        args.action,
        metadata_dir=args.metadata_dir,
        metadata_url=args.metadata_url,
        trusted_root=args.trusted_root,
        target_names=args.target_name,
        target_dir=args.target_dir,
        target_base_url=args.target_base_url,
    )
