"""Who owns a loopback TCP socket, as the kernel says (Linux: ``/proc/net/tcp`` and ``tcp6``).

A loopback port is anyone's to take: another user of the machine can listen on the port of
this user's server the moment it is free, and answer as it likes. So before mux sends its
secret to a listener, believes its status line, stops it or restarts it, it asks the kernel
who owns the *connection it just made*: the server side of an accepted (or still queued)
connection carries the uid of the listening socket it came from, so the answer is about that
very connection, not about whoever listened a moment before. The same tables name every
socket listening on a port (:func:`listeners`), with its uid and inode, for saying who holds
an address and for a server to find out whether it listens alone.

Elsewhere (macOS, the BSDs) the kernel is not asked here: the server proves itself with an
HMAC of a fresh nonce under the owner's secret instead (:mod:`updater.servers.proof`).

This module is on the status query's path: standard library only, nothing imported at the
top beyond ``os``. The tables are read bounded (:data:`MAX_TABLE_BYTES`), a line at a time,
and a line that cannot be read is skipped, never believed.
"""

from __future__ import annotations

import os

from updater._records import NamedTuple

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing on the fast path
if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator

TABLES = {2: "/proc/net/tcp", 10: "/proc/net/tcp6"}  # by address family (AF_INET, AF_INET6)
MAX_TABLE_BYTES = 64 * 1024 * 1024  # about 400,000 sockets: past that, the kernel is not asked
LISTEN = "0A"  # the TCP_LISTEN state as the tables write it
# A connection's server side carries its listener's uid while established (accepted or still
# queued: inode 0) or half-open; later states (closing, TIME_WAIT) belong to no process.
CONNECTED = frozenset({"01", "03"})  # ESTABLISHED, SYN_RECV


class Entry(NamedTuple):
    """One line of a ``/proc/net/tcp*`` table: the socket's local and remote ``(address hex,
    port)``, its state, its owner's uid and its inode (0 for a connection not yet accepted)."""

    local: tuple[str, int]
    remote: tuple[str, int]
    state: str
    uid: int
    inode: int


class Listener(NamedTuple):
    """A socket listening on a port: its owner and inode, and the pids that hold it (those
    this process may see: its own user's, or every one for root)."""

    uid: int
    inode: int
    pids: tuple[int, ...]


def parse_entry(line: str) -> Entry | None:
    """One table line, or None for the header or a line that cannot be read."""
    fields = line.split()
    if len(fields) < 10 or ":" not in fields[1] or ":" not in fields[2]:
        return None
    try:
        local_host, local_port = fields[1].rsplit(":", 1)
        remote_host, remote_port = fields[2].rsplit(":", 1)
        return Entry(
            (local_host.upper(), int(local_port, 16)),
            (remote_host.upper(), int(remote_port, 16)),
            fields[3].upper(),
            int(fields[7]),
            int(fields[9]),
        )
    except ValueError:
        return None


def address_hex(family: int, host: str) -> str:
    """``host`` as the tables write it: the address's bytes in the kernel's native order,
    32-bit word by word (``127.0.0.1`` is ``0100007F`` on a little-endian machine)."""
    import socket  # deferred: only a TCP server's owner is asked (module docstring)
    import sys

    packed = socket.inet_pton(family, host)
    words = [packed[i : i + 4] for i in range(0, len(packed), 4)]
    if sys.byteorder == "little":
        words = [word[::-1] for word in words]
    return b"".join(words).hex().upper()


def _entries(family: int, needle: str = "") -> Iterator[Entry]:
    """The table's entries, only those whose line holds ``needle`` (a busy machine's table
    has thousands of lines: matching text first is 10 times faster than reading each)."""
    path = TABLES.get(family)
    if path is None:
        return
    read = 0
    try:
        with open(path, encoding="ascii", errors="replace") as table:
            for line in table:
                read += len(line)
                if read > MAX_TABLE_BYTES:
                    return
                if needle in line and (entry := parse_entry(line)) is not None:
                    yield entry
    except OSError:
        return


