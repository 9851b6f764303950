#!/usr/bin/env python3
"""Regenerates the seed corpus in tests/fuzz/corpus/ (see README.md).

reply/: raw RESP replies captured from a real redis-server (started here on a
free loopback port in a temp dir, no persistence) running the lua/ scripts
against entries set up for each case, plus hand-written edge cases and the
regression inputs of the bugs the fuzzer found. options/ and resp/: inputs
built in the layout the harnesses read (fuzz.c's fuzz_* readers).

Usage: python3 tests/fuzz/make_seeds.py   (needs redis-server; stdlib only)
"""
import os
import shutil
import socket
import struct
import subprocess
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
CORPUS = os.path.join(HERE, "corpus")


def encode(*args):
    out = b"*%d\r\n" % len(args)
    for a in args:
        a = a if isinstance(a, bytes) else str(a).encode()
        out += b"$%d\r\n%s\r\n" % (len(a), a)
    return out


class Conn:
    """A raw RESP connection that returns each reply's exact bytes."""

    def __init__(self, port):
        self.s = socket.create_connection(("127.0.0.1", port))
        self.buf = b""

    def _line(self, at):
        while True:
            end = self.buf.find(b"\r\n", at)
            if end >= 0:
                return end
            self.buf += self.s.recv(65536)

    def _skip(self, at):  # returns the offset just past one reply
        end = self._line(at)
        kind, head = self.buf[at:at + 1], self.buf[at + 1:end]
        at = end + 2
        if kind == b"$" and int(head) >= 0:
            while len(self.buf) < at + int(head) + 2:
                self.buf += self.s.recv(65536)
            return at + int(head) + 2
        if kind == b"*" and int(head) > 0:
            for _ in range(int(head)):
                at = self._skip(at)
        return at

    def call(self, *args):
        self.s.sendall(encode(*args))
        end = self._skip(0)
        raw, self.buf = self.buf[:end], self.buf[end:]
        return raw


def lua(name):
    """A script as the library embeds it: "--#include x.lua" lines replaced by
    the file (cmake/embed_lua.cmake)."""
    with open(os.path.join(ROOT, "lua", name + ".lua"), "rb") as f:
        text = f.read()
    out = b""
    for line in text.splitlines(keepends=True):
        if line.startswith(b"--#include "):
            out += lua(line.split()[1].decode()[:-len(".lua")])
        else:
            out += line
    return out


