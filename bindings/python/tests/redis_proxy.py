"""A TCP proxy to a redis-server for tests that need to act between a
client's bytes and the server: each client connection gets its own server
connection, and upstream(data, first) runs before a client's bytes are
passed on (first: the connection's first bytes)."""
import socket
import threading


class RedisProxy:
    def __init__(self, port, upstream=None):
        self.target = port
        self.upstream = upstream
        self.lsock = socket.socket()
        self.lsock.bind(("127.0.0.1", 0))
        self.lsock.listen(16)
        self.port = self.lsock.getsockname()[1]
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.socks = []  # every connection's two sockets, shut at close()
        self.threads = [threading.Thread(target=self._accept, daemon=True)]
        self.threads[0].start()

    def _accept(self):
        while True:
            try:
                client, _ = self.lsock.accept()
            except OSError:
                return
            server = socket.create_connection(("127.0.0.1", self.target))
            self.socks += [client, server]
            for args in ((client, server, True), (server, client, False)):
                t = threading.Thread(target=self._pipe, args=args, daemon=True)
                self.threads.append(t)
                t.start()

    def _pipe(self, src, dst, from_client):
        first = from_client
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                if from_client and self.upstream:
                    self.upstream(data, first)
                first = False
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def close(self):
        """Ends every thread: accept() and recv() return once their socket is
        shut down (close() alone would leave them blocked)."""
        for s in [self.lsock] + self.socks:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        for t in list(self.threads):
            t.join(5)
        self.lsock.close()
        for s in self.socks:
            s.close()