def connection_owner(sock: object) -> int | None:
    """The uid that owns the server side of the connected TCP socket ``sock``: the owner of
    the socket that listened for it. None when the kernel does not say (not Linux, no
    ``/proc``, the connection already gone)."""
    try:
        family = sock.family  # type: ignore[attr-defined]
        mine = sock.getsockname()  # type: ignore[attr-defined]
        theirs = sock.getpeername()  # type: ignore[attr-defined]
    except (AttributeError, OSError):
        return None
    local = (address_hex(family, theirs[0]), int(theirs[1]))
    remote = (address_hex(family, mine[0]), int(mine[1]))
    found = owner_of(_entries(int(family), _pair(local, remote)), local=local, remote=remote)
    if found is None and int(family) == 2:
        # An IPv6 socket on the wildcard takes IPv4 connections too: its side of this one is
        # in the IPv6 table, under the IPv4-mapped addresses.
        local = (address_hex(10, f"::ffff:{theirs[0]}"), int(theirs[1]))
        remote = (address_hex(10, f"::ffff:{mine[0]}"), int(mine[1]))
        found = owner_of(_entries(10, _pair(local, remote)), local=local, remote=remote)
    return found


def _pair(local: tuple[str, int], remote: tuple[str, int]) -> str:
    return f"{local[0]}:{local[1]:04X} {remote[0]}:{remote[1]:04X}"


def owner_of(
    entries: Iterable[Entry], *, local: tuple[str, int], remote: tuple[str, int]
) -> int | None:
    """The uid of the entry whose local end is ``local`` and remote end ``remote``, while it
    is a live connection (:data:`CONNECTED`). Once its server has closed it, the kernel keeps
    the entry a while for no process (uid 0, no inode): that says nothing of who listened."""
    for entry in entries:
        if entry.local == local and entry.remote == remote:
            return entry.uid if entry.state in CONNECTED else None
    return None


def listeners(host: str, port: int, *, with_pids: bool = True) -> list[Listener] | None:
    """Every socket listening on ``port`` that takes connections to ``host`` (its own address,
    or the wildcard of its family); None when the kernel does not say. ``with_pids`` looks
    for the processes that hold them (every readable ``/proc/*/fd``: the costly part)."""
    import socket  # deferred: see address_hex

    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    if not os.path.exists(TABLES[int(family)]):
        return None
    wanted = {address_hex(family, host), address_hex(family, "::" if ":" in host else "0.0.0.0")}
    found = listening_on(_entries(int(family), f":{port:04X} "), wanted, port)
    pids = socket_pids({entry.inode for entry in found}) if with_pids else {}
    return [Listener(entry.uid, entry.inode, pids.get(entry.inode, ())) for entry in found]


def crowd(host: str, port: int) -> dict[int, int]:
    """Other users' live connections to ``host``:``port``, counted by uid: what may have
    kept a server there from answering (its queue full of them)."""
    import socket  # deferred: see address_hex

    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    server = (address_hex(family, host), port)
    counts: dict[int, int] = {}
    for entry in _entries(int(family), f"{server[0]}:{port:04X} "):
        if entry.remote == server and entry.state in CONNECTED and entry.uid != os.geteuid():
            counts[entry.uid] = counts.get(entry.uid, 0) + 1
    return counts


def listening_on(entries: Iterable[Entry], hosts: set[str], port: int) -> list[Entry]:
    return [e for e in entries if e.state == LISTEN and e.local[1] == port and e.local[0] in hosts]


def holds(pid: int, inodes: set[int]) -> bool:
    """Does process ``pid`` hold one of the socket ``inodes``? (Only that process is read.)"""
    wanted = {f"socket:[{inode}]" for inode in inodes}
    try:
        names = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return False
    for name in names:
        try:
            if os.readlink(f"/proc/{pid}/fd/{name}") in wanted:
                return True
        except OSError:
            continue
    return False


def socket_pids(inodes: set[int]) -> dict[int, tuple[int, ...]]:
    """The processes holding each socket inode, among those whose descriptors this process
    may read (its own user's; every one for root)."""
    found: dict[int, list[int]] = {}
    if not inodes:
        return {}
    wanted = {f"socket:[{inode}]": inode for inode in inodes}
    try:
        pids = [int(name) for name in os.listdir("/proc") if name.isdigit()]
    except OSError:
        return {}
    for pid in pids:
        try:
            names = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue  # gone, or another user's
        for name in names:
            try:
                inode = wanted.get(os.readlink(f"/proc/{pid}/fd/{name}"))
            except OSError:
                continue
            if inode is not None and pid not in found.setdefault(inode, []):
                found[inode].append(pid)
    return {inode: tuple(sorted(pids)) for inode, pids in found.items()}


def describe(holders: list[Listener]) -> str:
    """Who holds an address, in a few words: ``uid 1501 (pid 4242)``."""
    parts = []
    for holder in holders:
        pids = ", ".join(str(pid) for pid in holder.pids)
        parts.append(f"uid {holder.uid}" + (f" (pid {pids})" if pids else ""))
    return "; ".join(parts) if parts else "a socket the kernel does not name"
