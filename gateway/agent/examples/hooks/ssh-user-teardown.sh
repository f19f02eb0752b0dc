#!/bin/bash
# gpux-agent teardown hook for ssh-user-provision.sh: stops the lease's unit, kills every
# process of its user, deletes the user's files in the shared temporary directories, then the
# account with its home directory. Safe to run again (the agent retries after a restart).
#
#   argv = ["/etc/gpux-agent/hooks/ssh-user-teardown.sh", "/etc/gpux-agent/hooks.env"]
#
# Output: progress on stderr; the LAST stdout line is the wipe method, kept on the lease as the
# buyer's deletion record. Exit non-zero when the wipe is incomplete.
set -euo pipefail

settings="${1:-/etc/gpux-agent/hooks.env}"
if [ -r "$settings" ]; then
  # shellcheck source=/dev/null
  . "$settings"
fi

lease="${GPUX_LEASE_ID:?}"
user="gpux-${lease}"
unit="gpux-lease-${lease}"
exec 3>&1 1>&2

systemctl stop "${unit}.service" >/dev/null 2>&1 || true

if id -u "$user" >/dev/null 2>&1; then
  # Kill and wait (bounded): a process that survives would keep its files and the GPUs.
  for _ in $(seq 1 20); do
    pkill -KILL -u "$user" || true
    if ! pgrep -u "$user" >/dev/null; then
      break
    fi
    sleep 0.5
  done
  if pgrep -u "$user" >/dev/null; then
    echo "processes of ${user} survive SIGKILL: $(pgrep -u "$user" | tr '\n' ' ')"
    exit 1
  fi
  for dir in /tmp /var/tmp /dev/shm; do
    find "$dir" -xdev -user "$user" -delete 2>/dev/null || true
  done
  userdel --remove "$user" 2>&1 | grep -v 'mail spool' || true
  if id -u "$user" >/dev/null 2>&1; then
    echo "userdel left ${user} in place"
    exit 1
  fi
fi

printf '%s\n' "user ${user}: processes killed, its files in /tmp, /var/tmp and /dev/shm deleted, account and home directory removed (userdel --remove)" >&3
