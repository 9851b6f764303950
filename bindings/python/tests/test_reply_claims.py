"""A reply whose header claims more than any reply xfetch reads (a proxy, a
corrupted stream, anyone answering on the port) is an error on both faces,
not an allocation: the sync face's connection and xfetch.aio's stream read
through the same C reader (src/link/reader.c)."""
import socket
import threading

import pytest

import xfetch


def vm_peak_kb():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmPeak:"):
                return int(line.split()[1])
    return 0


class Liar:
    """A server on a free loopback port that answers whatever it is sent
    with `answer`, then keeps the connection open."""

    def __init__(self, answer):
        self.answer = answer
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.port = self.sock.getsockname()[1]
        self.conns = []
        self.threads = [threading.Thread(target=self._serve)]
        self.threads[0].start()

    def _serve(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.conns.append(conn)
            t = threading.Thread(target=self._answer, args=(conn,))
            self.threads.append(t)
            t.start()

    def _answer(self, conn):
        try:
            if conn.recv(65536):
                conn.sendall(self.answer)
            while conn.recv(65536):
                pass
        except OSError:
            pass

    def close(self):
        """Stops accepting and ends every connection; joins its threads."""
        self.sock.shutdown(socket.SHUT_RDWR)  # wakes accept()
        for c in self.conns:
            c.shutdown(socket.SHUT_RDWR)  # wakes recv()
        for t in self.threads:
            t.join(10)
        self.sock.close()
        for c in self.conns:
            c.close()


@pytest.mark.parametrize("answer", [b"*724527565\r\n", b"*1\r\n*2147483647\r\n"],
                         ids=["claim", "nested"])
def test_an_array_claim_past_any_reply_is_an_error_not_an_allocation(face, answer):
    liar = Liar(answer)
    before = vm_peak_kb()
    try:
        with pytest.raises(xfetch.Error) as info:
            cache = face.Cache(f"redis://127.0.0.1:{liar.port}/0", timeout=2.0)
            face.run(cache.set("k", b"v", ttl=60))
            face.run(cache.close())
        assert "Protocol error: a reply claims" in str(info.value)
    finally:
        liar.close()
    grown_mb = (vm_peak_kb() - before) / 1024
    assert grown_mb < 512, f"the process' peak grew {grown_mb:.0f} MB"  # 5.8 GB before


def test_get_or_compute_fails_open_past_such_a_reply(face):
    liar = Liar(b"*724527565\r\n")
    try:
        cache = face.Cache(f"redis://127.0.0.1:{liar.port}/0", timeout=2.0, lazy_connect=True)
        loader = face.loader(lambda: b"loaded")
        assert face.run(cache.get_or_compute("k", loader, ttl=60)) == b"loaded"
    finally:
        liar.close()
