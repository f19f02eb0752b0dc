#!/bin/bash
# gpux-agent verify hook (issue 26, docs/market-rules.md §12.2): measures a verification
# lease's GPUs and prints the figures the agent reports with
# POST /v1/leases/{id}/verification.
#
#   [hooks.verify]
#   argv = ["/etc/gpux-agent/hooks/verify.sh", "/etc/gpux-agent/hooks.env"]
#   timeout_ms = 900000
#
# NOT YET RUN ON HARDWARE: this script has not met an NVIDIA host. Its tool output parsing is
# the agent's (gateway/agent/src/verify.rs), tested on recorded outputs of the real tools
# (gateway/agent/tests/fixtures); the script itself is tested against a fake docker and dcgmi
# (gateway/agent/tests/example_hooks.rs). Run `gpux-agent --verify` on a host before relying
# on its figures, and report them (docs/trust.md).
#
# What it measures, on the lease's GPUs only (GPUX_GPU_UUIDS; the GPUs are the lease's: no
# buyer workload runs on them):
#   1. per GPU, in a container of VERIFY_IMAGE (pinned by tag: nvcr.io/nvidia/pytorch:24.05-py3,
#      PyTorch 2.4 pre-release on CUDA 12.4.1), one GPU per container (`--gpus device=UUID`):
#      - BF16 GEMM TFLOPS: 8192×8192×8192 bf16 matmuls (torch), 10 warm-up runs, then the
#        median time of GEMM_ITERS timed runs (CUDA events): 2·n³ / median / 10¹²;
#      - memory bandwidth GB/s: a COPY_MIB device-to-device copy (read + write), median of 20:
#        2 · bytes / median / 10⁹;
#   2. with 2 GPUs or more, `all_reduce_perf -b 8M -e 1G -f 2 -g N` (nccl-tests) over all of
#      them, when the image has it (the stock PyTorch image does not: set VERIFY_IMAGE to an
#      image with nccl-tests built in, e.g. FROM the same tag plus a build of
#      github.com/NVIDIA/nccl-tests); its raw output goes to the agent, which takes the
#      out-of-place bus bandwidth at the largest size;
#   3. `dcgmi diag -r 1 -i INDEXES` on the host when DCGM is installed (nv-hostengine
#      running); its raw output goes to the agent, which reads pass / warn / fail.
#
# Output: progress and every tool's output on stderr (the agent keeps the last 8 KiB as the
# report's raw_tail); the LAST stdout line is one JSON object:
#   {"gpus":[{"index":0,"bf16_tflops":771.2,"mem_bw_gbps":2998.1},…],
#    "all_reduce_perf_output":"…"|null,"dcgmi_diag_output":"…"|null}
# A GPU whose measurement failed is left out (the exchange judges it as not measured). Exit 0
# whenever the JSON was printed; non-zero only when nothing could be measured at all.
#
# Settings (hooks.env): DOCKER, DCGMI, VERIFY_IMAGE, GEMM_N, GEMM_ITERS, COPY_MIB.
# Needs: bash >= 4.4, docker with the NVIDIA Container Toolkit, jq.
set -euo pipefail

settings="${1:-/etc/gpux-agent/hooks.env}"
if [ -r "$settings" ]; then
  # shellcheck source=/dev/null
  . "$settings"
fi
DOCKER="${DOCKER:-docker}"
DCGMI="${DCGMI:-dcgmi}"
VERIFY_IMAGE="${VERIFY_IMAGE:-nvcr.io/nvidia/pytorch:24.05-py3}"
GEMM_N="${GEMM_N:-8192}"
GEMM_ITERS="${GEMM_ITERS:-50}"
COPY_MIB="${COPY_MIB:-2048}"

: "${GPUX_LEASE_ID:?}" "${GPUX_GPU_UUIDS:?}" "${GPUX_GPU_INDEXES:?}" "${GPUX_GPUS:?}"
IFS=, read -r -a uuids <<<"$GPUX_GPU_UUIDS"
IFS=, read -r -a indexes <<<"$GPUX_GPU_INDEXES"
if [ "${#uuids[@]}" -ne "${#indexes[@]}" ]; then
  echo "GPUX_GPU_UUIDS and GPUX_GPU_INDEXES differ in length" >&2
  exit 1
fi

