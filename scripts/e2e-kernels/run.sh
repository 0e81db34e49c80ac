#!/usr/bin/env bash
# run.sh: the kernel matrix (make e2e-kernels). For each kernel in KERNELS:
# a Debian kernel (fetch.sh) booted under qemu TCG with the host's root over
# 9p (read-only, a tmpfs overlay on top), cgroup v2 unified, and a results
# share; "host" runs the same checks on this machine's kernel. In each:
#   1. the shipped object is loaded as `correlator capture` loads it, and the
#      verifier's summary per program printed (TestKernelVerifierStats);
#   2. when it loads, the pkg/capture test binary (built here with
#      `go test -c`) runs with -test.run E2E_KERNELS_RUN.
# A kernel fails with its verifier log or its tests' output; a guest that
# hangs is killed after its timeout and fails with its console.
#
# Environment:
#   KERNELS                  "5.10 6.1 6.12 host" (any subset, in order)
#   E2E_KERNELS_RUN          the suite's -test.run regexp ('.'); empty: load only
#   E2E_KERNELS_SUITE_TIMEOUT  seconds for the suite in one kernel (2400)
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
#   E2E_KERNELS_TESTBIN      a pkg/capture test binary to use instead of building one
#   E2E_KERNELS_OUT          results ($KERNEL_CACHE/run)
#   KERNEL_CACHE             kernels and apt state (/var/cache/correlator-e2e-kernels)
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
GO=${GO:-go}
kernels=${KERNELS:-5.10 6.1 6.12 host}
run_re=${E2E_KERNELS_RUN-.}
suite_timeout=${E2E_KERNELS_SUITE_TIMEOUT:-2400}
load_timeout=${E2E_KERNELS_LOAD_TIMEOUT:-300}
object=${E2E_KERNELS_OBJECT:-auto}
mem=${E2E_KERNELS_MEM:-4G}
tcg=${E2E_KERNELS_TCG:-single}
export KERNEL_CACHE=${KERNEL_CACHE:-/var/cache/correlator-e2e-kernels}
work=${E2E_KERNELS_OUT:-$KERNEL_CACHE/run}

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
for p in "$work" "$KERNEL_CACHE" ${E2E_KERNELS_TESTBIN:+"$E2E_KERNELS_TESTBIN"}; do
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
testbin=${E2E_KERNELS_TESTBIN:-}
if [[ -z $testbin ]]; then
	testbin=$work/capture.test
	echo "e2e-kernels: building the pkg/capture test binary ($testbin)"
	(cd "$repo" && CGO_ENABLED=0 "$GO" test -c -o "$testbin" ./pkg/capture)
fi

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
if [[ -n $run_re && -n $e2e_re ]]; then
	echo "e2e-kernels: building correlator and the cmd/correlator test binary ($work)"
	(cd "$repo" && CGO_ENABLED=0 "$GO" build -o "$work/correlator" ./cmd/correlator &&
		CGO_ENABLED=0 "$GO" test -c -o "$work/correlator.test" ./cmd/correlator)
