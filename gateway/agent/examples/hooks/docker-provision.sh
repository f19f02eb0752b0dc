#!/bin/bash
# gpux-agent provision hook: runs a lease in a Docker container with the NVIDIA runtime.
#
#   argv = ["/etc/gpux-agent/hooks/docker-provision.sh", "/etc/gpux-agent/hooks.env"]
#
# Input: only the GPUX_* environment variables (gateway/agent/src/hooks.rs); settings from the
# env file named by $1 (see hooks.env). Output: progress on stderr; the LAST stdout line is the
# access details JSON the exchange's ready report carries:
#   {"ssh_host":"203.0.113.7","ssh_port":32768,"ssh_user":"root","urls":{"8888":"http://…"}}
# Exit non-zero on failure: the agent reports the lease failed with the tail of stderr.
# Exit 65 (EX_DATAERR) when the buyer's launch spec is at fault -- the image cannot be pulled
# (no such image or tag, access denied, a malformed reference) or the command cannot run
# (not found, not executable): the exchange ends the lease at no charge without a failover
# (it would fail the same way) and without holding this node. Any other failure (the
# registry unreachable, the NVIDIA runtime missing, docker down) is this host's: exit 1 or
# docker's own status, and the lease fails over while the node is held.
#
# The buyer's values are data: they reach docker only as separate arguments (never through a
# shell line or eval), and environment values as `-e NAME=VALUE` arguments (never exported
# here, so a buyer's LD_PRELOAD or PATH cannot touch this host's processes).
#
# Needs: bash >= 4.4, docker with the NVIDIA Container Toolkit, jq.
set -euo pipefail

settings="${1:-/etc/gpux-agent/hooks.env}"
if [ -r "$settings" ]; then
  # shellcheck source=/dev/null
  . "$settings"
fi
: "${PUBLIC_HOST:?set PUBLIC_HOST in $settings}"
DOCKER="${DOCKER:-docker}"
SCRATCH_ROOT="${SCRATCH_ROOT:-/var/lib/gpux-agent/scratch}"
SSH_IMAGE="${SSH_IMAGE:-}"
START_WAIT_S="${START_WAIT_S:-2}"

name="gpux-lease-${GPUX_LEASE_ID:?}"
scratch="${SCRATCH_ROOT}/${name}"

# Keep stdout for the access line only: everything else goes to stderr.
exec 3>&1 1>&2

cleanup() {
  "$DOCKER" rm -f -v "$name" >/dev/null 2>&1 || true
}
trap 'exit 143' TERM INT
trap cleanup EXIT

# The buyer's launch spec cannot run: say why on stderr (the buyer sees it) and exit 65.
spec_error() {
  echo "$*"
  exit 65
}

image="${GPUX_IMAGE:-}"
if [ -z "$image" ]; then
  if [ -z "$SSH_IMAGE" ]; then
    spec_error "no image in the launch spec, and this host has no default image (SSH_IMAGE)"
  fi
  image="$SSH_IMAGE"
fi

# The command, environment and ports as arrays (NUL-separated: values may hold newlines).
command_json="${GPUX_COMMAND_JSON:-}"
env_json="${GPUX_ENV_JSON:-}"
mapfile -d '' -t command < <(printf '%s' "${command_json:-[]}" | jq -j '.[] | (., "\u0000")')
mapfile -d '' -t env_args < <(printf '%s' "${env_json:-"{}"}" |
  jq -j 'to_entries[] | ("--env", "\u0000", "\(.key)=\(.value)", "\u0000")')
ports=()
if [ -n "${GPUX_PORTS:-}" ]; then
  IFS=, read -r -a ports <<<"$GPUX_PORTS"
fi

# A rerun (the agent restarted mid-provision) starts clean.
"$DOCKER" rm -f -v "$name" >/dev/null 2>&1 || true
install -d -m 0700 "$scratch"

run_args=(
  run --detach --init
  --name "$name"
  --label "gpux.lease=${GPUX_LEASE_ID}"
  --gpus "\"device=${GPUX_GPU_UUIDS:?}\""
  --volume "${scratch}:/scratch"
  --env "CUDA_DEVICE_ORDER=PCI_BUS_ID"
)
run_args+=("${env_args[@]}")