work="$(mktemp -d)"
name="gpux-verify-${GPUX_LEASE_ID}"
# Keep stdout for the figures line only.
exec 3>&1 1>&2
cleanup() {
  "$DOCKER" rm -f "$name" >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap 'exit 143' TERM INT
trap cleanup EXIT

# The per-GPU measurement, run inside the image: prints one JSON line.
read -r -d '' GEMM_PY <<'PY' || true
import json, statistics, sys
import torch
index, n, iters, copy_mib = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
dev = torch.device("cuda", 0)
def timed(fn, runs):
    times = []
    for _ in range(runs):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record(); fn(); end.record(); end.synchronize()
        times.append(start.elapsed_time(end) / 1000.0)
    return statistics.median(times)
a = torch.randn(n, n, device=dev, dtype=torch.bfloat16)
b = torch.randn(n, n, device=dev, dtype=torch.bfloat16)
c = torch.empty(n, n, device=dev, dtype=torch.bfloat16)
for _ in range(10):
    torch.matmul(a, b, out=c)
torch.cuda.synchronize()
tflops = 2 * n ** 3 / timed(lambda: torch.matmul(a, b, out=c), iters) / 1e12
del a, b, c
nbytes = copy_mib << 20
x = torch.empty(nbytes, device=dev, dtype=torch.uint8)
y = torch.empty_like(x)
for _ in range(3):
    y.copy_(x)
torch.cuda.synchronize()
gbps = 2 * nbytes / timed(lambda: y.copy_(x), 20) / 1e9
print(json.dumps({"index": index, "bf16_tflops": round(tflops, 1), "mem_bw_gbps": round(gbps, 1)}))
PY

if ! "$DOCKER" image inspect "$VERIFY_IMAGE" >/dev/null 2>&1; then
  echo "pulling $VERIFY_IMAGE"
  "$DOCKER" pull "$VERIFY_IMAGE"
fi

: >"$work/gpus.jsonl"
for k in "${!uuids[@]}"; do
  idx="${indexes[$k]}"
  uuid="${uuids[$k]}"
  echo "GPU $idx ($uuid): BF16 GEMM ${GEMM_N}³ × ${GEMM_ITERS}, copy ${COPY_MIB} MiB"
  if "$DOCKER" run --rm --name "$name" --gpus "device=$uuid" --ipc=host --network none \
    "$VERIFY_IMAGE" python -c "$GEMM_PY" "$idx" "$GEMM_N" "$GEMM_ITERS" "$COPY_MIB" \
    >"$work/gpu.out"; then
    cat "$work/gpu.out"
    # The image's own banner may precede the figures: keep the JSON line.
    grep -E '^\{"index": ?[0-9]+' "$work/gpu.out" | tail -n 1 >>"$work/gpus.jsonl" || true
  else
    echo "GPU $idx: measurement failed (left out of the figures)"
  fi
done

nccl="$work/all_reduce_perf.txt"
: >"$nccl"
if [ "${#uuids[@]}" -ge 2 ]; then
  echo "all_reduce_perf -b 8M -e 1G -f 2 -g ${#uuids[@]} on $GPUX_GPU_UUIDS"
  # shellcheck disable=SC2016 # $1 is the inner shell's
  if ! "$DOCKER" run --rm --name "$name" --gpus "\"device=$GPUX_GPU_UUIDS\"" --ipc=host \
    --network none "$VERIFY_IMAGE" bash -c \
    'command -v all_reduce_perf >/dev/null || { echo "all_reduce_perf: not in this image" >&2; exit 127; }
     exec all_reduce_perf -b 8M -e 1G -f 2 -g "$1"' _ "${#uuids[@]}" >"$nccl"; then
    echo "all_reduce_perf failed or is absent: no bus bandwidth"
    : >"$nccl"
  fi
  cat "$nccl"
fi

dcgm="$work/dcgmi_diag.txt"
: >"$dcgm"
if command -v "$DCGMI" >/dev/null 2>&1; then
  echo "$DCGMI diag -r 1 -i $GPUX_GPU_INDEXES"
  "$DCGMI" diag -r 1 -i "$GPUX_GPU_INDEXES" >"$dcgm" 2>&1 || true
  cat "$dcgm"
else
  echo "dcgmi not installed: no DCGM diagnostics"
fi

if [ ! -s "$work/gpus.jsonl" ] && [ ! -s "$nccl" ] && [ ! -s "$dcgm" ]; then
  echo "nothing could be measured"
  exit 1
fi
jq -cn --slurpfile gpus "$work/gpus.jsonl" --rawfile nccl "$nccl" --rawfile dcgm "$dcgm" '{
  gpus: $gpus,
  all_reduce_perf_output: (if $nccl == "" then null else $nccl end),
  dcgmi_diag_output: (if $dcgm == "" then null else $dcgm end)
}' >&3
