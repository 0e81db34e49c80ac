#!/bin/bash
# tests.sh OUTDIR: the matrix's checks on the running kernel, in a guest
# (guest.sh) or on the host (run.sh, KERNELS=host). Reads E2E_* from the
# environment (run.sh sets them). Writes into OUTDIR:
#   verifier.log, .rc, .seconds  TestKernelVerifierStats: each shipped object
#                              the kernel can load, loaded as `correlator
#                              capture` loads it, with the verifier's summary
#                              per object and program; and
#                              TestKernelFeatures: the map types and helpers
#                              it uses that the kernel lacks
#   suite.log, suite.rc        the pkg/capture test binary (E2E_RUN), only
#                              when the object loads
#   bench.log, bench.rc        its benchmarks (E2E_BENCH, -test.benchtime
#                              E2E_BENCHTIME), only when the object loads
#   done                       written last
set -u
out=${1:?usage: tests.sh OUTDIR}
cd "$E2E_PKGDIR" || exit 1
export CI=true
# Logs are written locally and copied to OUTDIR: small writes to a 9p share
# under TCG are slow enough to stall a verbose test.
logs=$(mktemp -d)
keep() { cp "$logs"/* "$out"/; }

echo "e2e-tests: $(uname -r): loading the probes (TestKernelVerifierStats, TestKernelFeatures)"
start=$(date +%s)
timeout -k 10 "$E2E_LOAD_TIMEOUT" "$E2E_TESTBIN" -test.run '^TestKernel(VerifierStats|Features)$' -test.v -test.count=1 \
	>"$logs/verifier.log" 2>&1
echo $? >"$logs/verifier.rc"
echo $(($(date +%s) - start)) >"$logs/verifier.seconds"
keep
grep -Eo '(verifier|feature): .*' "$out/verifier.log" | sed 's/^/e2e-tests: /'

if [[ $(cat "$logs/verifier.rc") == 0 && -n $E2E_RUN ]]; then
	echo "e2e-tests: $(uname -r): the capture suite (-test.run '$E2E_RUN', object ${E2E_OBJECT:-auto})"
	start=$(date +%s)
	CORRELATOR_BPF_OBJECT=${E2E_OBJECT:-auto} timeout -k 10 "$E2E_SUITE_TIMEOUT" "$E2E_TESTBIN" -test.run "$E2E_RUN" -test.v -test.count=1 \
		-test.timeout "$((E2E_SUITE_TIMEOUT - 30))s" >"$logs/suite.log" 2>&1
	echo $? >"$logs/suite.rc"
	echo $(($(date +%s) - start)) >"$logs/suite.seconds"
	keep
	grep -E '^(--- (PASS|FAIL|SKIP)|ok|FAIL|panic)' "$out/suite.log" | sed 's/^/e2e-tests: /'
fi

if [[ $(cat "$logs/verifier.rc") == 0 && -n ${E2E_BENCH:-} ]]; then
	echo "e2e-tests: $(uname -r): benchmarks (-test.bench '$E2E_BENCH', -test.benchtime ${E2E_BENCHTIME:-1000x})"
	CORRELATOR_BPF_OBJECT=${E2E_OBJECT:-auto} timeout -k 10 "$E2E_SUITE_TIMEOUT" "$E2E_TESTBIN" -test.run '^$' \
		-test.bench "$E2E_BENCH" -test.benchtime "${E2E_BENCHTIME:-1000x}" -test.count=1 >"$logs/bench.log" 2>&1
	echo $? >"$logs/bench.rc"
	keep
	grep -E '^(Benchmark|FAIL|panic)' "$out/bench.log" | sed 's/^/e2e-tests: /'
fi

# --- Runtimes (issue 31): crun beside runc, and `correlator run` end to end.
# crun enters a container without re-exec'ing a `runc init`, and refuses a
# cgroup v1/v2 hybrid host: it runs where cgroup2 is the only hierarchy (the
# guests). Only when the object loads and E2E_RUN is not empty. Writes:
#   suite-crun.log, .rc, .seconds  the pkg/capture container tests (E2E_CRUN_RUN)
#                                  with CORRELATOR_TEST_RUNTIME=crun
#   e2e-<runtime>.log, .rc, .seconds  the cmd/correlator test binary
#                                  (E2E_E2E_RUN) with each runtime, the agent
#                                  prebuilt on the host (E2E_AGENT)
#   runtimes.skipped               what did not run, and why (crun on a
#                                  hybrid host; a missing crun fails)
# All of them share E2E_RUNTIMES_TIMEOUT seconds.
# runtime_tests NAME RUNTIME DIR BIN REGEXP [ENV...]: one test binary with one runtime.
runtimes_deadline=$(($(date +%s) + ${E2E_RUNTIMES_TIMEOUT:-1200}))
runtime_tests() {
	local name=$1 rt=$2 dir=$3 bin=$4 re=$5 start left
	shift 5
	start=$(date +%s)
	left=$((runtimes_deadline - start))
	if ((left < 60)); then
		echo "FAIL: not run: out of time (E2E_RUNTIMES_TIMEOUT)" >"$logs/$name.log"
		echo 124 >"$logs/$name.rc"
		echo 0 >"$logs/$name.seconds"
		keep
		return
	fi
	echo "e2e-tests: $(uname -r): $name with $rt (-test.run '$re', ${left}s left)"
	(cd "$dir" && env CORRELATOR_TEST_RUNTIME="$rt" "$@" timeout -k 10 "$left" "$bin" -test.run "$re" \
		-test.v -test.count=1 -test.timeout "$((left - 30))s") >"$logs/$name.log" 2>&1
	echo $? >"$logs/$name.rc"
	echo $(($(date +%s) - start)) >"$logs/$name.seconds"
	keep
	grep -E '^(--- (PASS|FAIL|SKIP)|ok|FAIL|panic)' "$out/$name.log" | sed "s/^/e2e-tests: $rt: /"
}
if [[ $(cat "$logs/verifier.rc") == 0 && -n $E2E_RUN ]]; then
	runtimes=(runc)
	if [[ $(stat -fc %T /sys/fs/cgroup) != cgroup2fs ]]; then
		echo "crun: not run: cgroup v1/v2 hybrid (crun needs pure cgroup v2)" >>"$logs/runtimes.skipped"
	else # a missing crun fails the tests (CI=true)
		runtimes+=(crun)
	fi
	if [[ " ${runtimes[*]} " == *" crun "* && -n ${E2E_CRUN_RUN:-} ]]; then
		runtime_tests suite-crun crun "$E2E_PKGDIR" "$E2E_TESTBIN" "$E2E_CRUN_RUN" CORRELATOR_BPF_OBJECT="${E2E_OBJECT:-auto}"
	fi
	if [[ -n ${E2E_E2E_RUN:-} ]]; then
		for rt in "${runtimes[@]}"; do
			runtime_tests "e2e-$rt" "$rt" "$E2E_CMDDIR" "$E2E_E2EBIN" "$E2E_E2E_RUN" CORRELATOR_TEST_AGENT_BIN="$E2E_AGENT"
		done
	fi
	[[ -f $logs/runtimes.skipped ]] && keep && sed 's/^/e2e-tests: /' "$logs/runtimes.skipped"
fi
# --- end of runtimes

rm -rf "$logs"
date +%s >"$out/done"
