#!/usr/bin/env bash
# Starts the multi-process topology on this machine (docs/deploy.md, "Three machines and
# more"): a Redis journal (AOF always), two engine processes (leader and hot standby) and two
# API processes that follow the journal and forward commands to the leader.
#
#   gateway/scripts/cluster.sh            # ports 8081-8084, Redis on 6390; Ctrl-C stops all
#   BASE_PORT=9000 REDIS_PORT=7000 gateway/scripts/cluster.sh
#
# Prints the admin key and the URLs. Kill an engine (kill -9 <pid>) to watch the standby take
# over; kill an API process and its clients reconnect to the other.
set -euo pipefail
cd "$(dirname "$0")/../.."

BASE_PORT=${BASE_PORT:-8081}
REDIS_PORT=${REDIS_PORT:-6390}
BIN=${GATEWAY_BIN:-target/release/gateway}
# HTTP worker threads per process: the four share this machine's cores (docs/deploy.md, "Workers").
WORKERS=${WORKERS:-1}
[[ "$WORKERS" =~ ^[0-9]+$ ]] || { echo "cluster.sh: WORKERS must be a whole number (0: one per core), not '$WORKERS'" >&2; exit 2; }
DIR=$(mktemp -d -t gpux-cluster.XXXXXX)

command -v redis-server >/dev/null || { echo "cluster.sh: redis-server is not installed" >&2; exit 1; }
[ -x "$BIN" ] || cargo build --release -p gateway

pids=()
stopped=
cleanup() {
  [ -n "$stopped" ] && return
  stopped=1
  [ ${#pids[@]} -gt 0 ] || return 0
  # Gateways first (they resign the lease and save on the way out), Redis (the first pid) last.
  for p in "${pids[@]:1}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]:1}"; do wait "$p" 2>/dev/null || true; done
  kill "${pids[0]}" 2>/dev/null || true
  wait 2>/dev/null || true
  echo "cluster.sh: stopped; logs in $DIR"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# In a session of its own, so a Ctrl-C to the terminal's process group reaches the gateways
# (which resign the lease and save) but not Redis, which the cleanup stops after them.
setsid redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --dir "$DIR" --appendonly yes \
  --appendfsync always --save '' --daemonize no --logfile "$DIR/redis.log" &
pids+=($!)
for _ in $(seq 50); do redis-cli -p "$REDIS_PORT" ping >/dev/null 2>&1 && break; sleep 0.1; done

export GPUX_CLUSTER_KEY=${GPUX_CLUSTER_KEY:-$(head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n')}
export GPUX_ADMIN_KEY=${GPUX_ADMIN_KEY:-gpux_admin_$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')}
REDIS_URL="redis://127.0.0.1:$REDIS_PORT"

start() { # role port
  "$BIN" --role "$1" --listen "127.0.0.1:$2" --redis-url "$REDIS_URL" --require-aof \
    --workers "$WORKERS" >"$DIR/$1-$2.log" 2>&1 &
  pids+=($!)
  echo "  $1 on http://127.0.0.1:$2 (pid $!, log $DIR/$1-$2.log)"
}

echo "cluster.sh: Redis $REDIS_URL, data in $DIR"
ready() { # port pattern log: waits up to 30 s for /readyz to match, or stops with the log
  for _ in $(seq 300); do curl -sf "http://127.0.0.1:$1/readyz" | grep -q "$2" && return 0; sleep 0.1; done
  echo "cluster.sh: the process on port $1 did not become ready; the end of $3:" >&2
  tail -n 20 "$3" >&2
  exit 1
}
start engine "$BASE_PORT"
ready "$BASE_PORT" '"leading":true' "$DIR/engine-$BASE_PORT.log"
start engine $((BASE_PORT + 1))
start api $((BASE_PORT + 2))
start api $((BASE_PORT + 3))
ready $((BASE_PORT + 1)) . "$DIR/engine-$((BASE_PORT + 1)).log"
ready $((BASE_PORT + 2)) . "$DIR/api-$((BASE_PORT + 2)).log"
ready $((BASE_PORT + 3)) . "$DIR/api-$((BASE_PORT + 3)).log"
echo
echo "Admin key: $GPUX_ADMIN_KEY"
echo "Clients use the API processes: http://127.0.0.1:$((BASE_PORT + 2)) and http://127.0.0.1:$((BASE_PORT + 3))"
echo "  curl -s http://127.0.0.1:$((BASE_PORT + 2))/readyz"
echo "  curl -s -H 'Authorization: Bearer $GPUX_ADMIN_KEY' http://127.0.0.1:$((BASE_PORT + 3))/v1/admin/accounts"
echo "To bring back a killed process (same role and port), in another shell:"
echo "  GPUX_CLUSTER_KEY=$GPUX_CLUSTER_KEY $BIN --role api --listen 127.0.0.1:$((BASE_PORT + 2)) --redis-url $REDIS_URL --require-aof --workers $WORKERS"
echo "gpux against both API processes:"
echo "  GPUX_URL=http://127.0.0.1:$((BASE_PORT + 2)),http://127.0.0.1:$((BASE_PORT + 3)) GPUX_KEY=$GPUX_ADMIN_KEY gpux accounts"
echo "Ctrl-C stops everything."
wait
