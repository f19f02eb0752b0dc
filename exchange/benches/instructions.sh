#!/usr/bin/env bash
# Engine instructions per operation at 1,000 / 10,000 / 100,000 nodes (issue 2's scaling line,
# counted rather than timed).
#
# Runs the engine benchmark's one-size mode (`EXCHANGE_BENCH_ONLY=nodes=N`) under valgrind's
# callgrind, collecting only inside the bench's `timed_ops_at_steady_state` (the timed
# EXCHANGE_BENCH_OPS operations after 300 s of market time, when leases, resting bids and fills
# per operation are at their running levels at every size), and reads the inclusive instruction
# count of `Engine::apply_into` — the engine's own work, without the bench's command generation. An
# instruction count is repeatable for the same binary and input whatever else the machine is
# doing, so unlike ops/s it says what the engine's cost per operation does as the market grows,
# apart from what the machine's caches do to it (the bench's lookup control shows that part).
#
# Usage: exchange/benches/instructions.sh [node counts...]   (default: 1000 10000 100000)
# Env: EXCHANGE_BENCH_OPS (default 100000 here). Needs valgrind. Takes ~10 min at 100,000 nodes.
set -euo pipefail
cd "$(dirname "$0")/../.."

ops="${EXCHANGE_BENCH_OPS:-100000}"
sizes=("$@")
[ ${#sizes[@]} -gt 0 ] || sizes=(1000 10000 100000)
command -v valgrind >/dev/null || { echo "valgrind is not installed" >&2; exit 2; }

bin=$(cargo bench -p exchange --bench engine --no-run 2>&1 |
    sed -n 's/.*Executable benches\/engine.rs (\(.*\))/\1/p')
[ -x "$bin" ] || { echo "could not find the engine bench binary" >&2; exit 1; }

out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
printf '%10s %14s %12s %14s\n' nodes "instr/op" "vs first" "log allows"
first=""
first_n=""
for n in "${sizes[@]}"; do
    EXCHANGE_BENCH_OPS="$ops" EXCHANGE_BENCH_ONLY="nodes=$n" \
        valgrind --tool=callgrind --toggle-collect='engine::timed_ops_at_steady_state' \
        --callgrind-out-file="$out/$n.out" "$bin" --bench >"$out/$n.log" 2>&1
    # The call edge into the engine: "<inclusive Ir> (..%)  >   <file>:...Engine::apply_into (..x)".
    edge=$(callgrind_annotate --auto=no --inclusive=yes --tree=calling "$out/$n.out" |
        grep -m1 '>  .*exchange::engine::Engine::apply_into (' || true)
    ir=$(sed 's/^ *\([0-9,]*\) .*/\1/' <<<"$edge" | tr -d ,)
    [ -n "$ir" ] || { echo "no count for Engine::apply_into at $n nodes" >&2; exit 1; }
    awk -v n="$n" -v ir="$ir" -v ops="$ops" -v f="$first" -v fn="$first_n" 'BEGIN {
        p = ir / ops; if (f == "") { f = p; fn = n }
        printf "%10d %14.0f %11.2fx %13.2fx\n", n, p, p / f, log(n) / log(fn) }'
    if [ -z "$first" ]; then first=$((ir / ops)); first_n=$n; fi
done
echo "instr/op: instructions inside Engine::apply_into per operation (one command each) over $ops operations at steady state"
