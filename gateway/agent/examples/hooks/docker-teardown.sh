#!/bin/bash
# gpux-agent teardown hook for docker-provision.sh: removes the lease's container and its
# anonymous volumes, deletes its scratch directory, and checks that no process still uses the
# lease's GPUs. Safe to run again (the agent retries after a restart).
#
#   argv = ["/etc/gpux-agent/hooks/docker-teardown.sh", "/etc/gpux-agent/hooks.env"]
#
# Output: progress on stderr; the LAST stdout line is the wipe method, kept on the lease as the
# buyer's deletion record. Exit non-zero when the wipe is incomplete.
set -euo pipefail

settings="${1:-/etc/gpux-agent/hooks.env}"
if [ -r "$settings" ]; then
  # shellcheck source=/dev/null
  . "$settings"
fi
DOCKER="${DOCKER:-docker}"
SCRATCH_ROOT="${SCRATCH_ROOT:-/var/lib/gpux-agent/scratch}"

name="gpux-lease-${GPUX_LEASE_ID:?}"
scratch="${SCRATCH_ROOT}/${name}"
exec 3>&1 1>&2

if [ -n "$("$DOCKER" ps --all --quiet --filter "name=^${name}\$")" ]; then
  echo "removing container ${name}"
  "$DOCKER" rm --force --volumes "$name" >/dev/null
fi
if [ -n "$("$DOCKER" ps --all --quiet --filter "name=^${name}\$")" ]; then
  echo "container ${name} is still there"
  exit 1
fi

if [ -d "$scratch" ]; then
  echo "deleting ${scratch}"
  rm -rf --one-file-system -- "$scratch"
fi

# A gang member's partition membership (README "Gangs") goes with the lease: the next
# tenant on this node must not inherit it. The program ignores leases it never placed.
if [ -n "${GANG_PKEY_CMD:-}" ]; then
  if ! "$GANG_PKEY_CMD" release "$GPUX_LEASE_ID"; then
    echo "GANG_PKEY_CMD could not release lease ${GPUX_LEASE_ID}'s partition"
    exit 1
  fi
fi

# Nothing may still compute on the lease's GPUs.
if command -v nvidia-smi >/dev/null 2>&1 && [ -n "${GPUX_GPU_UUIDS:-}" ]; then
  busy="$(nvidia-smi --query-compute-apps=gpu_uuid,pid --format=csv,noheader |
    grep -F -e "${GPUX_GPU_UUIDS//,/$'\n'}" || true)"
  if [ -n "$busy" ]; then
    echo "processes still on the lease's GPUs: ${busy}"
    exit 1
  fi
fi

printf '%s\n' "container ${name} removed with its volumes (docker rm --force --volumes); scratch directory deleted; no compute process left on ${GPUX_GPU_UUIDS:-its GPUs}" >&3
