#!/bin/bash
# tests.sh OUTDIR: the matrix's checks on the running kernel, in a guest
# (guest.sh) or on the host (run.sh, KERNELS=host). Reads E2E_* from the
# environment (run.sh sets them). Writes into OUTDIR:
#   verifier.log, verifier.rc  TestKernelVerifierStats: each shipped object
#                              the kernel can load, loaded as `correlator
#                              capture` loads it, with the verifier's summary
#                              per object and program; and
#                              TestKernelFeatures: the map types and helpers
#                              it uses that the kernel lacks
#   suite.log, suite.rc        the pkg/capture test binary (E2E_RUN), only
#                              when the object loads
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
timeout -k 10 "$E2E_LOAD_TIMEOUT" "$E2E_TESTBIN" -test.run '^TestKernel(VerifierStats|Features)$' -test.v -test.count=1 \
	>"$logs/verifier.log" 2>&1
echo $? >"$logs/verifier.rc"
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
rm -rf "$logs"
date +%s >"$out/done"
