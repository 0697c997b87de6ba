"""How the TUF client reads a repository: through mux's own HTTP client, or from a folder.

python-tuf's :class:`~tuf.ngclient.FetcherInterface` is the seam: every byte the TUF client
reads (metadata, and the targets ``mux-release tuf-client`` downloads) goes through one of
these, never through python-tuf's own urllib3 fetcher.

* :class:`HttpFetcher` sends each request through :class:`updater.net.client.HttpClient`: its
  host rules (no redirect off the allowed hosts, no token where it must not go), its proxies,
  its retries, and its bounds: a metadata file is read whole under ``MUX_HTTP_DEADLINE`` and
  never past the length python-tuf allows for it (the signed length when the repository
  gives one, else the role's cap), a target file streams under ``MUX_HTTP_MIN_SPEED``.
* :class:`FolderFetcher` reads the same layout from a folder (an air-gapped mirror copied
  file by file), bounded the same way.

Both keep the last bytes they handed out for each URL (:meth:`last`), so that a refusal can
say what the refused document claimed (its expiry, its signatures). :func:`open_client` makes
the TUF client of a source with the right one (what :class:`updater.sources.tuf_index.TufIndex`
imports once it knows the build trusts a TUF root).
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from typing import IO
from urllib.parse import unquote, urlsplit

from tuf.api import exceptions

from updater.errors import NetworkError, VerificationError
from updater.files import NotARegularFile, NotReadable, TooLarge, open_regular_file, read_small_file
from updater.net.client import HttpClient
from updater.net.progress import NoProgress
from updater.trust.tuf_client import RememberingFetcher, TufClient, TufOptions
from updater.trust.tuf_store import repository_folder


class HttpFetcher(RememberingFetcher):
    """Every request through ``client`` (which the caller owns and closes)."""

    def __init__(self, client: HttpClient) -> None:
        super().__init__()
        self._client = client

    def download_bytes(self, url: str, max_length: int) -> bytes:
        self.last_url = url
        try:
            data = self._client.get(url, max_size=max_length).content
        except NetworkError as exc:
            raise _download_error(url, exc, max_length) from None
        self._remember(url, data)
        return data

    @contextmanager
    def download_file(self, url: str, max_length: int) -> Iterator[IO[bytes]]:
        self.last_url = url
        with tempfile.TemporaryFile() as out:
            try:
                self._client.download_into(
                    url, out, size=None, max_size=max_length, label=url, progress=NoProgress()
                )
            except (NetworkError, VerificationError) as exc:
                raise _download_error(url, exc, max_length) from None
            out.seek(0)
            yield out


class FolderFetcher(RememberingFetcher):
    """A repository in a folder: ``file:`` URLs or plain paths, read without following a
    link out of nothing, never past ``max_length``."""

    def download_bytes(self, url: str, max_length: int) -> bytes:
        self.last_url = url
        path = folder_path(url)
        data = _read_capped(path, max_length)
        self._remember(url, data)
        return data

    @contextmanager
    def download_file(self, url: str, max_length: int) -> Iterator[IO[bytes]]:
        self.last_url = url
        path = folder_path(url)
        with tempfile.TemporaryFile() as out:
            try:
                with open_regular_file(path) as source:
                    copied = 0
                    while block := source.read(1 << 20):
                        copied += len(block)
                        if copied > max_length:
                            raise exceptions.DownloadLengthMismatchError(
                                f"{path} is larger than {max_length} bytes"
                            )
                        out.write(block)
            except FileNotFoundError:
                raise exceptions.DownloadHTTPError(f"{path} does not exist", 404) from None
            except NotARegularFile:
                raise exceptions.DownloadHTTPError(f"{path} is not a file", 404) from None
            except NotReadable as exc:
                raise exceptions.DownloadError(f"cannot read {path}: {exc}") from None
            except OSError as exc:
                raise exceptions.DownloadError(f"cannot read {path}: {exc.strerror}") from None
            out.seek(0)
            yield out


def folder_path(url: str) -> str:
    """The local path a folder repository's URL names (``file:///x/y`` or ``/x/y``)."""
    parts = urlsplit(url)
    return unquote(parts.path) if parts.scheme == "file" else url


def _read_capped(path: str, max_length: int) -> bytes:
    """A metadata file of the folder (:func:`~updater.files.read_small_file`: a FIFO or a
    device in its place cannot hang the client), in python-tuf's words when it cannot be."""
    try:
        data = read_small_file(path, max_length)
    except NotARegularFile:
        raise exceptions.DownloadHTTPError(f"{path} is not a file", 404) from None
    except TooLarge:
        raise exceptions.DownloadLengthMismatchError(
            f"{path} is larger than {max_length} bytes"
        ) from None
    except NotReadable as exc:
        raise exceptions.DownloadError(f"cannot read {path}: {exc}") from None
    if data is None:
        # As a web server answers: python-tuf takes a missing next root as "no newer root".
        raise exceptions.DownloadHTTPError(f"{path} does not exist", 404)
    return data


def _download_error(
    url: str, exc: NetworkError | VerificationError, max_length: int
) -> exceptions.DownloadError:
    """python-tuf's word for one of mux's failures, keeping mux's line as its message: a
    status (404 and 403 mean "no newer root" to it), a body past its cap, or anything else."""
    status = getattr(exc, "status", None)
    if isinstance(status, int) and status >= 400:
        return exceptions.DownloadHTTPError(exc.message, status)
    if "larger than" in exc.message:
        return exceptions.DownloadLengthMismatchError(exc.message)
    return exceptions.DownloadError(exc.message)


def open_client(
    metadata_url: str,
    state_dir: str,
    root: bytes,
    *,
    client: HttpClient | None,
    lock_wait: float,
    clock_ahead: float,
) -> TufClient:
    """The TUF client of one repository: through ``client`` (a URL) or from a folder, its
    trusted metadata kept per repository below the user's ``state_dir``: by the root it is
    bootstrapped from, so every URL of the repository shares one rollback floor."""
    fetcher = HttpFetcher(client) if client is not None else FolderFetcher()
    return TufClient(
        metadata_url,
        repository_folder(state_dir, root),
        fetcher=fetcher,
        bootstrap=root,
        options=TufOptions(lock_wait=lock_wait, clock_ahead=clock_ahead, carry_over_state=True),
    )
