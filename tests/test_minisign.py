"""updater.formats.minisign (checking) and release.publish.signing (keys, signing) against the real minisign 0.11 command, in both directions."""

from __future__ import annotations

import base64
import hashlib
import shutil
import subprocess
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from release.publish import signing
from release.publish.signing import SecretKey, SecretKeyError, generate_keypair
from tests.support.releases import make_keypair
from updater.errors import MuxError, ParseError, VerificationError
from updater.formats.minisign import PublicKey, verify, verify_trusted_comment

MINISIGN = shutil.which("minisign")
MESSAGE = b"0123abcd  mux-x86_64-unknown-linux-gnu.tar.gz\n"
CHEAP = {"opslimit": 32768, "memlimit": 1 << 24}


def run_minisign(
    *args: str | Path, password: str | None = None
) -> subprocess.CompletedProcess[str]:
    assert MINISIGN, "the minisign command (Debian package minisign) is required for these tests"
    stdin = f"{password}\n{password}\n" if password is not None else ""
    return subprocess.run(
        [MINISIGN, *map(str, args)], input=stdin, capture_output=True, text=True, timeout=120
    )


def minisign_verify(
    message: Path, signature: Path, public: Path
) -> subprocess.CompletedProcess[str]:
    return run_minisign("-V", "-m", message, "-x", signature, "-p", public)


@pytest.fixture
def unencrypted_minisign_key(tmp_path: Path) -> tuple[Path, Path]:
    """A key pair made by `minisign -G -W`."""
    secret, public = tmp_path / "cli.key", tmp_path / "cli.pub"
    result = run_minisign("-G", "-W", "-p", public, "-s", secret)
    assert result.returncode == 0, result.stderr
    return secret, public


def test_key_from_minisign_without_password_signs_what_minisign_accepts(
    tmp_path: Path, unencrypted_minisign_key: tuple[Path, Path]
) -> None:
    secret_path, public_path = unencrypted_minisign_key
    key = SecretKey.parse(secret_path.read_bytes(), None)
    public_text = public_path.read_text()
    assert key.public_key == PublicKey.parse(public_text)
    assert key.key_id in public_text.splitlines()[0]

    message = tmp_path / "SHA256SUMS"
    message.write_bytes(MESSAGE)
    signature = tmp_path / "SHA256SUMS.minisig"
    signature.write_bytes(key.sign(MESSAGE, "mux 0.2.0"))
    result = minisign_verify(message, signature, public_path)
    assert result.returncode == 0, result.stderr
    assert "Trusted comment: mux 0.2.0" in result.stdout
    # -H: minisign refuses legacy signatures; ours are prehashed.
    assert (
        run_minisign("-V", "-H", "-m", message, "-x", signature, "-p", public_path).returncode == 0
    )


@pytest.mark.slow  # minisign -G always uses scrypt's "sensitive" cost (1 GiB, ~10 s per use)
def test_password_key_from_minisign_is_usable(tmp_path: Path) -> None:
    secret_path, public_path = tmp_path / "pw.key", tmp_path / "pw.pub"
    created = run_minisign("-G", "-p", public_path, "-s", secret_path, password="s3cret pass")
    assert created.returncode == 0, created.stderr
    key = SecretKey.parse(secret_path.read_bytes(), "s3cret pass")
    assert key.public_key == PublicKey.parse(public_path.read_text())

    message = tmp_path / "SHA256SUMS"
    message.write_bytes(MESSAGE)
    signature = tmp_path / "SHA256SUMS.minisig"
    signature.write_bytes(key.sign(MESSAGE, "mux 0.2.0"))
    assert minisign_verify(message, signature, public_path).returncode == 0


def test_our_password_key_is_read_by_minisign(tmp_path: Path) -> None:
    secret, public_text = generate_keypair("pw one", **CHEAP)
    secret_path, public_path = tmp_path / "ours.key", tmp_path / "ours.pub"
    secret_path.write_bytes(secret)
    public_path.write_text(public_text)
    message = tmp_path / "SHA256SUMS"
    message.write_bytes(MESSAGE)

    # minisign decrypts our key (same KDF, XOR and checksum) and signs with it ...
    signed = run_minisign(
        "-S", "-s", secret_path, "-m", message, "-t", "by minisign", password="pw one"
    )
    assert signed.returncode == 0, signed.stderr
    result = verify(
        MESSAGE, (tmp_path / "SHA256SUMS.minisig").read_bytes(), [PublicKey.parse(public_text)]
    )
    assert result.trusted_comment == "by minisign"
    # ... rebuilds our public key file from it byte for byte ...
    recreated = tmp_path / "recreated.pub"
    assert run_minisign("-R", "-s", secret_path, "-p", recreated, password="pw one").returncode == 0
    assert recreated.read_text() == public_text
    # ... and refuses the wrong password, as we do.
    wrong = run_minisign("-S", "-s", secret_path, "-m", message, password="pw two")
    assert wrong.returncode != 0
    with pytest.raises(SecretKeyError, match="wrong password"):
        SecretKey.parse(secret, "pw two")