# A gang member (issue 27): the job's rendezvous (torchrun / NCCL) and the fabric. Rank 0's
# node is MASTER_ADDR; GANG_NODE_ADDRS maps node names to the addresses members reach.
if [ -n "${GPUX_GANG_ID:-}" ]; then
  IFS=, read -r -a gang_nodes <<<"${GPUX_GANG_NODES:-}"
  master="${gang_nodes[0]:-}"
  if [ -n "${GANG_NODE_ADDRS:-}" ] && [ -r "$GANG_NODE_ADDRS" ] && [ -n "$master" ]; then
    addr=$(awk -v n="$master" '$1 == n {print $2; exit}' "$GANG_NODE_ADDRS")
    master="${addr:-$master}"
  fi
  run_args+=(
    --env "GPUX_GANG_ID=${GPUX_GANG_ID}" --env "GPUX_GANG_RANK=${GPUX_GANG_RANK:-}"
    --env "GPUX_GANG_SIZE=${GPUX_GANG_SIZE:-}" --env "GPUX_GANG_NODES=${GPUX_GANG_NODES:-}"
    --env "NODE_RANK=${GPUX_GANG_RANK:-}" --env "NNODES=${GPUX_GANG_SIZE:-}"
    --env "MASTER_ADDR=${master}" --env "MASTER_PORT=${GANG_MASTER_PORT:-29500}"
  )
  if [ -d /dev/infiniband ]; then
    run_args+=(--device /dev/infiniband --cap-add IPC_LOCK --ulimit memlock=-1)
  fi
  # Tenant isolation on a shared IB fabric: this gang's own partition (README "Gangs").
  if [ -n "${GANG_PKEY_CMD:-}" ]; then
    read -r pkey pkey_index < <("$GANG_PKEY_CMD" allocate "$GPUX_GANG_ID" "$GPUX_LEASE_ID")
    [ -n "${pkey:-}" ] && [ -n "${pkey_index:-}" ] || {
      echo "GANG_PKEY_CMD gave no partition key for gang ${GPUX_GANG_ID}"
      exit 1
    }
    run_args+=(--env "UCX_IB_PKEY=${pkey}" --env "NCCL_IB_PKEY=${pkey_index}")
  fi
fi
for port in "${ports[@]}"; do
  run_args+=(--publish "${port}")
done

if [ -n "${GPUX_SSH_KEYS:-}" ]; then
  keys="${scratch}/.authorized_keys"
  printf '%s\n' "$GPUX_SSH_KEYS" >"$keys"
  chmod 0600 "$keys"
  run_args+=(--publish 22 --volume "${keys}:/root/.ssh/authorized_keys:ro")
  # sshd in the background, then the buyer's command (or sleep). The script text is fixed;
  # the command comes as its arguments ("$@").
  entry='mkdir -p /run/sshd && ssh-keygen -A >/dev/null && /usr/sbin/sshd || exit 97
if [ "$#" -gt 0 ]; then exec "$@"; else exec sleep infinity; fi'
  run_args+=(--entrypoint /bin/sh "$image" -c "$entry" gpux-entry)
  run_args+=("${command[@]}")
else
  run_args+=("$image")
  run_args+=("${command[@]}")
fi

echo "pulling ${image}"
if ! pull_error="$("$DOCKER" pull --quiet "$image" 2>&1 >/dev/null)"; then
  echo "$pull_error"
  case "$pull_error" in
  # docker's words for a missing image or tag, a private or missing repository, a bad name.
  *"manifest unknown"* | *"manifest for "*" not found"* | *"pull access denied"* | \
    *"repository does not exist"* | *"invalid reference format"* | *"unauthorized"*)
    spec_error "the image ${image} cannot be pulled" ;;
  esac
  exit 1 # the registry or the network: this host's problem
fi
echo "starting ${name} on ${GPUX_GPU_UUIDS}"
"$DOCKER" "${run_args[@]}" >/dev/null || {
  status=$?
  # docker run: 126 the command cannot be invoked, 127 it was not found; 125 is docker's own.
  case "$status" in
  126 | 127) spec_error "the launch command cannot run in ${image} (docker run exited ${status})" ;;
  esac
  exit "$status"
}

# Give sshd a moment; a container that exited already has failed.
sleep "$START_WAIT_S"
if [ "$("$DOCKER" inspect --format '{{.State.Running}}' "$name")" != "true" ]; then
  echo "the container exited at once; its last log lines:"
  "$DOCKER" logs --tail 20 "$name" 2>&1 || true
  code="$("$DOCKER" inspect --format '{{.State.ExitCode}}' "$name" 2>/dev/null || echo '?')"
  case "$code" in
  # 126/127: the buyer's command cannot run or was not found; 97: the image has no sshd.
  126 | 127) spec_error "the launch command cannot run in ${image} (it exited ${code})" ;;
  97) spec_error "the image ${image} cannot serve SSH (no working sshd)" ;;
  esac
  exit 1
fi

host_port() { # the host port docker published for container port $1
  local mapping
  mapping="$("$DOCKER" port "$name" "$1/tcp" | head -n 1)"
  printf '%s' "${mapping##*:}"
}

urls='{}'
for port in "${ports[@]}"; do
  hp="$(host_port "$port")"
  urls="$(jq -cn --argjson urls "$urls" --arg port "$port" --arg url "http://${PUBLIC_HOST}:${hp}" '$urls + {($port): $url}')"
done

if [ -n "${GPUX_SSH_KEYS:-}" ]; then
  ssh_port="$(host_port 22)"
  access="$(jq -cn --arg host "$PUBLIC_HOST" --argjson port "$ssh_port" --argjson urls "$urls" \
    '{ssh_host: $host, ssh_port: $port, ssh_user: "root", urls: $urls}')"
else
  access="$(jq -cn --argjson urls "$urls" '{urls: $urls}')"
fi

trap - EXIT
printf '%s\n' "$access" >&3
