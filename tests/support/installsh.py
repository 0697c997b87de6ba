"""Drive ``install.sh`` from tests: real shells, chosen tools on PATH, HOME snapshots.

Typical use::

    from tests.support.installsh import make_toolbox, render_install_sh, run_install, snapshot

    script = render_install_sh(tmp_path / "install.sh", keys=[feed.keypair.public_key])
    tools = make_toolbox(tmp_path / "bin", downloader="wget")
    before = snapshot(home)
    result = run_install(script, shell="busybox", env={..., "PATH": str(tools)})

* :func:`render_install_sh` writes a copy of install.sh with the trusted minisign keys (and
  optionally the repository) embedded, exactly as the release process publishes it. The
  script has no environment override for its trust root on purpose.
* :func:`make_toolbox` builds a directory of symlinks to the tools a test allows, plus stub
  scripts (fake ``uname``, ``sysctl``, ``ldd``), to be the whole PATH of the script.
* :func:`snapshot` describes a tree (type, mode, content digest, link target) so a test can
  prove that a run changed nothing, or that an uninstall restored it;
  :func:`changes_besides_the_lock` is the same proof for a run that took the install lock
  (whose empty file stays, on purpose).
* :func:`find_tool`, :func:`require_tools` and :func:`shell_argv` find shells and tools on
  PATH (and Homebrew's folder), so a machine without one (macOS has no BusyBox, flock or
  ldd) skips the tests that need it, naming it, instead of erroring.
* :func:`make_tls_identity`, :func:`serve_site` and :func:`serve_proxy` are the network
  parts: a self-signed certificate the download tools are told to trust (through their
  environment: ``CURL_CA_BUNDLE`` for curl, a ``WGETRC`` for GNU wget, whose GnuTLS build
  ignores ``SSL_CERT_FILE``), a loopback HTTP(S) server with redirects, stalls and a request
  log, and a loopback proxy that records requests, forwards plain http to loopback and
  tunnels every ``CONNECT`` to one address (so ``https://mirror.test`` reaches a local server
  under a name that is not loopback).
* The fixture :func:`tmp_path` (imported by the install.sh test modules) puts each test's
  temporary folder, so the HOME install.sh installs into, on a RAM file system where there
  is one: the files a run makes (some 300 unpacked, and its pipes and scratch files) cost
  less kernel time there than on a journalled disk.
* The fixtures :func:`feed_url`, :func:`policy_path`, :func:`script` and :func:`env` run the
  ``feed`` fixture of the test module that imports them through a rendered install.sh whose
  machine policy lives under the test's temporary root; :func:`library` and :func:`call`
  source install.sh's functions without running it.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import select
import shutil
import socket
import stat
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from release.rehearsal.serve import serving, url_of
from tests.support.environment import ram_dir
from tests.support.releases import Feed, serve_directory

REPO_ROOT = Path(__file__).resolve().parents[2]
INSTALL_SH = REPO_ROOT / "install.sh"

# Where tools are looked for besides PATH: the usual system folders and Homebrew's.
_TOOL_DIRS = (
    "/usr/local/bin",
    "/usr/bin",
    "/bin",
    "/usr/local/sbin",
    "/usr/sbin",
    "/sbin",
    "/opt/homebrew/bin",
    "/opt/homebrew/sbin",
)

# The shells install.sh is tested under, as argv prefixes relative to the found binary.
SHELLS: dict[str, tuple[str, ...]] = {
    "dash": ("dash",),
    "bash": ("bash",),
    "busybox": ("busybox", "sh"),
    "ksh93": ("ksh93",),
    "mksh": ("mksh",),
    "yash": ("yash",),
    "posh": ("posh",),
    "sh": ("sh",),
}

# Where each POSIX shell comes from, for the skip message (Debian package names).
SHELL_PACKAGES = {"ksh93": "ksh93u+m", "busybox": "busybox"}

# What install.sh needs besides a downloader, a hash tool and minisign (and what the
# stand-in mux launcher needs: readlink, dirname). Every Unix has these.
BASE_TOOLS = (
    "awk",
    "cat",
    "chmod",
    "cmp",
    "dirname",
    "find",
    "grep",
    "gzip",
    "head",
    "id",
    "kill",  # a builtin in most shells, not in posh
    "ln",
    "ls",
    "mkdir",
    "mkfifo",
    "mktemp",
    "mv",
    "printf",  # a builtin in most shells, not in mksh and posh
    "readlink",
    "rm",
    "rmdir",
    "sed",
    "sleep",
    "sort",
    "tail",
    "tar",
    "tr",
    "uname",
    "wc",
)

# Used when present, and install.sh copes without them: flock (else perl, else no lock),
# getconf and ldd (libc detection on Linux only), timeout (bounds the smoke test). macOS has
# none but perl and getconf.
OPTIONAL_TOOLS = ("flock", "perl", "getconf", "ldd", "timeout")

HASHERS = ("sha256sum", "shasum", "openssl")


def render_install_sh(
    dest: Path, *, keys: Sequence[str], repo: str | None = None, policy_file: str | None = None
) -> Path:
    """A copy of install.sh at ``dest`` trusting ``keys`` (and defaulting to ``repo``, and
    reading the machine policy at ``policy_file``), made by the same code the release
    workflow publishes it with (``mux-release install-sh``)."""
    from release.publish.install_script import write_install_script

    return write_install_script(Path(dest), keys=keys, repo=repo, policy_file=policy_file)


def find_tool(tool: str) -> str | None:
    """The path of ``tool`` on PATH or in the usual system and Homebrew folders, or None."""
    search = os.pathsep.join([os.environ.get("PATH", ""), *_TOOL_DIRS])
    return shutil.which(tool, path=search)


def require_tools(*tools: str) -> None:
    """Skip the calling test unless every tool is installed, naming the missing ones."""
    missing = [tool for tool in tools if find_tool(tool) is None]
    if missing:
        pytest.skip(f"not installed here: {', '.join(missing)}")


def shell_argv(shell: str) -> list[str]:
    """The command that runs a script under ``shell`` (a key of SHELLS); skips if missing."""
    first, *rest = SHELLS[shell]
    found = find_tool(first)
    if found is None:
        package = SHELL_PACKAGES.get(shell, first)
        pytest.skip(
            f"{first} is not installed here (Debian package {package}; install.sh runs under {shell})"
        )
    return [found, *rest]


def default_shell() -> str:
    """The shell tests run install.sh under unless they say: dash where it is installed (the
    strictest POSIX sh, and /bin/sh on Debian), else bash, else the system sh."""
    for shell in ("dash", "bash"):
        if find_tool(shell) is not None:
            return shell
    return "sh"


def default_hashers() -> tuple[str, ...]:
    """sha256sum where it exists (Linux), else macOS's shasum, else openssl."""
    for hasher in HASHERS:
        if find_tool(hasher) is not None:
            return (hasher,)
    return ()


