"""GitHubSource.attestation_bundles against real loopback servers, in every response shape.

The API server stands for api.github.com (it sees the token); a second server, addressed as
``localhost`` instead of ``127.0.0.1``, stands for the Azure blob store behind ``bundle_url``
(it must never see the token). Blobs are snappy block, snappy framed or plain JSON, as GitHub
has served them since 2026-07-16 (docs/design.md, "GitHub's attestations API").
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

from release.rehearsal.fake_sigstore import FakeSigstore
from release.rehearsal.serve import serving
from tests.support.github import FakeGitHub, serve_github
from tests.support.snappy import compressed_chunk, encode_literals, framed, varint
from updater.errors import NetworkError, VerificationError
from updater.sources.github import GitHubSource
from updater.trust.attestation import AttestationIdentity, verify_attestation

REPO = "acme/mux"
TOKEN = "ghp_secret-token-for-tests"
DIGEST = "ab" * 32
OTHER_DIGEST = "cd" * 32
PROVENANCE = "https://slsa.dev/provenance/v1"
LISTING = f"/repos/{REPO}/attestations/sha256:{DIGEST}"
MIB = 1024 * 1024
# A stand-in bundle: attestation_bundles hands bytes on; verify_attestation judges them.
BUNDLE = {"mediaType": "application/vnd.dev.sigstore.bundle.v0.3+json", "n": 1}
OTHER_BUNDLE = {"mediaType": "application/vnd.dev.sigstore.bundle.v0.3+json", "n": 2}


@dataclass
class Seen:
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]


@dataclass
class Server:
    """A loopback HTTP server answering ``routes[path]``: (status, body, headers)."""

    host: str = "127.0.0.1"
    routes: dict[str, tuple[int, bytes, dict[str, str]]] = field(default_factory=dict)
    seen: list[Seen] = field(default_factory=list)
    url: str = ""

    def json(self, path: str, doc: Any) -> None:
        self.routes[path] = (200, json.dumps(doc).encode(), {"Content-Type": "application/json"})

    def blob(self, path: str, data: bytes) -> str:
        self.routes[path] = (200, data, {"Content-Type": "application/x-snappy"})
        return f"{self.url}{path}?sv=2025&sig=SAS-SIGNATURE"

    def paths(self) -> list[str]:
        return [s.path for s in self.seen]


@contextmanager
def serve(server: Server) -> Iterator[Server]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            pass

        def do_GET(self) -> None:
            parts = urlsplit(self.path)
            server.seen.append(Seen(parts.path, parse_qs(parts.query), dict(self.headers.items())))
            status, body, headers = server.routes.get(parts.path, (404, b"{}", {}))
            self.send_response(status)
            for key, value in headers.items():
                self.send_header(key, value)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    with serving(Handler) as httpd:
        server.url = f"http://{server.host}:{httpd.server_address[1]}"
        yield server


@pytest.fixture(autouse=True)
def _sandbox(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The API's ETag cache and sigstore's caches go where platformdirs says: keep them here.
    for variable, folder in (("HOME", "home"), ("XDG_CACHE_HOME", "cache")):
        monkeypatch.setenv(variable, str(tmp_path / folder))
    monkeypatch.setenv("MUX_HTTP_BACKOFF", "0.01")
    monkeypatch.setenv("MUX_HTTP_TIMEOUT", "5")
    monkeypatch.delenv("MUX_SIGSTORE_TRUSTED_ROOT", raising=False)


@pytest.fixture
def api() -> Iterator[Server]:
    with serve(Server(host="127.0.0.1")) as server:
        yield server


@pytest.fixture
def store() -> Iterator[Server]:
    """The blob store: another port, and another host name for the same loopback."""
    with serve(Server(host="localhost")) as server:
        yield server


@pytest.fixture
def source(api: Server) -> Iterator[GitHubSource]:
    github = GitHubSource(REPO, web_url="http://127.0.0.1:9", api_url=api.url, token=TOKEN)
    try:
        yield github
    finally:
        github.close()


def snappy_block(doc: Any) -> bytes:
    return encode_literals(json.dumps(doc, indent=2).encode())


def listing(*items: Any) -> dict[str, Any]:
    return {"attestations": list(items)}


def authorization(seen: list[Seen]) -> list[str | None]:
    return [s.headers.get("Authorization") for s in seen]


def as_docs(bundles: list[bytes]) -> list[Any]:
    for raw in bundles:
        assert b"\n" not in raw  # verify.py joins several bundles as JSON lines
    return [json.loads(raw) for raw in bundles]


# -- response shapes ---------------------------------------------------------------------------


def test_inline_bundle(api: Server, source: GitHubSource) -> None:
    api.json(LISTING, listing({"bundle": BUNDLE, "repository_id": 1}))
    assert as_docs(source.attestation_bundles(DIGEST)) == [BUNDLE]
    (request,) = api.seen
    assert request.query == {"predicate_type": [PROVENANCE]}
    assert request.headers["Authorization"] == f"Bearer {TOKEN}"


def test_null_bundle_with_snappy_bundle_url(
    api: Server, store: Server, source: GitHubSource
) -> None:
    url = store.blob("/attestations/a.json.sn", snappy_block(BUNDLE))
    api.json(LISTING, listing({"bundle": None, "bundle_url": url, "repository_id": 1}))
    assert as_docs(source.attestation_bundles(DIGEST)) == [BUNDLE]
    assert authorization(api.seen) == [f"Bearer {TOKEN}"]
    assert store.paths() == ["/attestations/a.json.sn"]
    assert authorization(store.seen) == [None]
    assert store.seen[0].query == {"sv": ["2025"], "sig": ["SAS-SIGNATURE"]}


def test_new_item_shape_with_framed_and_plain_blobs(
    api: Server, store: Server, source: GitHubSource
) -> None:
    # API version 2026-03-10 items: {id, bundle_url, predicate_type}; no bundle key at all.
    text = json.dumps(OTHER_BUNDLE, indent=1).encode()
    stream = framed(compressed_chunk(text[:40]), compressed_chunk(text[40:]))
    framed_url = store.blob("/f.json.sn", stream)
    plain_url = store.blob("/p.json", b"\n  " + json.dumps(BUNDLE, indent=4).encode())
    api.json(
        LISTING,
        listing(
            {"id": 1, "bundle_url": framed_url, "predicate_type": PROVENANCE},
            {"id": 2, "bundle_url": plain_url, "predicate_type": PROVENANCE},
        ),
    )
    assert as_docs(source.attestation_bundles(DIGEST)) == [OTHER_BUNDLE, BUNDLE]
    assert authorization(store.seen) == [None, None]


def test_every_shape_in_one_answer(api: Server, store: Server, source: GitHubSource) -> None:
    url = store.blob("/b.sn", snappy_block(OTHER_BUNDLE))
    api.json(
        LISTING,
        listing(
            {"bundle": BUNDLE}, {"bundle": None, "bundle_url": url}, {"id": 3, "bundle_url": url}
        ),
    )
    assert as_docs(source.attestation_bundles(DIGEST)) == [BUNDLE, OTHER_BUNDLE, OTHER_BUNDLE]


def test_other_predicate_types_are_not_downloaded(
    api: Server, store: Server, source: GitHubSource
) -> None:
    wanted = store.blob("/provenance.sn", snappy_block(BUNDLE))
    release = store.blob("/release.sn", snappy_block(OTHER_BUNDLE))
    api.json(
        LISTING,
        listing(
            {
                "id": 1,
                "bundle_url": release,
                "predicate_type": "https://in-toto.io/attestation/release/v0.1",
            },
            {"id": 2, "bundle_url": wanted, "predicate_type": PROVENANCE},
        ),
    )
    assert as_docs(source.attestation_bundles(DIGEST)) == [BUNDLE]
    assert store.paths() == ["/provenance.sn"]


def test_empty_list_is_no_bundles(api: Server, source: GitHubSource) -> None:
    api.json(LISTING, listing())
    assert source.attestation_bundles(DIGEST) == []


def test_the_impersonator_still_works_with_the_query(tmp_path: Path) -> None:
    with serve_github(FakeGitHub(root=tmp_path, repo=REPO)) as fake:
        fake.attestations[DIGEST] = json.dumps(BUNDLE, indent=2).encode()
        github = GitHubSource(REPO, web_url=fake.web_url, api_url=fake.api_url, token=TOKEN)
        try:
            assert as_docs(github.attestation_bundles(DIGEST)) == [BUNDLE]
        finally:
            github.close()
    (request,) = fake.requests_to("api")
    assert parse_qs(urlsplit(request.path).query) == {"predicate_type": [PROVENANCE]}


# -- the token and the host policy -------------------------------------------------------------


def test_token_is_withheld_even_from_a_bundle_url_on_the_api_host(
    api: Server, source: GitHubSource
) -> None:
    # The API client would send the token here (same origin); the blob client has none.
    url = api.blob("/blob/a.json.sn", snappy_block(BUNDLE))
    api.json(LISTING, listing({"bundle": None, "bundle_url": url}))
    assert as_docs(source.attestation_bundles(DIGEST)) == [BUNDLE]
    assert [(s.path, s.headers.get("Authorization")) for s in api.seen] == [
        (LISTING, f"Bearer {TOKEN}"),
        ("/blob/a.json.sn", None),
    ]


def test_bundle_url_redirecting_to_another_host_is_refused(
    api: Server, store: Server, source: GitHubSource
) -> None:
    target = api.blob("/elsewhere.sn", snappy_block(BUNDLE))
    store.routes["/moved.sn"] = (302, b"", {"Location": target})
    api.json(LISTING, listing({"bundle": None, "bundle_url": f"{store.url}/moved.sn?sig=SAS"}))
    with pytest.raises(NetworkError) as caught:
        source.attestation_bundles(DIGEST)
    message = str(caught.value)
    assert f"cannot read the attestation bundle at {store.url}/moved.sn:" in message
    assert "is not an allowed release host" in message
    assert "/elsewhere.sn" not in api.paths()


def test_plain_http_bundle_url_off_loopback_is_refused(api: Server, source: GitHubSource) -> None:
    api.json(LISTING, listing({"bundle": None, "bundle_url": "http://blob.example/a.sn?sig=SAS"}))
    with pytest.raises(NetworkError, match=r"at http://blob.example/a.sn: refusing .*only https"):
        source.attestation_bundles(DIGEST)


# -- failures --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("blob", "reason"),
    [
        (varint(0xFFFFFFFF) + b"\x00a" + b"\xfe\x01\x00" * 100, "declares 4294967295 bytes"),
        (varint(20 * MIB) + b"\x00a", "declares 20971520 bytes, more than the 16777216"),
        (snappy_block(BUNDLE)[:-5], "snappy data is truncated"),
        (framed(compressed_chunk(b"{}", crc=7)), "fails its CRC-32C check"),
        (encode_literals(b"not json"), "is not valid JSON"),
        (encode_literals(b"[1, 2]"), "is not a JSON object"),
        (b"{ truncated", "is not valid JSON"),
    ],
    ids=["bomb", "over-cap", "truncated", "bad-crc", "not-json", "not-object", "plain-junk"],
)
def test_an_unreadable_blob_alone_is_one_network_error_naming_it(
    api: Server, store: Server, source: GitHubSource, blob: bytes, reason: str
) -> None:
    url = store.blob("/bad.sn", blob)
    api.json(LISTING, listing({"bundle": None, "bundle_url": url}))
    with pytest.raises(NetworkError) as caught:
        source.attestation_bundles(DIGEST)
    message = str(caught.value)
    assert reason in message
    assert f"{store.url}/bad.sn" in message
    assert "SAS-SIGNATURE" not in message  # the pre-signed query is a credential
    assert "\n" not in message


def test_a_blob_over_16_mib_is_refused_while_downloading(
    api: Server, store: Server, source: GitHubSource
) -> None:
    url = store.blob("/huge.sn", b"\x00" * (16 * MIB + 1))
    api.json(LISTING, listing({"bundle": None, "bundle_url": url}))
    with pytest.raises(NetworkError, match="is larger than 16777216 bytes"):
        source.attestation_bundles(DIGEST)


def test_missing_blob_names_the_url(api: Server, store: Server, source: GitHubSource) -> None:
    api.json(LISTING, listing({"bundle": None, "bundle_url": f"{store.url}/gone.sn?sig=SAS"}))
    with pytest.raises(NetworkError, match=f"at {store.url}/gone.sn: .*HTTP 404"):
        source.attestation_bundles(DIGEST)


def test_a_bad_item_is_skipped_when_another_is_read(
    api: Server, store: Server, source: GitHubSource
) -> None:
    good = store.blob("/good.sn", snappy_block(BUNDLE))
    bomb = store.blob("/bomb.sn", varint(0xFFFFFFFF))
    api.json(
        LISTING,
        listing(
            {"bundle": None, "bundle_url": bomb},
            {"bundle": None, "bundle_url": f"{store.url}/gone.sn"},
            {"bundle": None},
            "junk",
            {"bundle": None, "bundle_url": good},
        ),
    )
    assert as_docs(source.attestation_bundles(DIGEST)) == [BUNDLE]


def test_when_every_item_fails_the_first_failure_is_reported(
    api: Server, store: Server, source: GitHubSource
) -> None:
    api.json(
        LISTING,
        listing(
            {"bundle": None, "bundle_url": f"{store.url}/gone.sn"},
            {"bundle": None},
            {"bundle": None, "bundle_url": "https://[broken/x"},
        ),
    )
    with pytest.raises(NetworkError) as caught:
        source.attestation_bundles(DIGEST)
    message = str(caught.value)
    assert message.startswith(f"cannot read the attestation bundle at {store.url}/gone.sn")
    assert message.endswith("(and 2 more failed)")


@pytest.mark.parametrize(
    "item",
    [{"bundle": None}, {"bundle": None, "bundle_url": 7}, {"id": 1, "predicate_type": PROVENANCE}],
)
def test_an_item_with_nothing_to_read_names_the_api_url(
    api: Server, source: GitHubSource, item: dict[str, Any]
) -> None:
    api.json(LISTING, listing(item))
    with pytest.raises(
        NetworkError, match=f"{api.url}{LISTING} listed an attestation with neither"
    ):
        source.attestation_bundles(DIGEST)


@pytest.mark.parametrize("url", ["https://[broken/x", "https://bad\x00host/x", "https://h:99999/"])
def test_a_malformed_bundle_url_is_one_error(api: Server, source: GitHubSource, url: str) -> None:
    api.json(LISTING, listing({"bundle": None, "bundle_url": url}))
    with pytest.raises(NetworkError, match=r"malformed bundle_url|invalid URL"):
        source.attestation_bundles(DIGEST)


@pytest.mark.parametrize("doc", [[], {"attestations": {"bundle": None}}, "nope"])
def test_an_answer_that_is_not_a_listing_is_one_error(
    api: Server, source: GitHubSource, doc: Any
) -> None:
    api.json(LISTING, doc)
    with pytest.raises(NetworkError, match="did not answer a list of attestations"):
        source.attestation_bundles(DIGEST)


def test_no_attestation_at_all_is_the_api_404(api: Server, source: GitHubSource) -> None:
    with pytest.raises(NetworkError, match=r"attestations/sha256:.* was not found \(HTTP 404\)"):
        source.attestation_bundles(DIGEST)


# -- what comes out verifies ---------------------------------------------------------------------


def test_a_real_bundle_from_bundle_url_verifies_next_to_another(
    tmp_path: Path, api: Server, store: Server, source: GitHubSource
) -> None:
    sigstore = FakeSigstore.create(tmp_path / "sigstore")
    ref = "refs/tags/v1.2.3"
    mine = sigstore.attest({"mux.tar.gz": DIGEST}, repository=REPO, ref=ref)
    theirs = sigstore.attest({"other.tar.gz": OTHER_DIGEST}, repository=REPO, ref=ref)
    assert b"\n" in mine  # minted pretty-printed, as a blob may be
    url = store.blob("/real.json.sn", encode_literals(mine))
    api.json(LISTING, listing({"bundle": json.loads(theirs)}, {"id": 9, "bundle_url": url}))
    bundles = source.attestation_bundles(DIGEST)
    identity = AttestationIdentity(REPO, ".github/workflows/release.yml", ref)
    # Joined as updater/trust/pipeline.py does: one JSON line per bundle.
    report = verify_attestation(
        b"\n".join(bundles), DIGEST, identity, trusted_root=sigstore.trusted_root_path
    )
    assert report.repository == REPO


# -- several attestations for one digest; an API that wants a token ------------------------------


def test_of_several_attestations_the_provenance_of_this_digest_and_identity_verifies(
    tmp_path: Path, api: Server, store: Server, source: GitHubSource
) -> None:
    """GitHub lists an immutable-release attestation beside the build provenance (and here
    a provenance of another artifact and one from another repository): only provenances of
    this digest are handed on, and the verifier picks the one whose identity matches."""
    sigstore = FakeSigstore.create(tmp_path / "sigstore")
    ref = "refs/tags/v1.2.3"
    release_attestation = sigstore.attest(
        {"mux.tar.gz": DIGEST},
        repository=REPO,
        ref=ref,
        predicate_type="https://in-toto.io/attestation/release/v0.1",
    )
    other_artifact = sigstore.attest({"other.tar.gz": OTHER_DIGEST}, repository=REPO, ref=ref)
    other_repository = sigstore.attest({"mux.tar.gz": DIGEST}, repository="evil/mux", ref=ref)
    mine = sigstore.attest({"mux.tar.gz": DIGEST}, repository=REPO, ref=ref)
    api.json(
        LISTING,
        listing(
            {"bundle": json.loads(release_attestation)},  # no predicate_type field: read it
            {"bundle": json.loads(other_artifact)},
            {"bundle_url": store.blob("/other-repo.sn", encode_literals(other_repository))},
            {"bundle": json.loads(mine)},
        ),
    )
    bundles = source.attestation_bundles(DIGEST)
    assert as_docs(bundles) == [json.loads(other_repository), json.loads(mine)]
    identity = AttestationIdentity(REPO, ".github/workflows/release.yml", ref)
    report = verify_attestation(
        b"\n".join(bundles), DIGEST, identity, trusted_root=sigstore.trusted_root_path
    )
    assert report.repository == REPO
    with pytest.raises(VerificationError, match="none of the 2 bundles verified"):
        verify_attestation(
            b"\n".join(bundles),
            DIGEST,
            AttestationIdentity("someone/else", ".github/workflows/release.yml", ref),
            trusted_root=sigstore.trusted_root_path,
        )


def test_an_api_that_refuses_anonymous_requests_is_said_so(api: Server) -> None:
    api.routes[LISTING] = (
        401,
        b'{"message": "Requires authentication", "documentation_url": "https://docs.github.com"}',
        {"Content-Type": "application/json"},
    )
    anonymous = GitHubSource(REPO, web_url="http://127.0.0.1:9", api_url=api.url)
    try:
        with pytest.raises(NetworkError) as refused:
            anonymous.attestation_bundles(DIGEST)
    finally:
        anonymous.close()
    assert refused.value.message.startswith(
        "GitHub's attestations API refused an anonymous request ("
    )
    assert "HTTP 401: Requires authentication" in refused.value.message
    assert refused.value.hint is not None and "MUX_GITHUB_TOKEN" in refused.value.hint
    assert authorization(api.seen) == [None]


def test_with_a_token_a_refusal_is_about_the_token(api: Server, source: GitHubSource) -> None:
    api.routes[LISTING] = (
        403,
        b'{"message": "Resource not accessible by personal access token"}',
        {"Content-Type": "application/json", "X-RateLimit-Remaining": "4999"},
    )
    with pytest.raises(NetworkError) as refused:
        source.attestation_bundles(DIGEST)
    message = refused.value.message
    assert "anonymous" not in message
    assert "HTTP 403: Resource not accessible by personal access token" in message
    assert refused.value.hint is not None and "scopes" in refused.value.hint
