#!/usr/bin/env bash
# run.sh: the kernel matrix (make e2e-kernels). For each kernel in KERNELS:
# a Debian kernel (fetch.sh) booted under qemu TCG, cgroup v2 unified, with a
# read-only 9p root under a tmpfs overlay and a results share; "host" runs
# the same checks on this machine's kernel. An amd64 kernel ("6.1") boots in
# qemu-system-x86_64 on the host's own root; an arm64 one ("arm64:6.1") in
# qemu-system-aarch64 (virt) on a root of Debian's arm64 packages
# (userland.sh), with the test binaries cross-compiled here (GOARCH=arm64,
# the forger with aarch64-linux-gnu-gcc) and the cache shared in at its own
# path. In each:
#   1. the shipped object is loaded as `correlator capture` loads it, and the
#      verifier's summary per program printed (TestKernelVerifierStats);
#   2. when it loads, the pkg/capture test binary (built here with
#      `go test -c`) runs with -test.run E2E_KERNELS_RUN.
# A kernel fails with its verifier log or its tests' output; a guest that
# hangs is killed after its timeout and fails with its console.
#
# Environment:
#   KERNELS                  "5.10 6.1 6.12 arm64:5.10 arm64:6.1 arm64:6.12
#                            host" (any subset, in order; "amd64:6.1" is "6.1")
#   E2E_KERNELS_RUN          the suite's -test.run regexp ('.'); empty: load only
#   E2E_KERNELS_SUITE_TIMEOUT  seconds for the suite in one kernel (2400)
#   E2E_KERNELS_<NAME>_<kernel>  a per-kernel value of E2E_KERNELS_<NAME>
#                            for RUN, CRUN_RUN, E2E_RUN, SUITE_TIMEOUT,
#                            RUNTIMES_TIMEOUT and MEMLOCK, the kernel as in
#                            KERNELS with every character other than a letter
#                            or digit made "_":
#                            E2E_KERNELS_RUN_arm64_6_1='^TestKernelLineage$'
#   E2E_KERNELS_MEMLOCK      RLIMIT_MEMLOCK (KiB, `ulimit -l`) in the guests;
#                            empty: the kernel's own for PID 1. Default: 64 in
#                            the 5.10 guests of both architectures (Debian
#                            11's default, where BPF memory is charged to it),
#                            empty in the others (8 MiB since 5.16)
#   E2E_KERNELS_ARM64_CPU    qemu-system-aarch64's -cpu (max,pauth-impdef=on:
#                            every feature, pointer authentication with
#                            QEMU's cheap algorithm rather than QARMA, which
#                            TCG emulates slowly)
#   E2E_KERNELS_LOAD_TIMEOUT   seconds for the load (300)
#   E2E_KERNELS_OBJECT       the BPF object the suite runs with: auto (what
#                            Load chooses on that kernel), default or compat
#   E2E_KERNELS_MEM          guest memory (4G)
#   E2E_KERNELS_TCG          qemu's TCG threading: single (default) or multi.
#                            Multi-threaded TCG races the guest's own code
#                            patching: a 6.12 guest died in CI with "Oops:
#                            int3" at a static key in kmem_cache_alloc while
#                            cgroup_mkdir enabled the memory controller.
#   E2E_KERNELS_BENCH        the suite's benchmarks to run too (-test.bench;
#                            empty: none), e.g. '^BenchmarkExecOverhead$'
#   E2E_KERNELS_BENCHTIME    their -test.benchtime (1000x)
#   E2E_KERNELS_TESTBIN      a pkg/capture test binary to use instead of
#                            building one (amd64 kernels and host)
#   E2E_KERNELS_JOBS         guests at once (the machine's CPUs, at most one
#                            per guest): a single-threaded TCG guest keeps
#                            one host CPU busy, so two CPUs run two guests in
#                            the wall clock of one; "host" runs after them
#   E2E_KERNELS_OUT          results ($KERNEL_CACHE/run)
#   KERNEL_CACHE             kernels and apt state (/var/cache/correlator-e2e-kernels)
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
GO=${GO:-go}
kernels=${KERNELS:-5.10 6.1 6.12 arm64:5.10 arm64:6.1 arm64:6.12 host}
run_re=${E2E_KERNELS_RUN-.}
suite_timeout=${E2E_KERNELS_SUITE_TIMEOUT:-2400}
load_timeout=${E2E_KERNELS_LOAD_TIMEOUT:-300}
object=${E2E_KERNELS_OBJECT:-auto}
mem=${E2E_KERNELS_MEM:-4G}
tcg=${E2E_KERNELS_TCG:-single}
arm64_cpu=${E2E_KERNELS_ARM64_CPU:-max,pauth-impdef=on}
export KERNEL_CACHE=${KERNEL_CACHE:-/var/cache/correlator-e2e-kernels}
work=${E2E_KERNELS_OUT:-$KERNEL_CACHE/run}
for k in $kernels; do
	case $k in
	host | 5.10 | 6.1 | 6.12 | amd64:5.10 | amd64:6.1 | amd64:6.12 | arm64:5.10 | arm64:6.1 | arm64:6.12) ;;
	*)
		echo "e2e-kernels: unknown kernel $k in KERNELS (known: 5.10 6.1 6.12 host, arm64:5.10 arm64:6.1 arm64:6.12)" >&2
		exit 2
		;;
	esac