def require_tool(tool: str) -> str:
    """The path of ``tool``; skips the calling test when it is not installed."""
    found = find_tool(tool)
    if found is None:
        pytest.skip(f"{tool} is not installed here")
    return found


def make_toolbox(
    dest: Path,
    *,
    downloader: str | None = "curl",
    hashers: Sequence[str] | None = None,
    minisign: bool = True,
    extra: Sequence[str] = (),
    optional: Sequence[str] = (),
    without: Sequence[str] = (),
    stubs: Mapping[str, str] | None = None,
) -> Path:
    """A directory to be the whole PATH: symlinks to the allowed tools, and stub scripts.

    ``downloader`` is ``"curl"``, ``"wget"`` (GNU), ``"busybox-wget"`` (a ``wget`` link to
    busybox, which then runs as its wget applet) or None. ``hashers`` defaults to
    :func:`default_hashers`. ``extra`` tools are required (the test is skipped without
    them); ``optional`` ones, like OPTIONAL_TOOLS, are linked when installed. ``stubs`` maps
    a name to the text of a ``sh`` script (it replaces a real tool of that name).
    """
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    if hashers is None:
        hashers = default_hashers()
    tools = [t for t in (*BASE_TOOLS, *hashers, *extra) if t not in without]
    for tool in (*OPTIONAL_TOOLS, *optional):
        if tool not in without and find_tool(tool) is not None:
            tools.append(tool)
    if minisign:
        tools.append("minisign")
    if downloader in ("curl", "wget"):
        tools.append(downloader)
    for tool in tools:
        if stubs and tool in stubs:
            continue
        link = dest / tool
        if not link.exists():
            link.symlink_to(require_tool(tool))
    if downloader == "busybox-wget":
        (dest / "wget").symlink_to(require_tool("busybox"))
    elif downloader not in (None, "curl", "wget"):
        raise ValueError(f"unknown downloader {downloader!r}")
    for name, body in (stubs or {}).items():
        path = dest / name
        if path.is_symlink() or path.exists():
            path.unlink()
        path.write_text("#!/bin/sh\n" + body, encoding="utf-8")
        path.chmod(0o755)
    return dest


