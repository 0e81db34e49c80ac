#!/usr/bin/env bash
# measure-idle.sh: the agent's idle CPU and RSS on this machine (root).
# Starts `correlator run` with the default settings on a temporary SQLite
# store, lets it settle, then reads its CPU time and resident set from
# /proc over SECONDS_IDLE (default 60). Quiet the machine first: every exec
# on the host is work for the agent.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
readonly BIN=${CORRELATOR:-bin/correlator} IDLE=${SECONDS_IDLE:-60}
[[ $(id -u) -eq 0 ]] || { echo "measure-idle: run as root" >&2; exit 1; }
work=$(mktemp -d)
pin=/sys/fs/bpf/correlator-idle-$$
"$BIN" run --insecure-no-auth --listen 127.0.0.1:18199 --store "sqlite:$work/c.db" \
	--pin-path "$pin" --audit-checkpoint-dir "" 2>"$work/log" &
pid=$!
trap 'kill -TERM $pid 2>/dev/null; wait $pid 2>/dev/null; rm -rf "$work" "$pin"' EXIT
sleep 10
ticks() { awk '{print $14 + $15}' "/proc/$pid/stat"; }
hz=$(getconf CLK_TCK)
t0=$(ticks)
sleep "$IDLE"
t1=$(ticks)
rss=$(awk '/^VmRSS/ {print $2}' "/proc/$pid/status")
awk -v d=$((t1 - t0)) -v hz="$hz" -v s="$IDLE" -v rss="$rss" 'BEGIN {
	printf "idle CPU: %.2f%% of one core (%d ticks in %d s)\nRSS: %.1f MiB\n", 100 * d / hz / s, d, s, rss / 1024 }'