def capture():
    """Runs each script in the states that give each of its replies."""
    seeds = {}
    tmp = tempfile.mkdtemp(prefix="xfetch-seeds-")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    srv = subprocess.Popen(["redis-server", "--port", str(port), "--bind", "127.0.0.1",
                            "--dir", tmp, "--save", "", "--appendonly", "no"],
                           stdout=subprocess.DEVNULL)
    try:
        for _ in range(100):
            try:
                c = Conn(port)
                break
            except OSError:
                time.sleep(0.05)
        r = lambda *a: c.call(*a)  # noqa: E731
        read = lambda k: r("EVAL", lua("read"), 1, k)  # noqa: E731
        lease = lambda k, tok, seen=0: r("EVAL", lua("lease"), 1, k, tok, 5000, seen)  # noqa
        now = int(time.time() * 1000)

        seeds["read-miss"] = read("k:none")
        r("HSET", "k:fresh", "v", "hello", "d", 2500, "e", now + 60000, "s", now)
        seeds["read-fresh"] = read("k:fresh")
        r("HSET", "k:stale", "v", "old", "d", 10, "e", now - 5000, "s", now - 65000)
        seeds["read-stale"] = read("k:stale")
        r("HSET", "k:leased", "v", "x", "d", 1, "e", now + 1000, "l", "tok:%d" % (now + 9000))
        seeds["read-lease-live"] = read("k:leased")
        r("HSET", "k:neg", "v", "", "d", 0, "e", now + 1000, "n", "1")
        seeds["read-negative"] = read("k:neg")
        r("HSET", "k:nan", "v", "x", "d", "abc", "e", "nan")
        seeds["read-malformed-e"] = read("k:nan")
        r("HSET", "k:hugedelta", "v", "x", "d", "1e300", "e", now + 1000)
        seeds["read-huge-delta"] = read("k:hugedelta")
        # Malformed entries (one bad field each): read.lua's malformed miss.
        for name, field, bad in [("e-negative", "e", "-1"), ("d-negative", "d", "-5"),
                                 ("d-exponent", "d", "1e3"), ("s-future", "s", now + 10**12),
                                 ("l-garbage", "l", "garbage"),
                                 ("l-far", "l", "tok:99999999999999999999"), ("n-0", "n", "0")]:
            k = "k:bad-" + name
            r("HSET", k, "v", "x", "d", 1, "e", now + 1000, "s", now)
            r("HSET", k, field, bad)
            seeds["read-malformed-" + name] = read(k)
        seeds["lease-over-malformed-lease"] = lease("k:bad-l-garbage", "t9")
        r("HSET", "k:bin", "v", b"\x00\r\n$5\r\n*1\xff", "d", 7, "e", now + 1000)
        seeds["read-binary-value"] = read("k:bin")

        seeds["lease-won"] = lease("k:cold", "t1")
        seeds["lease-lost"] = lease("k:cold", "t2")
        seeds["lease-won-again"] = lease("k:cold", "t1")
        seeds["lease-newer"] = lease("k:fresh", "t3", 0)

        w = lambda k, tok, start: r("EVAL", lua("write"), 1, k, tok, "val", 1500,  # noqa
                                    60000, 0, start, "0")
        seeds["write-written"] = w("k:w", "", now)
        seeds["write-refused"] = w("k:w", "", now - 100000)
        r("HSET", "k:w", "s", now + 10**12)  # a malformed s refuses nothing
        seeds["write-over-malformed-s"] = w("k:w", "", now - 100000)
        rel = lambda k, tok: r("EVAL", lua("release"), 1, k, tok)  # noqa: E731
        seeds["release-released"] = rel("k:cold", "t1")
        seeds["release-not-mine"] = rel("k:cold", "t1")
        # A load that found nothing, not cached: the release leaves its marker f,
        # which the read shows and the lease answers a caller that came before.
        lease("k:nothing", "t5")
        r("EVAL", lua("release"), 1, "k:nothing", "t5", 5000)
        seeds["read-nothing"] = read("k:nothing")
        seeds["lease-nothing"] = r("EVAL", lua("lease"), 1, "k:nothing", "t6", 5000, 0, 1, "1")
        seeds["delete"] = r("EVAL", lua("delete"), 1, "k:fresh", 60000)
        r("SET", "k:string", "x")
        seeds["error-wrongtype"] = read("k:string")
        seeds["error-noscript"] = r("EVALSHA", "0" * 40, 1, "k")
        many = lambda *ks: r("EVAL", lua("read_many"), len(ks), *ks)  # noqa: E731
        seeds["read-many"] = many("k:none", "k:fresh", "k:stale", "k:neg")
        seeds["read-many-wrongtype"] = many("k:fresh", "k:string", "k:bin")
    finally:
        srv.terminate()
        srv.wait()
        shutil.rmtree(tmp, ignore_errors=True)
    return seeds


TAG_RECORD = b"\x01\x00\x00\x00\x07" + b"\x00" * 7 + b"\x05"  # 1 tag, its hash, version 5


