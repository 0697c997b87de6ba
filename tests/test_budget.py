"""updater.net.budget: how much a stream reads of what has arrived."""

from __future__ import annotations

import os


def test_a_plain_connection_reads_what_has_arrived_at_once_a_tls_one_as_httpcore_asks() -> None:
    """httpcore asks for 64 KiB; mux's plain streams take up to 1 MiB of what has arrived (a
    download passes fewer blocks through h11 and httpx), TLS streams keep httpcore's size."""
    import socket
    import tempfile

    import httpcore

    from updater.net import budget

    arrived = bytes(range(256)) * 600  # 150 KiB: more than httpcore asks for, less than 1 MiB
    with tempfile.TemporaryDirectory(prefix="mux-read-", dir="/tmp") as folder:
        path = os.path.join(folder, "s")
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as listener:
            listener.bind(path)
            listener.listen(2)
            for tls, expected in ((False, arrived), (True, arrived[: 64 * 1024])):
                plain = httpcore.SyncBackend().connect_unix_socket(path, timeout=5)
                peer, _ = listener.accept()
                with peer:
                    peer.sendall(arrived)  # queued at the reader before it reads
                    stream = budget.BudgetedStream(plain, budget.Budgets(), tls=tls)
                    assert stream.read(64 * 1024, timeout=5) == expected
                    stream.close()
