#!/usr/bin/env bash
# demo-runc.sh: a Kubernetes-shaped runc container for `make demo`.
#
#   demo-runc.sh up                  create the busybox container "correlator-demo"
#                                    and print CONTAINER_ID=, POD_UID=, CGROUP_PATH=,
#                                    INIT_PID= lines (stdout is KEY=VALUE only)
#   demo-runc.sh session <audit-id>  one exec session as a KEP-6035 runtime lands a
#                                    `kubectl exec`, then one forged root
#   demo-runc.sh exec <audit-id|-> <script>
#                                    `sh -c <script>` as a KEP-6035 runtime lands a
#                                    `kubectl exec` with that audit ID ("-": none)
#   demo-runc.sh down                kill and delete the container and its cgroups
#
# The container uses runc's default state root, so `runc exec correlator-demo ...`
# works by hand. Files live under ${DEMO_DIR:-/tmp/correlator-demo}.
set -euo pipefail

readonly NAME=correlator-demo
readonly KEY=KUBERNETES_EXEC_AUDIT_ID
readonly FORGED_ID=11111111-2222-3333-4444-555555555555
readonly DEMO_DIR="${DEMO_DIR:-/tmp/correlator-demo}"
readonly BUNDLE="$DEMO_DIR/bundle"
readonly IDS="$DEMO_DIR/ids.env"
# Shared with internal/testutil: creating a kubepods cgroup takes it shared,
# removing the shared kubepods parents takes it exclusive.
readonly CGROUP_LOCK=/run/correlator-testutil-cgroups.lock

log() { echo "demo-runc: $*" >&2; }
die() { log "$*"; exit 1; }

usage() {
	echo "usage: $0 up | session <audit-id> | exec <audit-id|-> <script> | down" >&2
	exit 2
}

# is_static: ldd exits 1 for a static binary, so match its message instead.
is_static() {
	local out
	out=$(LC_ALL=C ldd "$1" 2>&1 || true)
	[[ $out == *"not a dynamic executable"* || $out == *"statically linked"* ]]
}

