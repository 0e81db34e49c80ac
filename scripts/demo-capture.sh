#!/usr/bin/env bash
# demo-capture.sh: `make demo-capture`. One kubectl-exec-like session in a real runc
# container, captured by `correlator capture`, then shown as a table and a
# short account of the evidence, all derived from the captured JSON.
#
#   1. scripts/demo-runc.sh up            a busybox container in a
#                                         Kubernetes-shaped cgroup
#   2. bin/correlator capture --containers-only > events.jsonl
#   3. scripts/demo-runc.sh session <id>  exec with KUBERNETES_EXEC_AUDIT_ID=<id>;
#                                         the session forks, double-forks, drops
#                                         and rewrites the key; then a forged root
#   4. SIGINT to capture; scripts/demo-runc.sh down
#   5. the container's events, read back with jq
#
# Needs root (BPF, runc, cgroups), jq, runc and busybox-static (`make deps`).
# The container, its cgroups and the capture process are removed on every exit
# path; the captured JSON stays, and its path is printed.
# CORRELATOR overrides the binary (default bin/correlator).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

readonly CORRELATOR=${CORRELATOR:-bin/correlator}
readonly RUNC_SH=scripts/demo-runc.sh
readonly KEY=KUBERNETES_EXEC_AUDIT_ID
readonly LOCK=/run/correlator-demo.lock

log() { printf 'demo: %s\n' "$*" >&2; }
die() {
	log "$*"
	exit 1
}
header() { printf '\n== %s\n' "$*"; }

capture_pid=
container_up=0

# stop_capture sends SIGINT (capture closes its links and flushes) and waits;
# a capture that has not stopped after 10 s is killed.
stop_capture() {
	[[ -n $capture_pid ]] || return 0
	local pid=$capture_pid rc=0
	capture_pid=
	if kill -0 "$pid" 2>/dev/null; then
		kill -INT "$pid" 2>/dev/null || true
		for _ in $(seq 100); do
			kill -0 "$pid" 2>/dev/null || break
			sleep 0.1
		done
		if kill -0 "$pid" 2>/dev/null; then
			log "capture (pid $pid) ignored SIGINT for 10 s; killing it"
			kill -KILL "$pid" 2>/dev/null || true
		fi
	fi
	wait "$pid" || rc=$?
	return "$rc"
}

cleanup() {
	local rc=$?
	trap - EXIT INT TERM
	stop_capture || true
	if ((container_up)); then
		"$RUNC_SH" down >/dev/null 2>&1 || log "removing the demo container failed; run: $RUNC_SH down"
	fi
	exit "$rc"
}

preflight() {
	if [[ $(id -u) -ne 0 ]]; then
		die "must run as root: the capture loads BPF programs into the kernel, and runc
      creates the container and its cgroups. Run: sudo make demo"
	fi
	command -v jq >/dev/null || die "jq is missing (it reads the captured JSON back); run: make deps"
	[[ -x $CORRELATOR ]] || die "$CORRELATOR is missing; run: make build (or make demo)"
	exec 8>"$LOCK"
	flock -n 8 || die "another demo is running (lock $LOCK held); the container name is shared"
}

# wait_capturing waits for capture's "capturing" log line: programs loaded,
# attached, and procfs bootstrapped.
wait_capturing() {
	local caplog=$1
	for _ in $(seq 600); do
		grep -q '"capturing"' "$caplog" && return 0
		if ! kill -0 "$capture_pid" 2>/dev/null; then
			wait "$capture_pid" || true
			capture_pid=
			die "correlator capture exited before capturing:
$(cat "$caplog")"
		fi
		sleep 0.1
	done
	die "correlator capture did not start within 60 s:
$(cat "$caplog")"
}

# The container's exec events, in time order; $ctr is the container ID.
readonly JQ_EVENTS='[.[] | select(.kind == "exec" and .containerID == $ctr)] | sort_by(.time)'

readonly JQ_DEFS='
def short: if . == null or . == "" then "-" else .[0:8] end;
def pad($n): tostring | if length < $n then . + (" " * ($n - length)) else . end;
def clip($n): if length > $n then .[0:$n - 1] + "…" else . end;
def arg: gsub("^\\s+|\\s+$"; "") | gsub("\\s*\n\\s*"; "; ")
	| if test("[\\s\"$;|&()]") then "\u0027" + . + "\u0027" else . end;