def handwritten_replies():
    big = 1 << 41
    return {
        # Regressions: replies the parsers used to accept (README.md).
        "bug-write-2": b":2\r\n",
        "bug-write-2pow32": b":4294967296\r\n",
        "bug-lease-result-7": b"*2\r\n:7\r\n:1700000000000\r\n",
        "bug-lease-now-negative": b"*2\r\n:1\r\n:-5\r\n",
        "bug-lease-newer-nil": b"*10\r\n:2\r\n:100\r\n$-1\r\n:0\r\n:0\r\n:0\r\n:0\r\n:0\r\n:100\r\n$0\r\n\r\n",
        "bug-read-lease-live-5": b"*8\r\n$1\r\nx\r\n:0\r\n:10\r\n:5\r\n:0\r\n:110\r\n:100\r\n$0\r\n\r\n",
        "bug-read-remaining-disagrees":
            b"*8\r\n$1\r\nx\r\n:0\r\n:999\r\n:0\r\n:0\r\n:110\r\n:100\r\n$0\r\n\r\n",
        # Headers claiming more than arrived: a protocol error past what any
        # reply holds, else memory only for what came (src/link/reader.c).
        "bug-claim-724527565": b"*724527565\r\n",
        "bug-claim-after-bulk": b"$1\r\nxyz*724527565\r\n",
        "bug-claim-nested": b"*1\r\n*724527565\r\n",
        "bug-claim-int-max": b"*2147483647\r\n",
        "bug-claim-max-plus-1": b"*1048577\r\n",
        "bug-claim-max-partial": b"*1048576\r\n:1\r\n$3\r\nabc\r\n",
        "bug-bulk-512mb": b"$536870912\r\nabc",
        # Right shape, values no entry has: a malformed miss, never EPROTO.
        "malformed-delta-negative": b"*8\r\n$1\r\nx\r\n:-1\r\n:10\r\n:0\r\n:0\r\n:110\r\n:0\r\n$0\r\n\r\n",
        "malformed-expiry-negative": b"*8\r\n$1\r\nx\r\n:1\r\n:10\r\n:0\r\n:0\r\n:-1\r\n:0\r\n$0\r\n\r\n",
        "malformed-remaining-int64-min":
            b"*8\r\n$1\r\nx\r\n:1\r\n:-9223372036854775808\r\n:0\r\n:0\r\n:5\r\n:0\r\n$0\r\n\r\n",
        "malformed-live-7": b"*8\r\n$1\r\nx\r\n:1\r\n:10\r\n:7\r\n:0\r\n:110\r\n:0\r\n$0\r\n\r\n",
        "malformed-negative-2": b"*8\r\n$1\r\nx\r\n:1\r\n:10\r\n:1\r\n:2\r\n:110\r\n:0\r\n$0\r\n\r\n",
        "malformed-miss-with-times": b"*8\r\n$-1\r\n:5\r\n:10\r\n:0\r\n:0\r\n:110\r\n:0\r\n$0\r\n\r\n",
        "malformed-miss-flagged": b"*8\r\n$-1\r\n:0\r\n:0\r\n:1\r\n:1\r\n:110\r\n:0\r\n$0\r\n\r\n",
        # A tag record (the eighth field): an entry's versions, opaque here.
        "read-tagged": b"*8\r\n$1\r\nx\r\n:0\r\n:10\r\n:0\r\n:0\r\n:110\r\n:0\r\n$13\r\n"
                       + TAG_RECORD + b"\r\n",
        "malformed-miss-with-tags": b"*8\r\n$-1\r\n:0\r\n:0\r\n:0\r\n:0\r\n:110\r\n:0\r\n$13\r\n"
                                    + TAG_RECORD + b"\r\n",
        # Edges.
        "edge-remaining-over": b"*8\r\n$1\r\nx\r\n:0\r\n:%d\r\n:0\r\n:0\r\n:%d\r\n:0\r\n$0\r\n\r\n"
                               % (big + 1, big + 1),
        "edge-int64-min": b":-9223372036854775808\r\n",
        "edge-status": b"+OK\r\n",
        "edge-error": b"-ERR x\r\n",
        "edge-nil": b"$-1\r\n",
        "edge-nil-array": b"*-1\r\n",
        "edge-nested": b"*2\r\n*1\r\n:1\r\n*0\r\n",
        "edge-two-replies": b":1\r\n:0\r\n",
    }


