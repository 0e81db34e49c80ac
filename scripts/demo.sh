#!/usr/bin/env bash
# demo.sh: `make demo`, the whole mission on this machine.
#
#   1. a runc container in a Kubernetes-shaped cgroup (scripts/demo-runc.sh up),
#      named shop/web-0 container app by a --pod-map file
#   2. `correlator run`: BPF capture, audit log tail, API with a bearer token,
#      on a temporary SQLite store
#   3. two overlapping `kubectl exec` sessions, as the runtime lands them
#      (runc exec --env KUBERNETES_EXEC_AUDIT_ID=<id>): alice's, and bob's
#      (impersonating a service account), which removes the variable and
#      leaves a background child running; between them, an intruder in the
#      pod with no session reads alice's ID from /proc/<pid>/environ and
#      execs in place with it
#   4. their audit records as kube-apiserver writes them: alice's appended to
#      the audit log file, bob's POSTed to the audit webhook as an EventList
#   5. mallory reuses alice's audit ID (her own Audit-ID header) with a
#      genuine exec: a claimant of alice's session, flagged audit_id_reused,
#      until her record arrives; then her own session, <alice's ID>~<hash>
#   6. `correlator sessions` and the session trees, read through the API
#
# Every expected fact is checked from the API's JSON (the intruder must be a
# claimant of alice's session, never hers, and raise borrowed-audit-id;
# mallory's command is never alice's); a missing one fails
# the demo. The agent, the container, its cgroups, the pinned map and the
# temporary directory are removed on every exit path.
# Needs root (BPF, runc, cgroups), jq, curl, runc and busybox-static
# (`make deps`). CORRELATOR overrides the binary (default bin/correlator).
# DEMO_CONFIG runs the agent with that config file (for instance the Helm
# chart's, from deploy/render-config.sh); the demo's own flags override the
# listener, token, store, pod map, audit log and pin path it names.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

readonly CORRELATOR=${CORRELATOR:-bin/correlator}
readonly RUNC_SH=scripts/demo-runc.sh
readonly KEY=KUBERNETES_EXEC_AUDIT_ID
readonly LOCK=/run/correlator-demo.lock
readonly PIN=/sys/fs/bpf/correlator-demo
readonly NS=shop POD=web-0 CTR=app
readonly PORT=${DEMO_PORT:-18080}
readonly SERVER=http://127.0.0.1:$PORT

log() { printf 'demo: %s\n' "$*" >&2; }
die() {
	log "$*"
	exit 1
}
header() { printf '\n== %s\n' "$*"; }

agent_pid=
container_up=0
work=

cleanup() {
	local rc=$?
	trap - EXIT INT TERM
	if [[ -n $agent_pid ]] && kill -0 "$agent_pid" 2>/dev/null; then
		kill -TERM "$agent_pid" 2>/dev/null || true
		wait "$agent_pid" 2>/dev/null || true
	fi
	if ((container_up)); then
		"$RUNC_SH" down >/dev/null 2>&1 || log "removing the demo container failed; run: $RUNC_SH down"
	fi
	rm -rf "$PIN"
	if ((rc != 0)) && [[ -n $work && -f $work/agent.log ]]; then
		log "agent log (last 20 lines):"
		tail -n 20 "$work/agent.log" >&2
	fi
	[[ -n $work ]] && rm -rf "$work"
	exit "$rc"
}

preflight() {
	if [[ $(id -u) -ne 0 ]]; then
		die "must run as root: the agent loads BPF programs into the kernel, and runc
      creates the container and its cgroups. Run: sudo make demo"
	fi
	local c
	for c in jq curl; do
		command -v "$c" >/dev/null || die "$c is missing; run: make deps"
	done
	[[ -x $CORRELATOR ]] || die "$CORRELATOR is missing; run: make build (or make demo)"
	exec 8>"$LOCK"
	flock -n 8 || die "another demo is running (lock $LOCK held); the container name is shared"
	if curl -s -o /dev/null "$SERVER/healthz"; then
		die "port $PORT is taken; set DEMO_PORT to a free port"
	fi
}