def test_our_unencrypted_key_has_minisign_layout(
    tmp_path: Path, unencrypted_minisign_key: tuple[Path, Path]
) -> None:
    ours, public_text = generate_keypair(None)
    theirs = unencrypted_minisign_key[0].read_bytes()
    our_lines, their_lines = ours.decode().splitlines(), theirs.decode().splitlines()
    assert our_lines[0] == their_lines[0]
    our_raw, their_raw = base64.b64decode(our_lines[1]), base64.b64decode(their_lines[1])
    assert len(our_raw) == len(their_raw)
    # Algorithm, KDF "none", checksum algorithm, zero salt/limits, zero checksum: identical.
    assert our_raw[:54] == their_raw[:54]
    assert our_raw[126:] == their_raw[126:] == bytes(32)

    secret_path = tmp_path / "ours.key"
    secret_path.write_bytes(ours)
    recreated = tmp_path / "recreated.pub"
    assert run_minisign("-R", "-W", "-s", secret_path, "-p", recreated).returncode == 0
    assert recreated.read_text() == public_text


def test_our_signature_and_public_key_file_accepted_by_minisign(tmp_path: Path) -> None:
    keypair = make_keypair(tmp_path)
    message = tmp_path / "SHA256SUMS"
    message.write_bytes(MESSAGE)
    signature = tmp_path / "SHA256SUMS.minisig"
    signature.write_bytes(keypair.secret_key().sign(MESSAGE, "timestamp:0\tfile:SHA256SUMS"))
    assert minisign_verify(message, signature, keypair.public_key_path).returncode == 0
    by_string = run_minisign("-V", "-m", message, "-x", signature, "-P", keypair.public_key)
    assert by_string.returncode == 0, by_string.stderr

    message.write_bytes(MESSAGE + b"x")
    rejected = minisign_verify(message, signature, keypair.public_key_path)
    assert rejected.returncode != 0
    assert "Signature verification failed" in rejected.stderr


@pytest.mark.parametrize("legacy", [False, True], ids=["prehashed", "legacy"])
def test_minisign_signatures_accepted_by_our_verify(
    tmp_path: Path, unencrypted_minisign_key: tuple[Path, Path], legacy: bool
) -> None:
    secret_path, public_path = unencrypted_minisign_key
    message = tmp_path / "SHA256SUMS"
    message.write_bytes(MESSAGE)
    flags = ["-l"] if legacy else []
    signed = run_minisign(
        "-S", *flags, "-W", "-s", secret_path, "-m", message, "-t", "their comment"
    )
    assert signed.returncode == 0, signed.stderr
    signature = (tmp_path / "SHA256SUMS.minisig").read_bytes()
    assert base64.b64decode(signature.splitlines()[1])[:2] == (b"Ed" if legacy else b"ED")

    key = PublicKey.parse(public_path.read_text())
    result = verify(MESSAGE, signature, [key])
    assert result.trusted_comment == "their comment"
    assert result.key_id == key.key_id
    with pytest.raises(VerificationError, match="does not match"):
        verify(MESSAGE + b"\n", signature, [key])


@pytest.fixture
def signed() -> tuple[bytes, PublicKey, SecretKey]:
    secret, public_text = generate_keypair(None)
    key = SecretKey.parse(secret, None)
    return key.sign(MESSAGE, "timestamp:1\tfile:SHA256SUMS"), PublicKey.parse(public_text), key


def test_tampered_message_is_rejected(signed: tuple[bytes, PublicKey, SecretKey]) -> None:
    signature, public, _ = signed
    assert verify(MESSAGE, signature, [public]).trusted_comment == "timestamp:1\tfile:SHA256SUMS"
    with pytest.raises(VerificationError, match=r"^minisign signature does not match"):
        verify(MESSAGE.replace(b"0123", b"0124"), signature, [public])