# ensure_deps checks for root and the tools; runc and busybox-static are
# installed with apt-get if missing (one apt-get update first).
ensure_deps() {
	[[ $(id -u) -eq 0 ]] || die "must run as root (runc, cgroups); try: sudo $0 $*"
	local pkgs=()
	command -v runc >/dev/null || pkgs+=(runc)
	if ! command -v busybox >/dev/null || ! is_static "$(command -v busybox)"; then
		pkgs+=(busybox-static)
	fi
	if ((${#pkgs[@]})); then
		if command -v apt-get >/dev/null; then
			log "installing ${pkgs[*]} with apt-get"
			DEBIAN_FRONTEND=noninteractive apt-get update -qq >&2 &&
				DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${pkgs[@]}" >&2 ||
				die "apt-get install failed; missing packages: ${pkgs[*]}"
		else
			die "missing packages: ${pkgs[*]} (no apt-get here; install them by hand)"
		fi
	fi
	local missing=() c
	for c in runc busybox awk od flock ldd; do
		command -v "$c" >/dev/null || missing+=("$c")
	done
	((${#missing[@]} == 0)) || die "missing commands: ${missing[*]}"
	is_static "$(command -v busybox)" || die "busybox is dynamically linked; missing package: busybox-static"
}

exists() { runc state "$NAME" >/dev/null 2>&1; }

status() { runc state "$NAME" 2>/dev/null | awk -F'"' '/"status"/ {print $4}'; }

# remove_cgroups <cgroups-path>: rmdir the container, pod and kubepods dirs in
# every cgroup hierarchy, leaf first; a parent still in use stays.
remove_cgroups() {
	local path=$1 mnt p
	[[ $path == /kubepods/* ]] || return 0
	exec 9>"$CGROUP_LOCK"
	flock 9
	for mnt in $(awk '$3 == "cgroup" || $3 == "cgroup2" {print $2}' /proc/self/mounts); do
		p=$path
		while [[ $p == /kubepods* ]]; do
			if [[ -d $mnt$p ]] && ! rmdir "$mnt$p" 2>/dev/null; then
				[[ $p == "$path" ]] && log "cgroup $mnt$p still busy"
				break
			fi
			p=${p%/*}
		done
	done
	flock -u 9
	exec 9>&-
}

teardown() {
	if exists; then
		log "removing container $NAME"
		runc kill "$NAME" KILL 2>/dev/null || true
		for _ in $(seq 50); do
			[[ $(status) == stopped ]] && break
			sleep 0.1
		done
		runc delete -f "$NAME" >/dev/null 2>&1 || true
		exists && die "runc delete -f $NAME failed"
	fi
	if [[ -f $IDS ]]; then
		remove_cgroups "$(awk -F= '$1 == "CGROUP_PATH" {print $2}' "$IDS")"
	fi
	# Only what up created: DEMO_DIR itself may be a caller's directory.
	rm -rf "$BUNDLE"
	rm -f "$IDS" "$DEMO_DIR/init.pid" "$DEMO_DIR/init.log"
	[[ ! -d $DEMO_DIR ]] || rmdir "$DEMO_DIR" 2>/dev/null || true
}

write_config() {
	local cgroups_path=$1
	cat >"$BUNDLE/config.json" <<-JSON
	{
	  "ociVersion": "1.0.2",
	  "process": {
	    "terminal": false,
	    "user": {"uid": 0, "gid": 0},
	    "args": ["/bin/sleep", "100000"],
	    "env": ["PATH=/bin", "HOSTNAME=$NAME", "HOME=/root"],
	    "cwd": "/",
	    "capabilities": {
	      "bounding": ["CAP_AUDIT_WRITE", "CAP_KILL", "CAP_NET_BIND_SERVICE"],
	      "effective": ["CAP_AUDIT_WRITE", "CAP_KILL", "CAP_NET_BIND_SERVICE"],
	      "permitted": ["CAP_AUDIT_WRITE", "CAP_KILL", "CAP_NET_BIND_SERVICE"]
	    },
	    "rlimits": [{"type": "RLIMIT_NOFILE", "hard": 1024, "soft": 1024}],
	    "noNewPrivileges": true
	  },
	  "root": {"path": "rootfs", "readonly": false},
	  "hostname": "$NAME",
	  "mounts": [
	    {"destination": "/proc", "type": "proc", "source": "proc"},
	    {"destination": "/dev", "type": "tmpfs", "source": "tmpfs",
	     "options": ["nosuid", "strictatime", "mode=755", "size=65536k"]},
	    {"destination": "/tmp", "type": "tmpfs", "source": "tmpfs",
	     "options": ["nosuid", "nodev", "mode=1777", "size=16384k"]}
	  ],
	  "linux": {
	    "cgroupsPath": "$cgroups_path",
	    "namespaces": [{"type": "pid"}, {"type": "mount"}, {"type": "ipc"}, {"type": "uts"}],
	    "resources": {"devices": [{"allow": false, "access": "rwm"}]},
	    "maskedPaths": ["/proc/kcore", "/proc/keys", "/proc/timer_list"],
	    "readonlyPaths": ["/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger"]
	  }
	}
	JSON
}

cmd_up() {
	teardown
	local pod_uid container_id cgroups_path busybox applet
	pod_uid=$(cat /proc/sys/kernel/random/uuid)
	container_id=$(od -An -tx1 -N32 /dev/urandom | tr -d ' \n')
	cgroups_path=/kubepods/burstable/pod$pod_uid/$container_id
	busybox=$(command -v busybox)

	mkdir -p "$BUNDLE"/rootfs/{bin,proc,dev,tmp,etc,root,sys}
	cp "$busybox" "$BUNDLE/rootfs/bin/busybox"
	for applet in $("$busybox" --list) sh ls env sleep cat echo true id ps wc head; do
		[[ $applet == busybox || $applet == */* ]] && continue
		ln -sf busybox "$BUNDLE/rootfs/bin/$applet"
	done
	echo "root:x:0:0:root:/root:/bin/sh" >"$BUNDLE/rootfs/etc/passwd"
	echo "root:x:0:" >"$BUNDLE/rootfs/etc/group"
	echo "$NAME" >"$BUNDLE/rootfs/etc/hostname"
	write_config "$cgroups_path"
	printf 'CONTAINER_ID=%s\nPOD_UID=%s\nCGROUP_PATH=%s\n' "$container_id" "$pod_uid" "$cgroups_path" >"$IDS"

	# Detached without a terminal, runc hands its stdio to the init process:
	# keep it off our stdout so callers reading it do not hang.
	flock -s "$CGROUP_LOCK" runc run -d --bundle "$BUNDLE" --pid-file "$DEMO_DIR/init.pid" "$NAME" \
		</dev/null >"$DEMO_DIR/init.log" 2>&1 ||
		die "starting runc container $NAME: $(cat "$DEMO_DIR/init.log")"
	cat "$IDS"
	echo "INIT_PID=$(cat "$DEMO_DIR/init.pid")"
	log "container $NAME running in $cgroups_path"
}

# The session script, run as `sh -c` by the exec'd root. Each step is what the
# capture must follow: a fork, a pipeline, a double-forked daemon that outlives
# its parent, a removed key and a rewritten key. It ends with an echo so the
# shell never execs its last command in place.
readonly SESSION_SCRIPT='
id
ls / | wc -l
(sh -c "sleep 1; cat /etc/hostname" &) ; sleep 2
env -u KUBERNETES_EXEC_AUDIT_ID sh -c "echo removed"
KUBERNETES_EXEC_AUDIT_ID=00000000-0000-0000-0000-000000000000 sh -c "echo forged"
echo session done
'

# The forged root: an exec WITHOUT the key whose shell invents one for a child.
# "; true" keeps sh from exec-ing in place, so the forging process is a child
# of a process inside the container, not of runc.
readonly FORGED_SCRIPT="$KEY=$FORGED_ID sh -c id; true"

cmd_session() {
	local audit_id=${1:-}
	[[ -n $audit_id ]] || usage
	[[ $(status) == running ]] || die "container $NAME is not running; run: $0 up"
	log "exec session $KEY=$audit_id"
	runc exec --env "$KEY=$audit_id" "$NAME" sh -c "$SESSION_SCRIPT"
	log "forged root $KEY=$FORGED_ID (no session)"
	runc exec "$NAME" sh -c "$FORGED_SCRIPT"
}

cmd_exec() {
	local audit_id=${1:-} script=${2:-}
	[[ -n $audit_id && -n $script ]] || usage
	[[ $(status) == running ]] || die "container $NAME is not running; run: $0 up"
	if [[ $audit_id == - ]]; then
		runc exec "$NAME" sh -c "$script"
	else
		runc exec --env "$KEY=$audit_id" "$NAME" sh -c "$script"
	fi
}

main() {
	(($# >= 1)) || usage
	local cmd=$1
	shift
	case $cmd in
	up | session | exec | down) ensure_deps "$cmd" ;;
	*) usage ;;
	esac
	case $cmd in
	up) cmd_up ;;
	session) cmd_session "$@" ;;
	exec) cmd_exec "$@" ;;
	down) teardown && log "down: nothing left" ;;
	esac
}

main "$@"