def i64_edge(i):
    return bytes([0, i])


def i64_small(v):
    return bytes([1, v & 0xFF])


def i64_raw(v):
    return bytes([3]) + struct.pack(">q", v)


def dbl_edge(i):
    return bytes([0, i])


def s(b):
    return b"\xff" if b is None else bytes([len(b)]) + b


def options_input(host=b"127.0.0.1", port=i64_raw(6379), user=None, password=b"pw",
                  db=i64_edge(0), ctmo=i64_edge(4), tmo=i64_edge(4), prefix=b"app:",
                  max_key=i64_edge(0), max_value=i64_edge(0), tomb=i64_edge(0),
                  ttl=i64_edge(5), beta=dbl_edge(2), lease=i64_edge(4), wait=i64_edge(4),
                  stale=i64_edge(0), jitter=dbl_edge(3), wait_rule=b"\x00", nulls=0,
                  key=b"\x00\x07user:42", val=b"\x00\x01v"):
    return (s(host) + port + s(user) + s(password) + db + ctmo + tmo + s(prefix) +
            struct.pack(">Q", 42) + max_key + max_value + i64_edge(0) + tomb + ttl + beta +
            lease + wait + stale + i64_edge(0) + i64_edge(0) + jitter + wait_rule +
            bytes([nulls]) + key + val + i64_small(-3) + i64_small(1))


def options_seeds():
    return {
        "valid": options_input(),
        "port-negative": options_input(port=i64_edge(2)),
        "port-65536": options_input(port=i64_edge(16)),
        "db-int-min": options_input(db=i64_edge(12)),
        "tombstone-over": options_input(tomb=i64_edge(7)),
        "odd-strings": options_input(host=b"\xff\r\n\x01h", user=b"", password=b"\x00x",
                                     prefix=b"\r\n*1\r\n"),
        "beta-nan": options_input(beta=dbl_edge(13)),
        "beta-inf": options_input(beta=dbl_edge(11)),
        "jitter-1": options_input(jitter=dbl_edge(2)),
        "ttl-0": options_input(ttl=i64_edge(0)),
        "ttl-2pow40": options_input(ttl=i64_edge(6), stale=i64_edge(6)),
        "wait-rule-odd": options_input(wait_rule=b"\xc8" + i64_edge(2)),
        "key-empty": options_input(key=b"\x03\x00"),
        "key-null": options_input(key=b"\x02\x00\x05"),
        "key-over-max": options_input(max_key=i64_small(4), key=b"\x04\x04abcd"),
        "key-size-max": options_input(key=b"\x05\x00"),
        "value-null": options_input(val=b"\x02\x00\x05"),
        "value-over-max": options_input(max_value=i64_small(3), val=b"\x04\x00"),
        "null-pointers": options_input(nulls=7),
        "empty": b"",
    }


def resp_seeds():
    cmd = [b"EVALSHA", b"a" * 40, b"1", b"app:user:42", b"tok", b"5000", b"0"]
    return {
        "evalsha": bytes([len(cmd)]) + b"".join(bytes([len(a)]) + a for a in cmd),
        "no-args": b"\x00",
        "empty-args": b"\x10" + b"\x00" * 16,
        "binary": b"\x02\x05\r\n\x00$*\x03\xff\r\n",
        "long-arg": b"\x01\xc8\x03\xe8" + bytes(range(256)) * 3 + b"x" * 232,
    }


def write(target, seeds):
    d = os.path.join(CORPUS, target)
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    for name, data in sorted(seeds.items()):
        with open(os.path.join(d, name), "wb") as f:
            f.write(data)


def main():
    replies = capture()
    replies.update(handwritten_replies())
    write("reply", replies)
    write("options", options_seeds())
    write("resp", resp_seeds())


if __name__ == "__main__":
    main()