# audit_events <audit-id> <user> <as-user|""> <received> <end> <command...>
# prints the request's audit events (RequestReceived, ResponseStarted with the
# faked 101 of a stream upgrade, ResponseComplete), one JSON object per line,
# as kube-apiserver's log backend writes them for a WebSocket `kubectl exec`.
audit_events() {
	local id=$1 user=$2 as=$3 received=$4 end=$5
	shift 5
	jq -nc --arg id "$id" --arg user "$user" --arg asuser "$as" --arg rcv "$received" --arg endts "$end" \
		--arg ns "$NS" --arg pod "$POD" --arg ctr "$CTR" --args '
		($ARGS.positional | map("command=" + @uri "\(.)") | join("&")) as $cmd
		| {kind: "Event", apiVersion: "audit.k8s.io/v1", level: "Metadata", auditID: $id,
		   requestURI: "/api/v1/namespaces/\($ns)/pods/\($pod)/exec?\($cmd)&container=\($ctr)&stdin=true&stdout=true&tty=true",
		   verb: "get",
		   user: {username: $user, groups: ["sre", "system:authenticated"]},
		   sourceIPs: ["192.0.2.10"], userAgent: "kubectl/v1.36.0 (linux/amd64) kubernetes/abcdef0",
		   objectRef: {resource: "pods", namespace: $ns, name: $pod, apiVersion: "v1", subresource: "exec"},
		   requestReceivedTimestamp: $rcv,
		   annotations: {"authorization.k8s.io/decision": "allow", "authorization.k8s.io/reason": "RBAC: allowed by RoleBinding \"sre/shop\""}}
		| if $asuser != "" then .impersonatedUser = {username: $asuser} else . end
		| (. + {stage: "RequestReceived", stageTimestamp: $rcv}),
		  (. + {stage: "ResponseStarted", stageTimestamp: $rcv, responseStatus: {metadata: {}, code: 101}}),
		  (. + {stage: "ResponseComplete", stageTimestamp: $endts, responseStatus: {metadata: {}, code: 101}})
	' "$@"
}

now() { date -u +%Y-%m-%dT%H:%M:%S.%6NZ; }

cli() { "$CORRELATOR" "$@" --server "$SERVER" --token-file "$work/token"; }

wait_ready() {
	for _ in $(seq 600); do
		curl -sf -o /dev/null "$SERVER/readyz" && return 0
		kill -0 "$agent_pid" 2>/dev/null || die "correlator run exited: $(tail -n 20 "$work/agent.log")"
		sleep 0.1
	done
	die "correlator run not ready within 60 s"
}

# wait_attributed <audit-id>: until the session has its user and every
# process of its tree is attributed (the join is asynchronous).
wait_attributed() {
	local id=$1
	for _ in $(seq 300); do
		if cli session "$id" -o json 2>/dev/null |
			jq -e '.user.username != "" and (.processes | length) > 0 and
				all(.processes[]; .attribution == "audit_id" or .attribution == "inherited")' >/dev/null; then
			return 0
		fi
		sleep 0.1
	done
	die "session $id was not attributed within 30 s: $(cli session "$id" -o json 2>&1 | head -c 2000)"
}

# wait_claimed <audit-id>: until the session lists a claimant (a process
# that carried its ID without belonging to it).
wait_claimed() {
	local id=$1
	for _ in $(seq 300); do
		cli session "$id" -o json 2>/dev/null | jq -e '(.claimants // []) | length > 0' >/dev/null && return 0
		sleep 0.1
	done
	die "session $id lists no claimant within 30 s"
}

# wait_process <command-substring> <jq-filter>: until every stored process
# whose argv holds the substring passes the filter (and there is one).
wait_process() {
	local cmd=$1 filter=$2
	for _ in $(seq 300); do
		api "/api/v1/processes?command=$cmd&pod=$POD&limit=50" | jq -e ".items | length > 0 and all(.[]; $filter)" >/dev/null && return 0
		sleep 0.1
	done
	die "processes running $cmd never passed $filter: $(api "/api/v1/processes?command=$cmd&pod=$POD" | head -c 2000)"
}

api() { curl -sf -H "Authorization: Bearer $(cat "$work/token")" "$SERVER$1"; }

# check <audit-id> <description> <jq-filter>: a fact about the session JSON.
check() {
	local id=$1 what=$2 filter=$3
	if cli session "$id" -o json | jq -e "$filter" >/dev/null; then
		printf '  ok       %s\n' "$what"
	else
		printf '  MISSING  %s\n' "$what"
		return 1
	fi
}

