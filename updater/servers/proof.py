"""How a request to a loopback port proves this user, and how the answer proves the server.

A loopback port is shared by every user of the machine: another user may listen on the port
of this user's server. Before a byte is sent, the kernel is asked who owns the connection
(:mod:`updater.servers.owner`); this user's server gets the secret it wrote
(:func:`updater.servers.runtime.read_tcp_secret`) as ``Authorization: Bearer <secret>``.
Where the kernel does not say, the secret never leaves: the request carries an HMAC of a
fresh nonce under it and the answer must carry the server's (:class:`Proof`). A listener
that fails either is :class:`NotYours`. The server side (:mod:`updater.daemon.server`) checks
the same headers with :func:`proof_mac`.

On the fast path of ``mux update --check --max-age`` (:mod:`updater.servers.status`):
standard library only, the kernel's tables and ``hmac`` only for a loopback port.
"""

from __future__ import annotations

import os

from updater.errors import MuxError
from updater.servers.addresses import TcpAddress, connect_host
from updater.servers.runtime import SECRET_SUFFIX, read_tcp_secret, tcp_secret_path

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing on the fast path
if TYPE_CHECKING:
    import _socket

    from updater.servers.addresses import ServerAddress

AUTHORIZATION = "Authorization"  # the header that carries it: "Bearer <secret>"


# Where the kernel does not name a listener's owner: the client's HMAC of a fresh nonce
# ("Authorization: Mux-Proof <nonce> <mac>"), and the server's answer to it (Proof).
PROOF_SCHEME = "Mux-Proof"
CHALLENGE_HEADER = "X-Mux-Challenge"  # the nonce the server must prove it can sign
PROOF_HEADER = "X-Mux-Proof"  # the server's HMAC of that nonce
CLIENT_LABEL = "mux-client"
SERVER_LABEL = "mux-server"


class NotYours(Exception):
    """A loopback listener that is not this user's server: the kernel says another user owns
    it (``uid``), or it could not prove it holds this user's secret (``uid`` None)."""

    def __init__(self, address: TcpAddress, uid: int | None) -> None:
        self.address = address
        self.uid = uid
        super().__init__(not_yours_detail(address, uid))


def not_yours_detail(address: TcpAddress, uid: int | None) -> str:
    """Why a listener is not this user's server, with who holds the port where visible."""
    from updater.servers import owner  # deferred: this module is on a fast path (docs/build.md)

    if uid is not None:
        holders = owner.listeners(connect_host(address), address.port) or []
        theirs = [h for h in holders if h.uid == uid] or [owner.Listener(uid, 0, ())]
        return f"not your server: the port is held by {owner.describe(theirs)}"
    return "not your server: it could not prove that it holds your server's secret"


class Proof:
    """How a request to a loopback port proves this user, and how the answer proves the
    server (docs/threat-model.md, "Another user on the port of your server").

    On Linux the kernel names the owner of the connection just made
    (:func:`updater.servers.owner.connection_owner`): another user's is refused before a byte
    is sent; this user's gets the secret itself (``Bearer``, which every server version
    takes). Where the kernel does not say, the secret never leaves: the request carries an
    HMAC of a fresh nonce, the method and the path under it, and the answer must carry the
    server's HMAC of the same nonce (:data:`PROOF_HEADER`), else the listener is not yours.
    """

    def __init__(self, headers: dict[str, str], expected: str | None) -> None:
        self.headers = headers
        self._expected = expected  # the server's proof the answer must carry; None: the kernel said

    @property
    def lines(self) -> str:
        return "".join(f"{name}: {value}\r\n" for name, value in self.headers.items())

    @classmethod
    def for_connection(
        cls, address: ServerAddress, sock: _socket.socket, method: str, path: str
    ) -> Proof | None:
        if not isinstance(address, TcpAddress):
            return None  # a Unix socket lives in this user's private folder
        from updater.servers import owner  # deferred: this module is on a fast path

        uid = owner.connection_owner(sock)
        if uid is not None and uid != os.geteuid():
            raise NotYours(address, uid)
        secret = read_tcp_secret(address.port)
        if secret is None:  # the server will refuse; unproven, it is not yours either
            return cls({}, None if uid is not None else "")
        nonce = os.urandom(16).hex()
        if uid is not None:
            return cls({CHALLENGE_HEADER: nonce, AUTHORIZATION: f"Bearer {secret}"}, None)
        mac = proof_mac(secret, CLIENT_LABEL, nonce, method, path)
        headers = {CHALLENGE_HEADER: nonce, AUTHORIZATION: f"{PROOF_SCHEME} {nonce} {mac}"}
        return cls(headers, proof_mac(secret, SERVER_LABEL, nonce))

    def check(self, address: ServerAddress, given: str | None) -> None:
        """Raise :class:`NotYours` unless the answer proved the server (where it must)."""
        if self._expected is None:
            return
        import hmac  # deferred: only where the kernel does not name the owner

        if not self._expected or not hmac.compare_digest(
            (given or "").encode(), self._expected.encode()
        ):
            assert isinstance(address, TcpAddress)
            raise NotYours(address, None)


def proof_mac(secret: str, label: str, nonce: str, *words: str) -> str:
    """HMAC-SHA256 under ``secret`` of ``label``, ``nonce`` and ``words``, one per line: the
    client's (:data:`CLIENT_LABEL`, with the method and path) and the server's
    (:data:`SERVER_LABEL`) are made with different labels, so neither stands in for the other."""
    import hashlib  # deferred: only a loopback server's requests
    import hmac

    message = "\n".join((label, nonce, *words)).encode("ascii", "replace")
    return hmac.new(secret.encode("ascii"), message, hashlib.sha256).hexdigest()


def refused_detail(target: TcpAddress, code: int, path: str) -> str:
    """Why a loopback server refused a request: it answers only its owner."""
    try:
        where = tcp_secret_path(target.port)
    except MuxError:
        where = f"tcp-{target.port}{SECRET_SUFFIX} in the runtime dir"
    return (
        f"HTTP {code} for {path}: the server answers only the user who started it, whose "
        f"secret is in {where}"
    )
