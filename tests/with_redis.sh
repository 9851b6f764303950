#!/bin/sh
# Runs "$@ PORT" against a throwaway redis-server on a free loopback port.
set -eu
dir=$(mktemp -d /tmp/xft-redis-XXXXXX)
port=$(/usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
redis-server --port "$port" --bind 127.0.0.1 --dir "$dir" --save '' --appendonly no \
  --daemonize no --logfile "$dir/redis.log" &
pid=$!
trap 'kill $pid 2>/dev/null; wait $pid 2>/dev/null; rm -rf "$dir"' EXIT
i=0
until redis-cli -p "$port" ping >/dev/null 2>&1; do
  i=$((i + 1)); [ $i -lt 200 ] || { echo "redis-server did not start" >&2; exit 1; }
  sleep 0.05
done
"$@" "$port"