done

if [[ $(id -u) != 0 ]]; then
	echo "e2e-kernels: needs root (BPF in the guests, and on the host for KERNELS=host)" >&2
	exit 1
fi
case $work/ in "$repo"/*)
	echo "e2e-kernels: E2E_KERNELS_OUT must be outside the checkout ($repo)" >&2
	exit 2
	;;
esac
# The guest sees the host's root, but mounts its own /tmp and /run.
for p in "$work" "$KERNEL_CACHE"; do
	case $(readlink -m "$p")/ in /tmp/* | /run/*)
		echo "e2e-kernels: $p is under /tmp or /run, which the guests do not see (they mount their own)" >&2
		exit 2
		;;
	esac
done
mkdir -p "$work"
# What the guests read of the checkout (the scripts, the package's testdata
# and whatever its tests find beside it), copied where they can see it: a
# clone under /tmp (as a CI runner's may be) is invisible to them.
src=$work/src
rm -rf "$src"
mkdir -p "$src"
tar -C "$repo" --exclude=./.git --exclude=./bin -cf - . | tar -C "$src" -xf -

# kvar NAME KERNEL DEFAULT: E2E_KERNELS_NAME_<kernel> when set (even empty),
# else DEFAULT.
kvar() {
	local v=E2E_KERNELS_${1}_${2//[^A-Za-z0-9]/_}
	if [[ -n ${!v+set} ]]; then echo "${!v}"; else echo "$3"; fi
}
# arch_of KERNEL: amd64 (the host's: "host" and plain versions) or arm64.
arch_of() {
	case $1 in arm64:*) echo arm64 ;; *) echo amd64 ;; esac
}

# bindir_of K: where K's architecture's binaries are (bins builds them).
bindir_of() {
	case $(arch_of "$1") in amd64) echo "$work" ;; *) echo "$work/$(arch_of "$1")" ;; esac
}
# bins K: sets bindir, the directory of K's architecture's binaries, built
# once: the pkg/capture test binary (capture.test), for arm64 the forger
# (internal/testutil/forger, which the guests cannot compile), and when K
# runs the end-to-end tests, the agent (correlator) and the cmd/correlator
# test binary (correlator.test). amd64's are the host's own build, in $work
# itself.
declare -A built=()
bins() {
	local arch goenv=()
	arch=$(arch_of "$1")
	bindir=$(bindir_of "$1")
	[[ $arch == amd64 ]] || goenv=(GOARCH="$arch")
	mkdir -p "$bindir"
	if [[ -z ${built[$arch]:-} ]]; then
		if [[ $arch == amd64 && -n ${E2E_KERNELS_TESTBIN:-} ]]; then
			cp "$E2E_KERNELS_TESTBIN" "$bindir/capture.test"
		else
			echo "e2e-kernels: building the pkg/capture test binary for $arch ($bindir/capture.test)"
			(cd "$repo" && env "${goenv[@]}" CGO_ENABLED=0 "$GO" test -c -o "$bindir/capture.test" ./pkg/capture)
		fi
		if [[ $arch == arm64 ]]; then
			echo "e2e-kernels: building the forger for arm64 with aarch64-linux-gnu-gcc ($bindir/forger)"
			aarch64-linux-gnu-gcc -static -O2 -pthread -Wall -Wextra -o "$bindir/forger" "$repo/internal/testutil/forger/forger.c"
		fi
		built[$arch]=1
	fi
	if [[ -z ${built[$arch-e2e]:-} && -n $(kvar RUN "$1" "$run_re") && -n $(kvar E2E_RUN "$1" "$e2e_re") ]]; then
		echo "e2e-kernels: building correlator and the cmd/correlator test binary for $arch ($bindir)"
		(cd "$repo" && env "${goenv[@]}" CGO_ENABLED=0 "$GO" build -o "$bindir/correlator" ./cmd/correlator &&
			env "${goenv[@]}" CGO_ENABLED=0 "$GO" test -c -o "$bindir/correlator.test" ./cmd/correlator)
		built[$arch-e2e]=1
	fi
}

# --- Runtimes (issue 31): crun beside runc, and one end-to-end attribution
# through `correlator run` with each (tests.sh's runtimes block). Built here:
# Go in a TCG guest takes minutes.
#   E2E_KERNELS_CRUN_RUN  the pkg/capture tests run again with crun, in pure
#                         cgroup v2 guests (the container tests); empty: none
#   E2E_KERNELS_E2E_RUN   the cmd/correlator tests run with runc and crun
#                         ('^TestEndToEnd$/^overlapping_sessions$'); empty: none
#   E2E_KERNELS_RUNTIMES_TIMEOUT  seconds for all of these in one kernel (1200),
#                         added to the guest's limit
runtimes_timeout=${E2E_KERNELS_RUNTIMES_TIMEOUT:-1200}
crun_re=${E2E_KERNELS_CRUN_RUN-'^(TestBridgeArgvRoot|TestKernelAdversary.*|TestKernelSPOPrefix|TestKernelRunc(Container|SystemdCgroup)|TestKernelScope|TestKernelRestartWindowForgers)$'}
e2e_re=${E2E_KERNELS_E2E_RUN-'^TestEndToEnd$/^overlapping_sessions$'}
# runtimes_env K BINDIR: the runtimes block's part of K's env file.
runtimes_env() {
	printf 'E2E_CRUN_RUN=%q\n' "$(kvar CRUN_RUN "$1" "$crun_re")"
	printf 'E2E_E2E_RUN=%q\n' "$(kvar E2E_RUN "$1" "$e2e_re")"
	printf 'E2E_AGENT=%q\n' "$2/correlator"
	printf 'E2E_E2EBIN=%q\n' "$2/correlator.test"
	printf 'E2E_CMDDIR=%q\n' "$src/cmd/correlator"
	printf 'E2E_RUNTIMES_TIMEOUT=%q\n' "$(kvar RUNTIMES_TIMEOUT "$1" "$runtimes_timeout")"
	printf 'export E2E_CRUN_RUN E2E_E2E_RUN E2E_AGENT E2E_E2EBIN E2E_CMDDIR E2E_RUNTIMES_TIMEOUT\n'
}
# report_runtimes K OUT: a summary line per runtime run; the failures'
# evidence on stderr. Returns non-zero when one failed.
report_runtimes() {
	local k=$1 out=$2 name log rc t ok=0
	for log in "$out"/suite-crun.log "$out"/e2e-*.log; do
		[[ -f $log ]] || continue
		name=$(basename "$log" .log)
		rc=$(cat "${log%.log}.rc")
		printf '%37s %s: %s pass, %s fail, %s skip (rc %s, %ss)\n' "" "$name" "$(grep -c '^--- PASS' "$log" || true)" \
			"$(grep -c '^--- FAIL' "$log" || true)" "$(grep -c '^--- SKIP' "$log" || true)" "$rc" "$(cat "${log%.log}.seconds")" >>"$work/summary"
		[[ $rc == 0 ]] && continue
		ok=1
		echo "e2e-kernels: $k: $name failed (all of it in $log):" >&2
		for t in $(sed -n 's/^--- FAIL: \([^ ]*\) .*/\1/p' "$log"); do
			section "$log" "$t" | tail -n 80 >&2
		done
		grep -E '^(panic|FAIL|\*\*\* Test killed)' "$log" >&2 || true
	done
	if [[ -f $out/runtimes.skipped ]]; then
		sed 's/^/                                      /' "$out/runtimes.skipped" >>"$work/summary"
	fi
	return $ok
}
# --- end of runtimes