main() {
	preflight
	trap cleanup EXIT
	trap 'exit 130' INT TERM
	work=$(mktemp -d /tmp/correlator-demo-XXXXXX)

	header "1. a runc container in a Kubernetes-shaped cgroup"
	local ids
	ids=$("$RUNC_SH" up)
	container_up=1
	local container_id
	container_id=$(sed -n 's/^CONTAINER_ID=//p' <<<"$ids")
	echo "$ids"
	jq -n --arg id "$container_id" --arg uid "$(sed -n 's/^POD_UID=//p' <<<"$ids")" \
		--arg ns "$NS" --arg pod "$POD" --arg ctr "$CTR" \
		'[{containerID: $id, podUID: $uid, namespace: $ns, pod: $pod, container: $ctr}]' >"$work/pods.json"
	echo "pod map: container ${container_id:0:12}… is $NS/$POD container $CTR"

	header "2. correlator run (BPF capture, audit log tail, authenticated API, SQLite)"
	head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$work/token"
	: >"$work/audit.log"
	local config=()
	[[ -n ${DEMO_CONFIG:-} ]] && config=(--config "$DEMO_CONFIG") && echo "agent config: $DEMO_CONFIG"
	"$CORRELATOR" run "${config[@]}" --listen "127.0.0.1:$PORT" --token-file "$work/token" \
		--store "sqlite:$work/correlator.db" --pod-map "$work/pods.json" \
		--audit-log "$work/audit.log" --audit-checkpoint-dir "$work/checkpoints" \
		--pin-path "$PIN" >"$work/agent.log" 2>&1 &
	agent_pid=$!
	wait_ready
	echo "agent pid $agent_pid, API $SERVER, store $work/correlator.db"
	local code
	code=$(curl -s -o /dev/null -w '%{http_code}' "$SERVER/api/v1/sessions")
	echo "GET /api/v1/sessions without a token: HTTP $code"
	[[ $code == 401 ]] || die "the API answered $code without a token, want 401"

	header "3. two overlapping exec sessions"
	local alice bob t_alice t_bob
	alice=$(cat /proc/sys/kernel/random/uuid)
	bob=$(cat /proc/sys/kernel/random/uuid)
	t_alice=$(now)
	echo "alice: kubectl exec -it web-0 -c app -- sh   ($KEY=$alice)"
	# Absolute paths where it matters: busybox sh runs some applets (ls, id)
	# inside a forked shell without an exec, and only execs are recorded.
	"$RUNC_SH" exec "$alice" 'cat /etc/hostname; sleep 2; /bin/ls / | wc -l; true' >/dev/null &
	local alice_exec=$!
	sleep 0.5
	echo "an intruder in the pod, with no session of its own (runc exec without $KEY), reads alice's"
	echo "  ID from /proc/<pid>/environ and execs in place with it: exec env $KEY=<alice's> sh -c …"
	# shellcheck disable=SC2016 # expanded by the container's shell
	"$RUNC_SH" exec - 'ID=$(for e in /proc/[0-9]*/environ; do /bin/tr "\0" "\n" < $e; done | /bin/sed -n "s/^'"$KEY"'=//p" | /bin/head -n 1)
		[ -n "$ID" ] && exec /bin/env '"$KEY"'=$ID /bin/sh -c "/bin/cat /etc/hostname; /bin/echo borrowed; true"' >/dev/null
	t_bob=$(now)
	echo "bob (as system:serviceaccount:shop:deployer): kubectl exec -it web-0 -c app -- sh   ($KEY=$bob)"
	echo "  bob's shell unsets $KEY and leaves a background child running"
	"$RUNC_SH" exec "$bob" "unset $KEY; /bin/id; (sleep 3 &); sh -c 'echo hidden'; true" >/dev/null
	wait "$alice_exec"

	header "4. the audit records: alice's from the log file, bob's from the webhook"
	audit_events "$alice" alice "" "$t_alice" "$(now)" sh >>"$work/audit.log"
	echo "appended 3 events for $alice to $work/audit.log"
	audit_events "$bob" bob system:serviceaccount:shop:deployer "$t_bob" "$(now)" sh |
		jq -sc '{kind: "EventList", apiVersion: "audit.k8s.io/v1", metadata: {}, items: .}' >"$work/bob.json"
	code=$(curl -s -o /dev/null -w '%{http_code}' -H "Authorization: Bearer $(cat "$work/token")" \
		-H 'Content-Type: application/json' --data-binary "@$work/bob.json" "$SERVER/api/v1/audit/webhook")
	echo "POST /api/v1/audit/webhook (EventList, 3 events for $bob): HTTP $code"
	[[ $code == 200 ]] || die "the webhook answered $code"
	wait_attributed "$alice"
	wait_attributed "$bob"

	wait_claimed "$alice"

	header "5. mallory reuses alice's audit ID with a genuine exec of her own"
	echo "mallory: kubectl exec web-0 -c app -- /bin/echo mallory-was-here, sending Audit-ID: $alice"
	echo "  (kube-apiserver takes the header verbatim, so the runtime injects alice's ID into mallory's root)"
	local t_mallory mkey
	t_mallory=$(now)
	"$RUNC_SH" exec "$alice" '/bin/echo mallory-was-here; true' >/dev/null
	wait_process mallory-was-here '.auditID == null and .claimedAuditID == "'"$alice"'" and (.flags | index("audit_id_reused"))'
	echo "before her record arrives: a claimant of alice's session, flagged audit_id_reused, never alice's"
	audit_events "$alice" mallory "" "$t_mallory" "$(now)" /bin/echo mallory-was-here |
		jq -sc '{kind: "EventList", apiVersion: "audit.k8s.io/v1", metadata: {}, items: .}' >"$work/mallory.json"
	curl -sf -o /dev/null -H "Authorization: Bearer $(cat "$work/token")" -H 'Content-Type: application/json' \
		--data-binary "@$work/mallory.json" "$SERVER/api/v1/audit/webhook" || die "posting mallory's record"
	wait_process mallory-was-here '(.auditID // "") | startswith("'"$alice"'~")'
	mkey=$(api "/api/v1/processes?command=mallory-was-here&pod=$POD&limit=1" | jq -r '.items[0].auditID')
	echo "after it: mallory's own session, $mkey (alice's ID, ~, a hash of mallory's request)"

	header "6. correlator sessions"
	cli sessions --namespace "$NS"
	header "correlator session $alice"
	cli session "$alice"
	header "correlator session $bob"
	cli session "$bob"
	header "correlator session $mkey"
	cli session "$mkey"

	header "what the demo checked, from the API's JSON"
	local fails=0
	check "$alice" "alice's session: user alice, every process attributed to it" \
		'.user.username == "alice" and all(.processes[]; .auditID == "'"$alice"'")' || fails=1
	check "$alice" "alice's commands: cat, sleep, ls, wc" \
		'[.processes[].argv[0]] as $a | all(("cat","sleep","/bin/ls","wc"); . as $c | $a | index($c))' || fails=1
	check "$bob" "bob's session: bob acting as system:serviceaccount:shop:deployer" \
		'.user.username == "bob" and .impersonatedUser.username == "system:serviceaccount:shop:deployer"' || fails=1
	check "$bob" "bob removed $KEY: his later commands still attributed, flagged env_removed" \
		'[.processes[] | select(.flags // [] | index("env_removed"))] | length > 0 and all(.[]; .auditID == "'"$bob"'")' || fails=1
	check "$bob" "bob's background child (sleep 3) is in his tree, attributed" \
		'any(.processes[]; .argv == ["sleep","3"] and .attribution == "inherited")' || fails=1
	check "$bob" "no process of alice's session is in bob's" \
		'all(.processes[]; .auditID != "'"$alice"'")' || fails=1
	check "$alice" "the intruder who borrowed alice's ID: listed as a claimant, flagged root_unverified, never alice's" \
		'(.claimants | length) > 0 and all(.claimants[]; .auditID == null or .auditID == "") and
		 any(.claimants[]; .flags | index("root_unverified")) and
		 all(.processes[]; (.argv | index("borrowed")) == null)' || fails=1
	if curl -sf -H "Authorization: Bearer $(cat "$work/token")" "$SERVER/api/v1/alerts?rule=borrowed-audit-id" |
		jq -e '[.items[] | select(.message | contains("of alice"))] | length > 0' >/dev/null; then
		printf '  ok       %s\n' "alert borrowed-audit-id names alice as the claimed user, and the real process"
		curl -sf -H "Authorization: Bearer $(cat "$work/token")" "$SERVER/api/v1/alerts?rule=borrowed-audit-id&limit=1" |
			jq -r '.items[0].message' | sed 's/^/           /'
	else
		printf '  MISSING  %s\n' "alert borrowed-audit-id for the intruder"
		fails=1
	fi
	check "$mkey" "mallory's exec under alice's ID is mallory's own session, flagged audit_id_conflict, listing alice's request" \
		'.user.username == "mallory" and (.flags | index("audit_id_conflict")) and any(.conflicts[]; .user.username == "alice") and
		 any(.processes[]; .argv | index("mallory-was-here"))' || fails=1
	if api "/api/v1/processes?user=alice&limit=500" | jq -e 'all(.items[]; (.argv | index("mallory-was-here")) == null)' >/dev/null; then
		printf '  ok       %s\n' "user=alice never returns mallory's command"
	else
		printf '  MISSING  %s\n' "user=alice returns mallory's command"
		fails=1
	fi
	((fails == 0)) || die "some expected facts are missing"
	echo
	echo "demo: done; cleaning up"
}

main "$@"
