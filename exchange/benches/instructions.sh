#!/usr/bin/env bash
# The engine's instructions per operation at 1,000 / 10,000 / 100,000 nodes: how its cost per
# operation grows with the market, counted rather than timed.
#
# Runs the engine benchmark's one-size mode (`EXCHANGE_BENCH_ONLY=nodes=N`) under valgrind's
# callgrind, collecting only inside the bench's `timed_ops_at_steady_state` (the timed
# EXCHANGE_BENCH_OPS operations after 300 s of market time, when leases, resting bids and fills
# per operation are at their running levels at every size), and reads the inclusive instruction
# count of `Engine::apply_into`: the engine's own work, without the bench's command generation.
# An instruction count is repeatable for the same binary and input whatever else the machine is
# doing, so unlike ops/s it says what the engine's cost per operation does as the market grows,
# apart from what the machine's caches do to it (the bench's lookup control shows that part).
#
# Usage: exchange/benches/instructions.sh [node counts...]   (default: 1000 10000 100000; each
# an integer >= 2, the first being the baseline). Env: EXCHANGE_BENCH_OPS (default 100000
# here); EXCHANGE_BENCH_MIX=delivery counts the delivery mix of issue 15 (lease delivery on,
# the suppliers' lifecycle commands in the mix) instead of the old mix, EXCHANGE_BENCH_MIX=trust
# the trust mix of issue 26 (the delivery mix with verification on and trust bids). Needs valgrind. Takes
# ~12 min with 100,000 nodes.
set -euo pipefail
cd "$(dirname "$0")/../.."

ops="${EXCHANGE_BENCH_OPS:-100000}"
sizes=("$@")
[ ${#sizes[@]} -gt 0 ] || sizes=(1000 10000 100000)
for v in "$ops" "${sizes[@]}"; do
    if ! [[ "$v" =~ ^[0-9]+$ ]] || [ "$v" -lt 2 ]; then
        echo "instructions.sh: '$v' is not a count >= 2 (node counts are arguments, the operation count is EXCHANGE_BENCH_OPS)" >&2
        exit 2
    fi
done
command -v valgrind >/dev/null || { echo "instructions.sh: valgrind is not installed" >&2; exit 2; }
# The steady-state run is the one counted; it needs a warm-up.
unset EXCHANGE_BENCH_WARMUP_S

# Build with cargo's own messages on stderr, then ask (already fresh) for the binary's path.
cargo bench -p exchange --bench engine --no-run >&2
bin=$(cargo bench -p exchange --bench engine --no-run --message-format=json 2>/dev/null |
    grep '"name":"engine"' | grep -o '"executable":"[^"]*"' | cut -d'"' -f4 | tail -1)
[ -x "$bin" ] || { echo "instructions.sh: could not find the engine bench binary" >&2; exit 1; }

out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
printf '%10s %14s %12s %14s %14s\n' nodes "instr/op" "vs first" "log allows" "fills/op"
first_ir=""
first_n=""
for n in "${sizes[@]}"; do
    if ! EXCHANGE_BENCH_OPS="$ops" EXCHANGE_BENCH_ONLY="nodes=$n" \
        valgrind --tool=callgrind --toggle-collect='engine::timed_ops_at_steady_state' \
        --callgrind-out-file="$out/$n.out" "$bin" --bench >"$out/$n.log" 2>&1; then
        echo "instructions.sh: the bench failed at $n nodes:" >&2
        cat "$out/$n.log" >&2
        exit 1
    fi
    # The call edge into the engine: "<inclusive Ir> (..%)  >   <file>:...Engine::apply_into (..x)".
    edge=$(callgrind_annotate --auto=no --inclusive=yes --tree=calling "$out/$n.out" |
        grep -m1 '>  .*exchange::engine::Engine::apply_into (' || true)
    ir=$(sed 's/^ *\([0-9,]*\) .*/\1/' <<<"$edge" | tr -d ,)
    [ -n "$ir" ] || { echo "instructions.sh: no count for Engine::apply_into at $n nodes" >&2; exit 1; }
    fills=$(sed -n 's/^fills per operation: .*, \([0-9.]*\) at steady state$/\1/p' "$out/$n.log")
    [ -n "$first_ir" ] || { first_ir=$ir; first_n=$n; }
    awk -v n="$n" -v ir="$ir" -v ops="$ops" -v f="$first_ir" -v fn="$first_n" -v fills="$fills" 'BEGIN {
        printf "%10d %14.0f %11.2fx %13.2fx %14s\n", n, ir / ops, ir / f, log(n) / log(fn), fills }'
done
echo "instr/op: instructions inside Engine::apply_into per operation (one command each) over $ops operations at steady state, ${EXCHANGE_BENCH_MIX:-old} mix; fills/op: leases created per operation in that run"