# modules_for KDIR: the modules (paths under KDIR/modules, in load order)
# that the guest needs for virtio-pci, 9p over virtio and overlayfs; built-in
# ones are skipped.
modules_for() {
	local mods=$1/modules want m line dep
	local -a order=() deps
	want="virtio_pci 9pnet_virtio 9p overlay"
	for m in $want; do
		line=$(grep -E "(^|/)$m\.ko:" "$mods/modules.dep" || true)
		[[ -n $line ]] || continue # built in
		read -r -a deps <<<"${line#*:}"
		for ((i = ${#deps[@]} - 1; i >= 0; i--)); do order+=("${deps[i]}"); done
		order+=("${line%%:*}")
	done
	for dep in "${order[@]}"; do echo "$dep"; done | awk '!seen[$0]++'
}

# initramfs KDIR ROOT OUT [TAG PATH]...: busybox (static, ROOT's), the
# modules, init, and the extra shares init mounts (/shares).
initramfs() {
	local kdir=$1 root=$2 out=$3 d m
	shift 3
	d=$(mktemp -d)
	mkdir -p "$d/bin" "$d/lib/modules" "$d/proc" "$d/sys" "$d/dev" "$d/newroot"
	cp "$root/bin/busybox" "$d/bin/busybox"
	cp "$here/init" "$d/init"
	: >"$d/shares"
	while (($# > 0)); do
		echo "$1 $2" >>"$d/shares"
		shift 2
	done
	: >"$d/modules.list"
	while read -r m; do
		cp "$kdir/modules/$m" "$d/lib/modules/"
		basename "$m" .ko >>"$d/modules.list"
	done < <(modules_for "$kdir")
	(cd "$d" && find . | cpio -o -H newc --quiet | gzip -1) >"$out"
	rm -rf "$d"
}

# envfile K MODULES BINDIR: what guest.sh and tests.sh read (E2E_*), and
# the tests' own settings.
envfile() {
	local k=$1 mods=$2 bin=$3 memlock=
	[[ ${k#*:} != 5.10 ]] || memlock=64
	memlock=$(kvar MEMLOCK "$k" "${E2E_KERNELS_MEMLOCK-$memlock}")
	{
		printf 'E2E_KERNEL=%q\n' "$k"
		printf 'E2E_MODULES=%q\n' "$mods"
		printf 'E2E_SCRIPTS=%q\n' "$src/scripts/e2e-kernels"
		printf 'E2E_PKGDIR=%q\n' "$src/pkg/capture"
		printf 'E2E_TESTBIN=%q\n' "$bin/capture.test"
		printf 'E2E_RUN=%q\n' "$(kvar RUN "$k" "$run_re")"
		printf 'E2E_LOAD_TIMEOUT=%q\n' "$load_timeout"
		printf 'E2E_SUITE_TIMEOUT=%q\n' "$(kvar SUITE_TIMEOUT "$k" "$suite_timeout")"
		printf 'E2E_OBJECT=%q\n' "$object"
		printf 'E2E_BENCH=%q\n' "${E2E_KERNELS_BENCH:-}"
		printf 'E2E_BENCHTIME=%q\n' "${E2E_KERNELS_BENCHTIME:-1000x}"
		printf 'E2E_MEMLOCK=%q\n' "$memlock"
		printf 'export E2E_KERNEL E2E_MODULES E2E_SCRIPTS E2E_PKGDIR E2E_TESTBIN E2E_RUN E2E_LOAD_TIMEOUT E2E_SUITE_TIMEOUT E2E_OBJECT E2E_BENCH E2E_BENCHTIME E2E_MEMLOCK\n'
		if [[ -f $bin/forger ]]; then # no compiler in the guest
			printf 'CORRELATOR_TEST_FORGER_BIN=%q\nexport CORRELATOR_TEST_FORGER_BIN\n' "$bin/forger"
		fi
		runtimes_env "$k" "$bin" # the runtimes block
	}
}

# boot K OUT: one guest; its console goes to OUT/console.log and, prefixed,
# to stdout.
boot() {
	local k=$1 out=$2 arch kdir limit root=/ shares=() virtfs=() qemu
	arch=$(arch_of "$k")
	kdir=$(bash "$here/fetch.sh" "$k")
	cp "$kdir/version" "$out/version"
	if [[ $arch == arm64 ]]; then
		# Its own root; the cache (the kernel's modules, and $work: the
		# binaries, the checkout's copy) at the host's paths.
		root=$(bash "$here/userland.sh" arm64)
		shares=(cache "$KERNEL_CACHE")
		case $work/ in "$KERNEL_CACHE"/*) ;; *) shares+=(work "$work") ;; esac
	fi
	initramfs "$kdir" "$root" "$out/initramfs.cpio.gz" "${shares[@]}"
	for ((i = 0; i < ${#shares[@]}; i += 2)); do
		virtfs+=(-virtfs "local,path=${shares[i + 1]},mount_tag=${shares[i]},security_model=none,readonly=on,multidevs=remap")
	done
	envfile "$k" "$(readlink -f "$kdir/modules")" "$bindir" >"$out/env"
	cp "$here/guest.sh" "$out/guest.sh"
	limit=$((load_timeout + $(kvar SUITE_TIMEOUT "$k" "$suite_timeout") + 300))
	limit=$((limit + $(kvar RUNTIMES_TIMEOUT "$k" "$runtimes_timeout"))) # the runtimes block
	if [[ $arch == arm64 ]]; then
		qemu=(qemu-system-aarch64 -M virt -accel "tcg,thread=$tcg" -cpu "$arm64_cpu" -append
			"console=ttyAMA0 quiet loglevel=3 panic=-1 rdinit=/init cgroup_no_v1=all")
	else
		qemu=(qemu-system-x86_64 -accel "tcg,thread=$tcg" -cpu max -vga none -append
			"console=ttyS0 quiet loglevel=3 panic=-1 rdinit=/init cgroup_no_v1=all")
	fi
	echo "e2e-kernels: $k: booting $(cat "$kdir/version") (${qemu[0]}, TCG thread=$tcg, limit ${limit}s)"
	timeout -k 20 "$limit" "${qemu[@]}" -smp 2 -m "$mem" \
		-kernel "$kdir/vmlinuz" -initrd "$out/initramfs.cpio.gz" \
		-virtfs "local,path=$root,mount_tag=hostroot,security_model=none,readonly=on,multidevs=remap" \
		-virtfs "local,path=$out,mount_tag=results,security_model=none,multidevs=remap" \
		"${virtfs[@]}" \
		-nic none -display none -monitor none -no-reboot \
		-chardev stdio,id=con,signal=off -serial chardev:con </dev/null |
		tee "$out/console.log" | sed -u "s/^/[$k] /" || true
}

# section LOG TEST: the output of one top-level test.
section() {
	awk -v t="$2" '$0 == "=== RUN   " t { p = 1 } p { print } p && $0 ~ "^--- (FAIL|PASS|SKIP): " t " " { exit }' "$1"
}

# report K OUT SECONDS: one summary line; the failure's evidence on stderr.
# Returns non-zero when K failed.
report() {
	local k=$1 out=$2 secs=$3 ver load insns chosen suite="-" t
	ver=$(cut -d' ' -f2 "$out/version" 2>/dev/null || uname -r)
	# "verifier: OBJECT: PROGRAM: processed N insns", per object it loads.
	insns=$(grep -o 'verifier: [a-z-]*: [a-z_]*: processed [0-9]*' "$out/verifier.log" 2>/dev/null |
		awk '{ sub(":", "", $2); sub(":", "", $3); printf "%s%s/%s=%s", sep, $2, $3, $5; sep = " " }')
	chosen=$(sed -n 's/.*verifier: .*: object \([a-z-]*\) chosen.*/\1/p' "$out/verifier.log" 2>/dev/null | head -n 1)
	if [[ ! -f $out/done ]]; then
		load="no result"
		echo "e2e-kernels: $k: the guest ended without results (crash or timeout after ${secs}s); its console:" >&2
		tail -n 40 "$out/console.log" >&2 || true
	elif [[ $(cat "$out/verifier.rc") != 0 ]]; then
		load="REFUSED"
		echo "e2e-kernels: $k: the object does not load; the verifier log (all of it in $out/verifier.log):" >&2
		grep -v '^=== RUN' "$out/verifier.log" | tail -n 60 >&2
	else
		load="loads"
	fi
	[[ -z $chosen ]] || load="$load ($chosen)"
	if [[ -f $out/suite.rc ]]; then
		suite="$(grep -c '^--- PASS' "$out/suite.log" || true) pass, $(grep -c '^--- FAIL' "$out/suite.log" || true) fail, $(grep -c '^--- SKIP' "$out/suite.log" || true) skip (rc $(cat "$out/suite.rc"), $(cat "$out/suite.seconds")s)"
		if [[ $(cat "$out/suite.rc") != 0 ]]; then
			echo "e2e-kernels: $k: the capture suite failed (all of it in $out/suite.log):" >&2
			for t in $(sed -n 's/^--- FAIL: \([^ ]*\) .*/\1/p' "$out/suite.log"); do
				section "$out/suite.log" "$t" | tail -n 80 >&2
			done
			grep -E '^(panic|FAIL|\*\*\* Test killed)' "$out/suite.log" >&2 || true
		fi
	fi
	printf '%-10s %-22s %-8s %5ss  %s\n%37s boot %ss, load %ss, suite: %s\n' "$k" "$ver" "$load" "$secs" "${insns:-no counts}" "" \
		"$(cat "$out/boot.seconds" 2>/dev/null || echo -)" "$(cat "$out/verifier.seconds" 2>/dev/null || echo -)" "$suite" >>"$work/summary"
	if [[ -f $out/bench.rc ]]; then
		# name, then each "value unit" pair past ns/op
		awk '/^Benchmark/ { printf "%37s bench: %s", "", $1; for (i = 5; i < NF; i += 2) printf " %s %s", $i, $(i + 1); print "" }' \
			"$out/bench.log" >>"$work/summary"
		if [[ $(cat "$out/bench.rc") != 0 ]]; then
			echo "e2e-kernels: $k: the benchmarks failed (all of it in $out/bench.log):" >&2
			tail -n 40 "$out/bench.log" >&2
			return 1
		fi
	fi
	[[ $load == loads* && (! -f $out/suite.rc || $(cat "$out/suite.rc") == 0) ]]
}

: >"$work/summary"
# Each kernel's results go to its own directory; the guests run in $nlanes
# lanes, each taking the next kernel in KERNELS's order as it frees; "host"
# runs alone after them (its tests want the machine). Everything a lane
# shares is made first: the binaries, the kernels, the arm64 root.
guests=() hosts=()
for k in $kernels; do
	k=${k#amd64:}
	rm -rf "${work:?}/${k/:/-}"
	mkdir -p "$work/${k/:/-}"
	bins "$k"
	if [[ $k == host ]]; then
		hosts+=("$k")
	else
		bash "$here/fetch.sh" "$k" >/dev/null
		[[ $(arch_of "$k") == amd64 ]] || bash "$here/userland.sh" "$(arch_of "$k")" >/dev/null
		guests+=("$k")
	fi
done
# run_one K: one kernel, its wall clock in OUT/wall.seconds.
run_one() {
	local k=$1 out=$work/${1/:/-} start
	start=$(date +%s)
	if [[ $k == host ]]; then
		uname -r | sed 's/^/host /' >"$out/version"
		echo "e2e-kernels: host: $(uname -r), on this machine"
		(
			set -a
			# shellcheck source=/dev/null
			. <(envfile host "/lib/modules/$(uname -r)" "$(bindir_of host)")
			bash "$here/tests.sh" "$out"
		) | sed -u "s/^/[host] /"
	else
		bindir=$(bindir_of "$k")
		boot "$k" "$out"
	fi
	echo $(($(date +%s) - start)) >"$out/wall.seconds"
}
# lane: run the queue's next kernel until none is left (flock hands each
# kernel to one lane).
lane() {
	local i
	while :; do
		i=$({
			flock 9
			read -r i <"$work/queue" || i=0
			echo $((i + 1)) >"$work/queue"
			echo "$i"
		} 9>"$work/queue.lock")
		((i < ${#guests[@]})) || return 0
		# In the background so that set -e holds in it; its report says
		# what it left undone.
		run_one "${guests[i]}" &
		wait $! || echo "e2e-kernels: ${guests[i]}: exited with status $?" >&2
	done
}
echo 0 >"$work/queue"
nlanes=${E2E_KERNELS_JOBS:-$(nproc)}
((nlanes >= 1)) || nlanes=1
((nlanes <= ${#guests[@]})) || nlanes=${#guests[@]}
if ((${#guests[@]} > 0)); then
	echo "e2e-kernels: ${#guests[@]} guests in $nlanes lanes: ${guests[*]}"
	lanes=()
	for ((j = 0; j < nlanes; j++)); do
		lane &
		lanes+=($!)
	done
	wait "${lanes[@]}" || true
fi
for k in "${hosts[@]}"; do run_one "$k"; done

failed=()
for k in $kernels; do
	k=${k#amd64:}
	out=$work/${k/:/-}
	report "$k" "$out" "$(cat "$out/wall.seconds" 2>/dev/null || echo -)" || failed+=("$k")
	report_runtimes "$k" "$out" || [[ " ${failed[*]} " == *" $k "* ]] || failed+=("$k") # the runtimes block
done

echo
echo "e2e-kernels: kernel  version  load  wall  verifier instructions processed per program"
cat "$work/summary"
if [[ ${#failed[@]} -gt 0 ]]; then
	echo "e2e-kernels: FAILED: ${failed[*]} (results in $work)" >&2
	exit 1
fi
echo "e2e-kernels: all passed (results in $work)"