def stub_printing(stdout: str = "", *, stderr: str = "", status: int = 0) -> str:
    """The body of a stub tool that prints fixed text and exits with ``status``."""
    lines = []
    if stdout:
        lines.append(f"printf '%s\\n' {_sh_quote(stdout)}")
    if stderr:
        lines.append(f"printf '%s\\n' {_sh_quote(stderr)} >&2")
    lines.append(f"exit {status}")
    return "\n".join(lines) + "\n"


def _sh_quote(text: str) -> str:
    return "'" + text.replace("'", "'\\''") + "'"


def run_install(
    script: Path,
    *,
    env: Mapping[str, str],
    shell: str | None = None,
    args: Sequence[str] = (),
    piped: bool = False,
    timeout: float = 120,
    cwd: Path | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run install.sh as ``<shell> install.sh ARGS`` or, piped, as ``cat install.sh | <shell> -s -- ARGS``
    (``cat install.sh | <shell>`` without arguments).

    ``shell`` is a key of SHELLS (default: :func:`default_shell`); the test is skipped when
    that shell is not installed.
    """
    command = shell_argv(shell or default_shell())
    stdin_data: bytes | None = Path(script).read_bytes() if piped else None
    if piped and args:
        if shell == "posh":
            pytest.skip("posh refuses -s, so `curl ... | posh -s -- ARGS` cannot be run")
        command += ["-s", "--", *args]
    elif not piped:
        command += [str(script), *args]
    completed = subprocess.run(
        command,
        env=dict(env),
        input=stdin_data,
        stdin=None if piped else subprocess.DEVNULL,
        capture_output=True,
        timeout=timeout,
        check=False,
        cwd=cwd,
    )
    return subprocess.CompletedProcess(
        completed.args,
        completed.returncode,
        completed.stdout.decode("utf-8", "replace"),
        completed.stderr.decode("utf-8", "replace"),
    )


def error_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("error:")]


Entry = tuple[str, ...]


def snapshot(root: Path) -> dict[str, Entry]:
    """Every path below ``root`` (relative) with its type, mode and content or link target."""
    root = Path(root)
    result: dict[str, Entry] = {}
    if not root.exists():
        return result
    for dirpath, dirnames, filenames in os.walk(root):
        for name in [*dirnames, *filenames]:
            path = Path(dirpath) / name
            relative = path.relative_to(root).as_posix()
            info = path.lstat()
            mode = oct(stat.S_IMODE(info.st_mode))
            if stat.S_ISLNK(info.st_mode):
                result[relative] = ("link", os.readlink(path))
            elif stat.S_ISDIR(info.st_mode):
                result[relative] = ("dir", mode)
            else:
                digest = hashlib.sha256(path.read_bytes()).hexdigest()
                result[relative] = ("file", mode, digest)
    return result


def changes_besides_the_lock(
    home: Path, before: Mapping[str, Entry], mux_home: str = ".local/share/mux"
) -> dict[str, tuple[Entry | None, Entry | None]]:
    """What changed under ``home`` since ``before`` (path: (before, after)), except the
    empty lock file ``<mux_home>/.lock`` and the folders holding it, which a run that took
    the lock leaves behind on purpose: the lock file is never removed (docs/contracts.md)."""
    after = snapshot(home)
    allowed = {f"{mux_home}/.lock"}
    parts = mux_home.split("/")
    allowed |= {"/".join(parts[:i]) for i in range(1, len(parts) + 1)}
    changed = {}
    for path in sorted(set(before) | set(after)):
        old, new = before.get(path), after.get(path)
        if old == new:
            continue
        if old is None and path in allowed:
            if path.endswith("/.lock") and new != ("file", "0o600", hashlib.sha256().hexdigest()):
                changed[path] = (old, new)  # the lock file holds nothing, and is private
            continue
        changed[path] = (old, new)
    return changed


def installed_target(link: Path) -> str:
    """Where ``<bin>/mux`` points."""
    return os.readlink(link)


# -- the network: TLS, a web server with redirects, a recording proxy ----------------------


@dataclass(frozen=True)
class TlsIdentity:
    """A self-signed certificate (its own CA) and its key, as PEM files."""

    cert: Path
    key: Path

    def client_env(self, dest: Path) -> dict[str, str]:
        """Environment making curl and GNU wget trust this certificate (and only it).

        curl honours ``CURL_CA_BUNDLE`` (and ``SSL_CERT_FILE`` with OpenSSL); GNU wget,
        built with GnuTLS on Debian, ignores both and reads ``ca_certificate`` from the
        ``WGETRC`` file.
        """
        wgetrc = Path(dest) / "wgetrc"
        wgetrc.write_text(f"ca_certificate = {self.cert}\n", encoding="utf-8")
        return {
            "CURL_CA_BUNDLE": str(self.cert),
            "SSL_CERT_FILE": str(self.cert),
            "WGETRC": str(wgetrc),
        }


def make_tls_identity(dest: Path, hosts: Sequence[str] = ()) -> TlsIdentity:
    """A certificate for 127.0.0.1, localhost and ``hosts``, valid for an hour."""
    import datetime
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "mux install.sh test")])
    now = datetime.datetime.now(datetime.UTC)
    names: list[x509.GeneralName] = [x509.DNSName(h) for h in ("localhost", *hosts)]
    names.append(x509.IPAddress(ipaddress.ip_address("127.0.0.1")))
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    identity = TlsIdentity(dest / "cert.pem", dest / "key.pem")
    identity.cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    identity.key.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return identity


@dataclass(frozen=True)
class SiteRequest:
    host: str
    path: str
    authorized: bool  # carried an Authorization header


@dataclass
class Site:
    """Files under ``root`` served over HTTP(S) on 127.0.0.1, with knobs.

    ``redirects`` maps a request path to the Location of a 302 (sent as written: absolute,
    relative, whatever the test wants). A path in ``stall`` gets its headers and half its
    body, then the connection is held until the client goes away (``client_left`` is set).
    ``after`` maps a path to another that must have been requested before it is answered.

    Hostile answers, each held until the client goes away (``client_left``), with what was
    sent counted in ``sent`` (bytes of body, by path):

    * ``endless`` maps a path to a status (200, 404...): a chunked body (HTTP/1.1) of
      well-formed chunks that never ends;
    * ``trickle`` maps a path to a delay: headers (with the real Content-Length) at once,
      then the file's bytes one at a time, a delay apart;
    * ``trickle_headers`` maps a path to a delay: the status line and headers themselves a
      byte at a time, a delay apart (the body never comes);
    * ``silent``: the connection is accepted and the request read, then nothing is sent;
    * ``reasons`` maps a path to (status, reason phrase): an error answer whose status line
      says that (a server's words end up in the download tools' messages).
    """

    root: Path
    redirects: dict[str, str] = field(default_factory=dict)
    stall: set[str] = field(default_factory=set)
    after: dict[str, str] = field(default_factory=dict)
    endless: dict[str, int] = field(default_factory=dict)
    trickle: dict[str, float] = field(default_factory=dict)
    trickle_headers: dict[str, float] = field(default_factory=dict)
    silent: set[str] = field(default_factory=set)
    reasons: dict[str, tuple[int, str]] = field(default_factory=dict)
    sent: dict[str, int] = field(default_factory=dict)
    requests: list[SiteRequest] = field(default_factory=list)
    client_left: threading.Event = field(default_factory=threading.Event)
    url: str = ""
    port: int = 0
    _seen: threading.Condition = field(default_factory=threading.Condition)
    _closing: threading.Event = field(default_factory=threading.Event)

    def paths(self) -> list[str]:
        return [r.path for r in self.requests]


def _site_handler(site: Site) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass

        def do_GET(self) -> None:
            path = urlsplit(self.path).path
            with site._seen:
                site.requests.append(
                    SiteRequest(self.headers.get("Host", ""), path, "Authorization" in self.headers)
                )
                site._seen.notify_all()
                if path in site.after:
                    site._seen.wait_for(lambda: site.after[path] in site.paths(), timeout=30)
            if path in site.endless:
                self._endless(path, site.endless[path])
                return
            if path in site.silent:
                self._hold(b"")
                return
            if path in site.trickle_headers:
                head = b"HTTP/1.0 200 OK\r\n" + b"X-Slow: " + b"x" * 4000 + b"\r\n\r\n"
                self._trickle(path, head, site.trickle_headers[path])
                return
            if path in site.reasons:
                status, reason = site.reasons[path]
                self.send_response(status, reason)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            if path in site.redirects:
                self.send_response(302)
                self.send_header("Location", site.redirects[path])
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            file = (site.root / path.lstrip("/")).resolve()
            if not file.is_file() or not file.is_relative_to(site.root.resolve()):
                self.send_error(404)
                return
            data = file.read_bytes()
            self.send_response(200)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            if path in site.trickle:
                self._trickle(path, data, site.trickle[path])
                return
            if path not in site.stall:
                self.wfile.write(data)
                return
            self.wfile.write(data[: len(data) // 2])
            self.wfile.flush()
            self._hold(b"")

        def _count(self, path: str, size: int) -> None:
            with site._seen:
                site.sent[path] = site.sent.get(path, 0) + size

        def _gone(self) -> bool:
            """True (and client_left set) once the client closed its end."""
            ready, _, _ = select.select([self.connection], [], [], 0)
            if ready:
                try:
                    chunk = self.connection.recv(1, socket.MSG_PEEK)
                except OSError:
                    chunk = b""
                if not chunk:
                    site.client_left.set()
                    return True
            return False

        def _hold(self, _: bytes) -> None:
            # Held until the client hangs up (or the test ends).
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and not site._closing.is_set():
                if self._gone():
                    return
                time.sleep(0.05)

        def _endless(self, path: str, status: int) -> None:
            self.protocol_version = "HTTP/1.1"
            self.send_response(status)
            self.send_header("Transfer-Encoding", "chunked")
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            chunk = b"[" + b"0," * 32767 + b"\n"
            frame = f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n"
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline and not site._closing.is_set():
                try:
                    self.wfile.write(frame)
                except OSError:
                    site.client_left.set()
                    return
                self._count(path, len(chunk))
            self.close_connection = True

        def _trickle(self, path: str, data: bytes, delay: float) -> None:
            for byte in data:
                if site._closing.is_set() or self._gone():
                    return
                try:
                    self.wfile.write(bytes([byte]))
                    self.wfile.flush()
                except OSError:
                    site.client_left.set()
                    return
                self._count(path, 1)
                site._closing.wait(delay)

    return Handler


@contextmanager
def serve_site(site: Site, *, tls: TlsIdentity | None = None) -> Iterator[Site]:
    """Serve ``site`` on 127.0.0.1 (over HTTPS with ``tls``); fills in its url and port."""
    context = None
    if tls is not None:
        import ssl

        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        context.load_cert_chain(tls.cert, tls.key)
    with serving(_site_handler(site), tls=context, handshake_on_connect=False) as server:
        site.port = int(server.server_address[1])
        site.url = url_of(server)
        try:
            yield site
        finally:
            site._closing.set()


@dataclass
class Proxy:
    """A loopback HTTP proxy that records every request line.

    Plain-http requests (``GET http://host/...``) are forwarded when the host is loopback
    and ``forward`` is on, else answered 502. Every ``CONNECT`` is tunnelled to
    ``tunnel_to`` whatever host it names (502 when it is None).
    """

    forward: bool = True
    tunnel_to: tuple[str, int] | None = None
    requests: list[tuple[str, str]] = field(default_factory=list)
    url: str = ""

    def gets(self) -> list[str]:
        return [target for method, target in self.requests if method == "GET"]

    def connects(self) -> list[str]:
        return [target for method, target in self.requests if method == "CONNECT"]


_HOP_BY_HOP = {"connection", "keep-alive", "proxy-connection", "transfer-encoding", "te"}


def _proxy_handler(proxy: Proxy) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass

        def do_CONNECT(self) -> None:
            proxy.requests.append(("CONNECT", self.path))
            if proxy.tunnel_to is None:
                self.send_error(502, "no tunnels here")
                return
            upstream = socket.create_connection(proxy.tunnel_to, timeout=30)
            self.send_response(200, "Connection Established")
            self.end_headers()
            self.close_connection = True
            pair = {self.connection: upstream, upstream: self.connection}
            with upstream:
                while True:
                    ready, _, _ = select.select(list(pair), [], [], 30)
                    if not ready:
                        return
                    for sock in ready:
                        data = sock.recv(65536)
                        if not data:
                            return
                        pair[sock].sendall(data)

        def do_GET(self) -> None:
            proxy.requests.append(("GET", self.path))
            target = urlsplit(self.path)
            if not proxy.forward or target.hostname not in ("127.0.0.1", "localhost"):
                self.send_error(502, "not forwarded")
                return
            import http.client

            upstream = http.client.HTTPConnection(target.hostname, target.port or 80, timeout=30)
            headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP_BY_HOP}
            path = target.path + (f"?{target.query}" if target.query else "")
            try:
                upstream.request("GET", path or "/", headers=headers)
                answer = upstream.getresponse()
                body = answer.read()
            finally:
                upstream.close()
            self.send_response(answer.status)
            for key, value in answer.getheaders():
                if key.lower() not in _HOP_BY_HOP | {"content-length", "server", "date"}:
                    self.send_header(key, value)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    return Handler


@contextmanager
def serve_proxy(proxy: Proxy) -> Iterator[Proxy]:
    """Run ``proxy`` on 127.0.0.1; fills in its url (``http://127.0.0.1:<port>``)."""
    with serving(_proxy_handler(proxy)) as server:
        proxy.url = url_of(server)
        yield proxy


@pytest.fixture
def tmp_path(tmp_path: Path) -> Iterator[Path]:
    """pytest's tmp_path, or (where there is one) a fresh folder on a RAM file system,
    removed after the test; every fixture of the test (sandbox_env's HOME too) uses it.

    install.sh's behaviour does not depend on the file system; its cost does: a fresh
    install and a second run cost about 8% less CPU on tmpfs than on ext4 here."""
    ram = ram_dir()
    if ram is None:
        yield tmp_path
        return
    path = Path(tempfile.mkdtemp(prefix="mux-installsh-", dir=ram))
    try:
        yield path
    finally:
        _remove_tree(path)


def _remove_tree(path: Path) -> None:
    """rm -rf, even through the read-only folders a test left: pytest does not clean this
    folder, and what stays in it holds memory."""

    def writable_then_retry(function: Any, name: str, _: Any) -> None:
        with contextlib.suppress(OSError):
            os.chmod(os.path.dirname(name), 0o700)
            if not os.path.islink(name) and os.path.isdir(name):
                os.chmod(name, 0o700)
            function(name)

    shutil.rmtree(path, onerror=writable_then_retry)
    if path.exists():
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="module")
def library(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """install.sh without its last line (the call of main): its functions, to source."""
    lines = INSTALL_SH.read_text().rstrip("\n").splitlines()
    assert lines[-1].startswith("{ main ")
    path = tmp_path_factory.mktemp("lib") / "install-lib.sh"
    path.write_text("\n".join(lines[:-1]) + "\n")
    return path


def call(library: Path, code: str, stdin: str = "", *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*shell_argv("dash"), "-c", f'. "$0"; {code}', str(library), *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.fixture
def feed_url(feed: Feed) -> Iterator[str]:
    with serve_directory(feed.path) as url:
        yield url


@pytest.fixture
def policy_path(tmp_path: Path) -> Path:
    return tmp_path / "root" / "etc" / "mux" / "policy.toml"


@pytest.fixture
def script(tmp_path: Path, feed: Feed, policy_path: Path) -> Path:
    return render_install_sh(
        tmp_path / "install.sh", keys=[feed.keypair.public_key], policy_file=str(policy_path)
    )


@pytest.fixture
def env(sandbox_env: dict[str, str], tmp_path: Path, feed_url: str) -> dict[str, str]:
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    return {
        **{k: v for k, v in sandbox_env.items() if not k.startswith("MUX_")},
        "PATH": str(make_toolbox(tmp_path / "tools")),
        "MUX_DOWNLOAD_URL": feed_url,
        "SHELL": "/bin/sh",
        "TMPDIR": str(scratch),
    }
