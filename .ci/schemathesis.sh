#!/usr/bin/env bash
# The API against its own contract (issue 16): starts the release server on an embedded store
# in a temp dir and a free port, makes a buyer and a supplier key through the API, then runs
# schemathesis against the served /openapi.json once per key (supplier, buyer, admin: the
# buyer's bids meet what the supplier's run listed): every check (status codes, content
# types, response schemas and headers, schema-valid requests accepted and schema-violating
# ones refused, undeclared methods, auth, use after free, resource availability), all phases
# (examples, coverage, fuzzing, stateful). Any finding fails. Needs `target/release/gateway`
# (run after `cargo test --release`), python3 and curl.
#
# The contract's rule (docs/api.md §1.4): 400 means the request does not match the document,
# 422 that it does but a market rule or the market's state refuses it (funds, a node's health,
# a region without nodes, a period that ends before it starts). So a schema-valid request may
# be answered 422: `.ci/schemathesis.toml` adds 422 to what `positive_data_acceptance` expects
# (schemathesis' default: 2xx, 3xx, 401, 403, 404, 409, 429, 5xx), and 413 (a body over
# 64 KiB, which no JSON Schema can bound) to both data checks. `.ci/schemathesis_hooks.py`
# makes each drawn `Idempotency-Key` unique (a reused one replays an earlier answer by
# design).
#
# Environment: ST_MAX_EXAMPLES (test cases per operation and phase, default 100: about 1-2
# minutes on 2 cores), ST_SEED (default fixed, so CI is reproducible), ST_REPORT_DIR (JUnit
# reports, default a temp dir).
set -euo pipefail
cd "$(dirname "$0")/.."

ST_VERSION=4.32.5
MAX_EXAMPLES=${ST_MAX_EXAMPLES:-100}
SEED=${ST_SEED:-20261201}
BIN=target/release/gateway

if ! schemathesis --version 2>/dev/null | grep -q "$ST_VERSION"; then
  echo "schemathesis: installing $ST_VERSION"
  python3 -m pip install --quiet "schemathesis==$ST_VERSION"
fi
[ -x "$BIN" ] || cargo build --release -p gateway --bin gateway

work=$(mktemp -d)
report_dir=${ST_REPORT_DIR:-$work/reports}
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
base="http://127.0.0.1:$port"
admin="gpux_$(python3 -c 'import secrets; print(secrets.token_hex(16))')"

GPUX_ADMIN_KEY=$admin "$BIN" --listen "127.0.0.1:$port" --data-dir "$work/data" \
  >"$work/server.log" 2>&1 &
server=$!
cleanup() {
  kill "$server" 2>/dev/null || true
  wait "$server" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

for _ in $(seq 1 100); do
  curl -sf "$base/readyz" >/dev/null && break
  sleep 0.1
done
curl -sf "$base/readyz" >/dev/null || { cat "$work/server.log"; echo "server did not start"; exit 1; }

# A key of a new account of `role`, made with the admin key through the API.
new_key() {
  curl -sf -X POST "$base/v1/admin/accounts" -H "Authorization: Bearer $admin" \
    -H 'Content-Type: application/json' -d "{\"name\": \"schemathesis-$1\", \"role\": \"$1\"}" |
    python3 -c 'import json, sys; print(json.load(sys.stdin)["api_key"])'
}
buyer=$(new_key buyer)
supplier=$(new_key supplier)
# Money for the buyer's bids (so some fill rather than all ending insufficient_funds).
buyer_id=$(curl -sf "$base/v1/me" -H "Authorization: Bearer $buyer" |
  python3 -c 'import json, sys; print(json.load(sys.stdin)["account_id"])')
curl -sf -X POST "$base/v1/admin/accounts/$buyer_id/deposits" -H "Authorization: Bearer $admin" \
  -H 'Content-Type: application/json' -H 'Idempotency-Key: schemathesis-funds' \
  -d '{"amount": "1000000.00"}' >/dev/null

# One run per role. The supplier's runs first (the buyer's bids then meet what it listed);
# the buyer's and the admin's then run side by side, each printed when done (CI time: about a
# minute less on 2 cores than one after the other).
run_as() {
  local who=$1 key=${!1}
  echo "schemathesis: as $who ($MAX_EXAMPLES examples per operation, seed $SEED)"
  SCHEMATHESIS_HOOKS=.ci/schemathesis_hooks.py \
    schemathesis --config-file .ci/schemathesis.toml run "$base/openapi.json" \
    --checks all --phases examples,coverage,fuzzing,stateful \
    --max-examples "$MAX_EXAMPLES" --seed "$SEED" \
    -H "Authorization: Bearer $key" \
    --report junit --report-junit-path "$report_dir/$who.xml" \
    --output-sanitize true
}
status=0
run_as supplier || status=1
pids=()
for who in buyer admin; do
  run_as "$who" >"$work/$who.out" 2>&1 &
  pids+=("$!")
done
for i in 0 1; do
  wait "${pids[$i]}" || status=1
done
cat "$work/buyer.out" "$work/admin.out"
if [ "$status" -ne 0 ]; then
  echo "schemathesis: findings (see above; the server log was $work/server.log)"
  tail -n 50 "$work/server.log"
fi
exit "$status"
