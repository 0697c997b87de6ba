"""Programs that take a loopback port, for the tests (and the bench) of what another user of
the machine can do there: run each with ``python -c <script> ARGS``, as another uid through
``setpriv`` (:mod:`tests.support.users`) or as this user."""

from __future__ import annotations

# Binds the port (argv[1]) the moment it is free, in every way a socket can, and listens
# there; says how many times it got it when its standard input closes.
SQUATTER = r"""
import socket, sys, threading
port = int(sys.argv[1])
got = []
done = threading.Event()
threading.Thread(target=lambda: (sys.stdin.read(), done.set()), daemon=True).start()
print("trying", flush=True)
while not done.is_set():
    for reuseaddr, reuseport in ((0, 0), (1, 0), (1, 1), (0, 1)):
        s = socket.socket()
        try:
            if reuseaddr:
                s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if reuseport:
                s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
            s.bind(("127.0.0.1", port))
            s.listen(1)
            got.append(s)
        except OSError:
            s.close()
print(len(got), flush=True)
"""

# Answers on the port (argv[1]) as a mux server of protocol argv[2] would, its status line
# naming argv[3] as its executable (none when empty), shares its port with no one (as a
# server of an older mux), and on a shutdown request does argv[4]: "exit", or "hold" (stops
# listening but keeps the port bound, so that nothing else can listen there, until its
# standard input closes).
STATUS_SERVER = r"""
import json, os, socket, sys
port, protocol, executable, on_shutdown = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
listener = socket.socket()
listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
listener.bind(("127.0.0.1", port))
listener.listen(16)
print("listening", flush=True)
status = {"service": "mux", "protocol_version": protocol, "version": "0.0.1",
          "pid": os.getpid(), "started_at": "2026-12-01T00:00:00Z"}
if executable:
    status["executable"] = executable
body = json.dumps(status).encode()
while True:
    connection, _ = listener.accept()
    request = connection.recv(65536)
    if request.startswith(b"POST /api/shutdown"):
        connection.sendall(b"HTTP/1.0 202 Accepted\r\nContent-Length: 2\r\n\r\n{}")
        connection.close()
        if on_shutdown == "exit":
            break
        listener.close()
        held = socket.socket()  # no SO_REUSEADDR: a new server's bind fails
        held.bind(("127.0.0.1", port))
        print("bound", flush=True)
        sys.stdin.read()
        break
    head = b"HTTP/1.0 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n"
    connection.sendall(head % len(body) + body)
    connection.close()
"""
