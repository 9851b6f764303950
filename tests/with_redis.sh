#!/bin/sh
# Runs "$@ PORT" against a throwaway redis-server on a free loopback port.
# The port is drawn below the kernel's ephemeral range and tried by bind();
# a server that finds it taken meanwhile exits, and another port is drawn.
# It is judged up through its own Unix socket: another server that took the
# port would answer on TCP.
set -eu
dir=$(mktemp -d /tmp/xft-redis-XXXXXX)
pid=
trap '[ -z "$pid" ] || { kill $pid 2>/dev/null; wait $pid 2>/dev/null; }; rm -rf "$dir"' EXIT
attempt=0
while :; do
  attempt=$((attempt + 1))
  [ $attempt -le 5 ] || { echo "redis-server did not start (5 ports tried)" >&2; exit 1; }
  port=$(/usr/bin/python3 -c '
import random, socket
for _ in range(100):
    p = random.randrange(10000, 32000)
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", p))
        except OSError:
            continue
    print(p)
    break')
  redis-server --port "$port" --bind 127.0.0.1 --dir "$dir" --save '' --appendonly no \
    --unixsocket "$dir/redis.sock" --unixsocketperm 700 \
    --daemonize no --logfile "$dir/redis.log" &
  pid=$!
  i=0
  until redis-cli -s "$dir/redis.sock" ping >/dev/null 2>&1; do
    kill -0 $pid 2>/dev/null || break # exited: the port was taken
    i=$((i + 1))
    [ $i -lt 400 ] || { echo "redis-server did not answer within 20 s" >&2; exit 1; }
    sleep 0.05
  done
  kill -0 $pid 2>/dev/null && break
  wait $pid 2>/dev/null || :
  pid=
done
"$@" "$port"
