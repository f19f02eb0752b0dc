#!/bin/bash
# gpux-agent provision hook: a plain SSH account per lease on this host.
#
#   argv = ["/etc/gpux-agent/hooks/ssh-user-provision.sh", "/etc/gpux-agent/hooks.env"]
#
# Creates the user gpux-<lease id>, installs the buyer's SSH keys as its authorized_keys, and
# points CUDA at the lease's GPUs (CUDA_VISIBLE_DEVICES=<their UUIDs> in the login profile).
# If the launch spec has a command, it runs as that user in its own transient systemd unit
# (gpux-lease-<id>.service), outside the agent's process group, so it outlives this hook.
#
# CUDA_VISIBLE_DEVICES is a convention, not isolation: a user who unsets it sees every GPU.
# Use it on single-tenant hosts, or add device cgroup rules; docker-provision.sh isolates.
# The buyer's ports are not mapped: the user's services listen on them directly.
#
# Output: progress on stderr; the LAST stdout line is the access details JSON.
# Exit 65 (EX_DATAERR) when the buyer's launch spec is at fault (no SSH key, a launch command
# that cannot be found): the exchange ends the lease at no charge, without a failover and
# without holding this node. Any other failure is this host's (exit 1).
# Needs: bash >= 4.4, useradd, jq; systemd-run for a launch command.
set -euo pipefail

settings="${1:-/etc/gpux-agent/hooks.env}"
if [ -r "$settings" ]; then
  # shellcheck source=/dev/null
  . "$settings"
fi
: "${PUBLIC_HOST:?set PUBLIC_HOST in $settings}"
SSH_PORT="${SSH_PORT:-22}"

lease="${GPUX_LEASE_ID:?}"
user="gpux-${lease}"
unit="gpux-lease-${lease}"
exec 3>&1 1>&2

if [ -z "${GPUX_SSH_KEYS:-}" ]; then
  echo "this host offers SSH accounts only: the launch spec has no SSH key"
  exit 65
fi

# A rerun (the agent restarted mid-provision) reuses the account it made.
if ! id -u "$user" >/dev/null 2>&1; then
  useradd --create-home --shell /bin/bash --comment "gpux lease ${lease}" "$user"
fi
home="$(getent passwd "$user" | cut -d: -f6)"

install -d -m 0700 -o "$user" -g "$user" "${home}/.ssh"
printf '%s\n' "$GPUX_SSH_KEYS" >"${home}/.ssh/authorized_keys"
chown "$user:$user" "${home}/.ssh/authorized_keys"
chmod 0600 "${home}/.ssh/authorized_keys"

# The login environment: the lease's GPUs, then the buyer's variables, each value quoted for
# bash with printf %q (so it is read back as data, never run).
env_json="${GPUX_ENV_JSON:-}"
mapfile -d '' -t env_pairs < <(printf '%s' "${env_json:-"{}"}" |
  jq -j 'to_entries[] | (.key, "\u0000", .value, "\u0000")')
profile="${home}/.gpux_lease"
{
  printf 'export CUDA_DEVICE_ORDER=PCI_BUS_ID\n'
  printf 'export CUDA_VISIBLE_DEVICES=%q\n' "${GPUX_GPU_UUIDS:?}"
  for ((i = 0; i + 1 < ${#env_pairs[@]}; i += 2)); do
    printf 'export %s=%q\n' "${env_pairs[i]}" "${env_pairs[i + 1]}"
  done
} >"$profile"
chown "$user:$user" "$profile"
for rc in .profile .bashrc; do
  if ! grep -qsF '. ~/.gpux_lease' "${home}/${rc}"; then
    printf '%s\n' '[ -r ~/.gpux_lease ] && . ~/.gpux_lease' >>"${home}/${rc}"
    chown "$user:$user" "${home}/${rc}"
  fi
done

# The launch command, if any, as the user, in a transient unit the teardown stops.
command_json="${GPUX_COMMAND_JSON:-}"
mapfile -d '' -t command < <(printf '%s' "${command_json:-[]}" | jq -j '.[] | (., "\u0000")')
if [ "${#command[@]}" -gt 0 ]; then
  setenv=(--setenv=CUDA_DEVICE_ORDER=PCI_BUS_ID --setenv="CUDA_VISIBLE_DEVICES=${GPUX_GPU_UUIDS}")
  for ((i = 0; i + 1 < ${#env_pairs[@]}; i += 2)); do
    setenv+=(--setenv="${env_pairs[i]}=${env_pairs[i + 1]}")
  done
  systemctl stop "${unit}.service" >/dev/null 2>&1 || true
  if ! run_error="$(systemd-run --quiet --unit "$unit" --uid "$user" --gid "$user" \
    --working-directory "$home" "${setenv[@]}" -- "${command[@]}" 2>&1)"; then
    echo "$run_error"
    case "$run_error" in
    *"Failed to find executable"* | *"No such file or directory"*)
      echo "the launch command ${command[0]} cannot be found on this host"
      exit 65
      ;;
    esac
    exit 1
  fi
fi

urls='{}'
if [ -n "${GPUX_PORTS:-}" ]; then
  IFS=, read -r -a ports <<<"$GPUX_PORTS"
  for port in "${ports[@]}"; do
    urls="$(jq -cn --argjson urls "$urls" --arg port "$port" --arg url "http://${PUBLIC_HOST}:${port}" '$urls + {($port): $url}')"
  done
fi

jq -cn --arg host "$PUBLIC_HOST" --argjson port "$SSH_PORT" --arg user "$user" --argjson urls "$urls" \
  '{ssh_host: $host, ssh_port: $port, ssh_user: $user, urls: $urls}' >&3