def test_tampered_trusted_comment_is_rejected(signed: tuple[bytes, PublicKey, SecretKey]) -> None:
    signature, public, _ = signed
    forged = signature.replace(b"timestamp:1\t", b"timestamp:2\t")
    assert forged != signature
    with pytest.raises(VerificationError, match="trusted comment was tampered"):
        verify(MESSAGE, forged, [public])


def test_the_trusted_comment_alone_is_checked_with_one_key(
    signed: tuple[bytes, PublicKey, SecretKey],
) -> None:
    signature, public, key = signed
    # The comment is vouched for whatever the file became (verify() would refuse the file).
    assert verify_trusted_comment(signature, public) == "timestamp:1\tfile:SHA256SUMS"
    forged = signature.replace(b"timestamp:1\t", b"timestamp:2\t")
    with pytest.raises(VerificationError, match="trusted comment was tampered"):
        verify_trusted_comment(forged, public)
    other = PublicKey.parse(generate_keypair(None)[1])
    with pytest.raises(VerificationError, match=f"another minisign key {key.key_id}"):
        verify_trusted_comment(signature, other)
    impostor = PublicKey(public.key_id_bytes, other.key)
    with pytest.raises(VerificationError, match="tampered"):
        verify_trusted_comment(signature, impostor)
    with pytest.raises(VerificationError, match="malformed"):
        verify_trusted_comment(b"not a signature", public)


def test_tampered_signature_bytes_are_rejected(signed: tuple[bytes, PublicKey, SecretKey]) -> None:
    signature, public, _ = signed
    lines = signature.split(b"\n")
    raw = bytearray(base64.b64decode(lines[1]))
    raw[20] ^= 0x01
    lines[1] = base64.b64encode(bytes(raw))
    with pytest.raises(VerificationError, match="does not match"):
        verify(MESSAGE, b"\n".join(lines), [public])


def test_untrusted_key_is_named(signed: tuple[bytes, PublicKey, SecretKey]) -> None:
    signature, public, key = signed
    other = PublicKey.parse(generate_keypair(None)[1])
    with pytest.raises(VerificationError, match=f"untrusted minisign key {key.key_id}") as caught:
        verify(MESSAGE, signature, [other])
    assert other.key_id in str(caught.value)
    with pytest.raises(VerificationError, match="untrusted"):
        verify(MESSAGE, signature, [])
    # The second trusted key (a rotation) is found too.
    assert verify(MESSAGE, signature, [other, public]).key_id == public.key_id


def test_same_key_id_with_other_key_material_is_rejected(
    signed: tuple[bytes, PublicKey, SecretKey],
) -> None:
    signature, public, _ = signed
    impostor = PublicKey(public.key_id_bytes, PublicKey.parse(generate_keypair(None)[1]).key)
    with pytest.raises(VerificationError, match="does not match"):
        verify(MESSAGE, signature, [impostor])


def test_public_key_parse_accepts_file_or_line_and_round_trips() -> None:
    _, public_text = generate_keypair(None)
    from_file = PublicKey.parse(public_text)
    from_line = PublicKey.parse(public_text.splitlines()[1])
    assert from_file == from_line
    assert from_file.to_file_text() == public_text
    assert PublicKey.parse(from_file.to_base64()) == from_file
    assert public_text.splitlines()[0].endswith(from_file.key_id)


@pytest.mark.parametrize(
    "text",
    ["", "hello", "untrusted comment: x\n", "RWQ=", base64.b64encode(b"Xx" + bytes(40)).decode()],
)
def test_malformed_public_keys_are_parse_errors(text: str) -> None:
    with pytest.raises(ParseError):
        PublicKey.parse(text)


def test_secret_key_errors_are_readable(tmp_path: Path) -> None:
    encrypted, _ = generate_keypair("pw", **CHEAP)
    with pytest.raises(SecretKeyError, match="encrypted and no password"):
        SecretKey.parse(encrypted, None)
    with pytest.raises(SecretKeyError, match="not a minisign secret key"):
        SecretKey.parse(b"untrusted comment: x\nAAAA\n", None)
    plain, _ = generate_keypair(None)
    lines = plain.split(b"\n")
    raw = bytearray(base64.b64decode(lines[1]))
    raw[100] ^= 0xFF  # inside the public half of the unencrypted secret key
    lines[1] = base64.b64encode(bytes(raw))
    with pytest.raises(SecretKeyError, match="corrupt"):
        SecretKey.parse(b"\n".join(lines), None)