def cmd: (.argv // [.filename]) | map(arg) | join(" ") | clip(64);
def flagstr: if (.flags | length) == 0 then "-" else .flags | join(",") end;
def who: "pid \(.pid) `\(cmd)`";
'

print_table() {
	local events=$1 ctr=$2
	jq -rs --arg ctr "$ctr" "$JQ_DEFS"'
		'"$JQ_EVENTS"'
		| (["PID", "PPID", "AUDIT-ID", "SOURCE", "FLAGS", "ARGV"] | [(.[0]|pad(7)), (.[1]|pad(7)), (.[2]|pad(9)), (.[3]|pad(10)), (.[4]|pad(16)), .[5]] | join(" ")),
		  (.[] | [(.pid|pad(7)), (.ppid|pad(7)), (.auditID|short|pad(9)), ((.source // "-")|if . == "" then "-" else . end|pad(10)), (flagstr|pad(16)), cmd] | join(" "))
	' "$events"
}

# print_story derives the account of the session from the events: who carries
# the session ID and how, and each piece of tamper evidence. It exits non-zero
# when an expected piece is missing, so a broken capture fails the demo.
print_story() {
	local events=$1 ctr=$2 session=$3 init_pid=$4 story
	story=$(jq -rs --arg ctr "$ctr" --arg sid "$session" --arg key "$KEY" --argjson init "$init_pid" "$JQ_DEFS"'
		'"$JQ_EVENTS"' as $ev
		| ($ev | map(select(.auditID == $sid))) as $s
		| ($s | map(.processID) | unique) as $procs
		| ($s | map(select(.source == "env"))) as $roots
		| ($s | map(select(.source == "inherited")) | map(.processID) | unique) as $inh
		| ($s | map(select(.source == "inherited" and .ppid == $init)) | group_by(.processID) | map(last)) as $orphans
		| ($s | map(select(.flags | index("env_removed")))) as $removed
		| ($s | map(select(.flags | index("env_mismatch")))) as $mismatch
		| ($ev | map(select(.flags | index("root_unverified")))) as $forged
		| [
		    "session \($sid):",
		    "  \($procs | length) processes attributed through the kernel lineage",
		    ($roots[] | "    root \(who) took the ID from its own environment (source=env);",
		      "      its parent, pid \(.ppid), is outside the container, so no root_unverified"),
		    "    \($inh | length) more inherited it through fork (source=inherited), down to depth \($s | map(.depth // 0) | max)",
		    ($orphans[] | "  double fork: \(who) was reparented to the container init (pid \(.ppid)) and still carries \(.auditID | short)…"),
		    ($removed[] | "  key removed: \(who) has no \($key) → env_removed, original ID kept (auditID=\(.auditID | short)…)"),
		    ($mismatch[] | "  forged \($key)=\(.claimedAuditID) in \(who)", "    → env_mismatch, claimed value kept (claimedAuditID), auditID stays \(.auditID | short)…"),
		    ($forged[] | "forged root inside the container: \(who) starts a session with \($key)=\(.auditID)",
		      "  set by its parent, pid \(.ppid), in the same container → root_unverified"),
		    (if ($s | length) == 0 then "MISSING: no event carries auditID \($sid)" else empty end),
		    (if ($orphans | length) == 0 then "MISSING: no double-forked process reparented to pid \($init) with the session ID" else empty end),
		    (if ($removed | length) == 0 then "MISSING: no env_removed event" else empty end),
		    (if ($mismatch | length) == 0 then "MISSING: no env_mismatch event" else empty end),
		    (if ($forged | length) == 0 then "MISSING: no root_unverified event" else empty end)
		  ]
		| .[]
	' "$events") || return 1
	printf '%s\n' "$story"
	! grep -q '^MISSING:' <<<"$story"
}

main() {
	preflight
	trap cleanup EXIT
	trap 'exit 130' INT
	trap 'exit 143' TERM

	local out events caplog ids container_id pod_uid init_pid session
	out=$(mktemp -d /tmp/correlator-demo-events.XXXXXX)
	events=$out/events.jsonl
	caplog=$out/capture.log

	header "1. a Kubernetes-shaped runc container ($RUNC_SH up)"
	container_up=1
	ids=$("$RUNC_SH" up)
	container_id=$(sed -n 's/^CONTAINER_ID=//p' <<<"$ids")
	pod_uid=$(sed -n 's/^POD_UID=//p' <<<"$ids")
	init_pid=$(sed -n 's/^INIT_PID=//p' <<<"$ids")
	[[ $container_id =~ ^[0-9a-f]{64}$ && -n $pod_uid && $init_pid =~ ^[0-9]+$ ]] ||
		die "unexpected output from $RUNC_SH up:
$ids"
	printf 'container %s\npod UID   %s\ncgroup    %s\n' "$container_id" "$pod_uid" \
		"$(sed -n 's/^CGROUP_PATH=//p' <<<"$ids")"

	header "2. correlator capture --containers-only"
	"$CORRELATOR" capture --containers-only >"$events" 2>"$caplog" &
	capture_pid=$!
	wait_capturing "$caplog"
	echo "capturing (pid $capture_pid): BPF programs attached to sched_process_exec/fork/exit"

	session=$(cat /proc/sys/kernel/random/uuid)
	header "3. an exec session with $KEY=$session, then a forged root"
	"$RUNC_SH" session "$session" 2>&1 | sed 's/^/    | /'

	sleep 1 # let the last events drain from the ring buffer
	stop_capture || die "correlator capture failed:
$(cat "$caplog")"
	"$RUNC_SH" down 2>&1 | sed 's/^/    | /'
	container_up=0

	header "4. what the kernel recorded for container ${container_id:0:12}"
	print_table "$events" "$container_id"

	header "5. what it shows"
	local ok=0
	print_story "$events" "$container_id" "$session" "$init_pid" || ok=1

	printf '\nraw events (one JSON line each, %d in all): %s\n' "$(wc -l <"$events")" "$events"
	printf 'capture log: %s\n' "$caplog"
	printf 'try: jq -c '\''select(.auditID == "%s")'\'' %s\n' "$session" "$events"
	((ok == 0)) || die "the capture is missing evidence the session must produce (MISSING lines above)"
}

main "$@"