fi
runtimes_env() {
	printf 'E2E_CRUN_RUN=%q\n' "$crun_re"
	printf 'E2E_E2E_RUN=%q\n' "$e2e_re"
	printf 'E2E_AGENT=%q\n' "$work/correlator"
	printf 'E2E_E2EBIN=%q\n' "$work/correlator.test"
	printf 'E2E_CMDDIR=%q\n' "$src/cmd/correlator"
	printf 'E2E_RUNTIMES_TIMEOUT=%q\n' "$runtimes_timeout"
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

# initramfs KDIR OUT: busybox (static), the modules, init.
initramfs() {
	local kdir=$1 out=$2 d m
	d=$(mktemp -d)
	mkdir -p "$d/bin" "$d/lib/modules" "$d/proc" "$d/sys" "$d/dev" "$d/newroot"
	cp /bin/busybox "$d/bin/busybox"
	cp "$here/init" "$d/init"
	: >"$d/modules.list"
	while read -r m; do
		cp "$kdir/modules/$m" "$d/lib/modules/"
		basename "$m" .ko >>"$d/modules.list"
	done < <(modules_for "$kdir")
	(cd "$d" && find . | cpio -o -H newc --quiet | gzip -1) >"$out"
	rm -rf "$d"
}

envfile() {
	local k=$1 mods=$2
	{
		printf 'E2E_KERNEL=%q\n' "$k"
		printf 'E2E_MODULES=%q\n' "$mods"
		printf 'E2E_SCRIPTS=%q\n' "$src/scripts/e2e-kernels"
		printf 'E2E_PKGDIR=%q\n' "$src/pkg/capture"
		printf 'E2E_TESTBIN=%q\n' "$testbin"
		printf 'E2E_RUN=%q\n' "$run_re"
		printf 'E2E_LOAD_TIMEOUT=%q\n' "$load_timeout"
		printf 'E2E_SUITE_TIMEOUT=%q\n' "$suite_timeout"
		printf 'E2E_OBJECT=%q\n' "$object"
		printf 'E2E_BENCH=%q\n' "${E2E_KERNELS_BENCH:-}"
		printf 'E2E_BENCHTIME=%q\n' "${E2E_KERNELS_BENCHTIME:-1000x}"
		printf 'export E2E_KERNEL E2E_MODULES E2E_SCRIPTS E2E_PKGDIR E2E_TESTBIN E2E_RUN E2E_LOAD_TIMEOUT E2E_SUITE_TIMEOUT E2E_OBJECT E2E_BENCH E2E_BENCHTIME\n'
		runtimes_env # the runtimes block
	}
}

# boot K OUT: one guest; its console goes to OUT/console.log and, prefixed,
# to stdout.
boot() {
	local k=$1 out=$2 kdir limit
	kdir=$(bash "$here/fetch.sh" "$k")
	cp "$kdir/version" "$out/version"
	initramfs "$kdir" "$out/initramfs.cpio.gz"
	envfile "$k" "$(readlink -f "$kdir/modules")" >"$out/env"
	cp "$here/guest.sh" "$out/guest.sh"
	limit=$((load_timeout + suite_timeout + 300))
	limit=$((limit + runtimes_timeout)) # the runtimes block
	echo "e2e-kernels: $k: booting $(cat "$kdir/version") (qemu TCG thread=$tcg, limit ${limit}s)"
	timeout -k 20 "$limit" qemu-system-x86_64 \
		-accel tcg,thread="$tcg" -cpu max -smp 2 -m "$mem" \
		-kernel "$kdir/vmlinuz" -initrd "$out/initramfs.cpio.gz" \
		-append "console=ttyS0 quiet loglevel=3 panic=-1 rdinit=/init cgroup_no_v1=all" \
		-virtfs local,path=/,mount_tag=hostroot,security_model=none,readonly=on,multidevs=remap \
		-virtfs "local,path=$out,mount_tag=results,security_model=none,multidevs=remap" \
		-nic none -vga none -display none -monitor none -no-reboot \
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
	printf '%-5s %-22s %-8s %5ss  %s\n%37s suite: %s\n' "$k" "$ver" "$load" "$secs" "${insns:-no counts}" "" "$suite" >>"$work/summary"
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
failed=()
for k in $kernels; do
	out=$work/$k
	rm -rf "$out"
	mkdir -p "$out"
	start=$(date +%s)
	if [[ $k == host ]]; then
		uname -r | sed 's/^/host /' >"$out/version"
		echo "e2e-kernels: host: $(uname -r), on this machine"
		(
			set -a
			# shellcheck source=/dev/null
			. <(envfile host "/lib/modules/$(uname -r)")
			bash "$here/tests.sh" "$out"
		) | sed -u "s/^/[host] /"
	else
		boot "$k" "$out"
	fi
	report "$k" "$out" "$(($(date +%s) - start))" || failed+=("$k")
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