def test_secret_key_with_absurd_kdf_limits_is_refused_not_attempted() -> None:
    secret, _ = generate_keypair("pw", **CHEAP)
    lines = secret.split(b"\n")
    raw = bytearray(base64.b64decode(lines[1]))
    raw[38:46] = (1 << 40).to_bytes(8, "little")
    raw[46:54] = (1 << 40).to_bytes(8, "little")
    lines[1] = base64.b64encode(bytes(raw))
    with pytest.raises(SecretKeyError, match="not supported"):
        SecretKey.parse(b"\n".join(lines), "pw")


def test_scrypt_parameters_follow_libsodium() -> None:
    # minisign -G's "sensitive" limits and libsodium's "interactive" ones, with their
    # documented scrypt equivalents (N=2^20 and N=2^14, r=8, p=1).
    assert signing.scrypt_params(33554432, 1073741824) == (1 << 20, 8, 1)
    assert signing.scrypt_params(524288, 16777216) == (1 << 14, 8, 1)
    # Below libsodium's floor the opslimit is raised to 32768.
    assert signing.scrypt_params(1, 1 << 24) == signing.scrypt_params(32768, 1 << 24)


def test_sign_refuses_multiline_comments(signed: tuple[bytes, PublicKey, SecretKey]) -> None:
    _, _, key = signed
    with pytest.raises(MuxError, match="one line"):
        key.sign(MESSAGE, "a\nb")


@settings(max_examples=300, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.binary(max_size=400))
def test_arbitrary_signature_bytes_only_fail_verification(
    signed: tuple[bytes, PublicKey, SecretKey], data: bytes
) -> None:
    _, public, _ = signed
    with pytest.raises(VerificationError):
        verify(MESSAGE, data, [public])


@settings(max_examples=200, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    line=st.integers(min_value=1, max_value=3),
    position=st.integers(0, 200),
    flip=st.integers(1, 255),
)
def test_any_change_to_a_signed_line_fails_verification(
    signed: tuple[bytes, PublicKey, SecretKey], line: int, position: int, flip: int
) -> None:
    signature, public, _ = signed
    lines = signature.split(b"\n")
    target = bytearray(lines[line])
    position %= len(target)
    target[position] ^= flip
    lines[line] = bytes(target)
    tampered = b"\n".join(lines)
    try:
        verify(MESSAGE, tampered, [public])
    except VerificationError:
        return
    # Only a change that decodes to the very same signed bytes may pass (base64 padding bits).
    original = signature.split(b"\n")
    assert line != 2
    assert base64.b64decode(lines[line]) == base64.b64decode(original[line])


@given(text=st.text(max_size=200))
def test_arbitrary_public_key_text_only_fails_parsing(text: str) -> None:
    try:
        PublicKey.parse(text)
    except ParseError:
        pass


@given(data=st.binary(max_size=300))
def test_arbitrary_secret_key_bytes_only_fail_as_mux_errors(data: bytes) -> None:
    try:
        SecretKey.parse(data, "pw")
    except MuxError:
        pass


@given(body=st.binary(min_size=158, max_size=158))
def test_well_sized_random_secret_keys_only_fail_as_mux_errors(body: bytes) -> None:
    # Right length and headers, random rest: exercises the KDF, checksum and key checks.
    raw = (
        b"EdScB2"
        + body[6:38]
        + (32768).to_bytes(8, "little")
        + (1 << 24).to_bytes(8, "little")
        + body[54:]
    )
    text = b"untrusted comment: x\n" + base64.b64encode(raw) + b"\n"
    with pytest.raises(SecretKeyError):
        SecretKey.parse(text, "pw")


def test_prehash_is_blake2b_512(signed: tuple[bytes, PublicKey, SecretKey]) -> None:
    # The ED signature is over BLAKE2b-512(message): checkable with the public key alone.
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    signature, public, _ = signed
    raw = base64.b64decode(signature.split(b"\n")[1])
    assert raw[:2] == b"ED"
    Ed25519PublicKey.from_public_bytes(public.key).verify(
        raw[10:], hashlib.blake2b(MESSAGE, digest_size=64).digest()
    )
