#!/usr/bin/env bash
# bench-compare.sh OLD: the exec-overhead benchmark of OLD's probes and of
# the working tree's, alternated (ROUNDS rounds of -count 2) in one run, so
# drift on the machine hits both alike. Needs root.
#
# OLD is a commit, or a directory holding an older checkout. Both sides run
# the working tree's benchmark code (pkg/capture/bench_*_test.go) against
# their own bpf/ and pkg/capture, and the working tree's everything else.
#
#   AGENT=1   the attached side is a whole `correlator run` built from each
#             side's tree (BenchmarkExecOverhead's CORRELATOR_BENCH_AGENT)
#   BURST=1   also BenchmarkExecBurst once per side (drops, frame sizes)
#   BENCHTIME (default 3000x), ROUNDS (default 3)
set -euo pipefail
old=${1:?usage: scripts/bench-compare.sh OLD_COMMIT_OR_DIR}
root=$(cd "$(dirname "$0")/.." && pwd)
tmp=$(mktemp -d)
cleanup() {
	[[ -d $old ]] || git -C "$root" worktree remove --force "$tmp/src" >/dev/null 2>&1 || true
	rm -rf "$tmp"
}
trap cleanup EXIT
if [[ -d $old ]]; then
	src=$(cd "$old" && pwd)
else
	git -C "$root" worktree add -q "$tmp/src" "$old"
	src=$tmp/src
fi

# The old side: this tree, with OLD's probes and capture package.
mkdir -p "$tmp/old"
tar -C "$root" --exclude=./.git --exclude=./bin --exclude=./correlator -cf - . | tar -C "$tmp/old" -xf -
rm -rf "$tmp/old/bpf" "$tmp/old/pkg/capture"
cp -r "$src/bpf" "$tmp/old/bpf"
cp -r "$src/pkg/capture" "$tmp/old/pkg/capture"
rm -f "$tmp/old/pkg/capture"/bench_*_test.go
cp "$root"/pkg/capture/bench_*_test.go "$tmp/old/pkg/capture/"
cp -r "$root/pkg/capture/testdata/bench" "$tmp/old/pkg/capture/testdata/"

(cd "$tmp/old" && go test -c -o "$tmp/before.test" ./pkg/capture)
(cd "$root" && go test -c -o "$tmp/after.test" ./pkg/capture)
if [[ ${AGENT:-} == 1 ]]; then
	(cd "$tmp/old" && go build -o "$tmp/before.correlator" ./cmd/correlator)
	(cd "$root" && go build -o "$tmp/after.correlator" ./cmd/correlator)
fi

dir_of() { if [[ $1 == before ]]; then echo "$tmp/old"; else echo "$root"; fi; }
for round in $(seq "${ROUNDS:-3}"); do
	for side in before after; do
		agent=
		[[ ${AGENT:-} == 1 ]] && agent=$tmp/$side.correlator
		(cd "$(dir_of $side)/pkg/capture" && CORRELATOR_BENCH_AGENT=$agent "$tmp/$side.test" -test.run '^$' \
			-test.bench ExecOverhead -test.benchtime "${BENCHTIME:-3000x}" -test.count 2) |
			sed -n "s/^Benchmark/$side Benchmark/p"
	done
done
if [[ ${BURST:-} == 1 ]]; then
	for side in before after; do
		(cd "$(dir_of $side)/pkg/capture" && "$tmp/$side.test" -test.run '^$' -test.bench ExecBurst \
			-test.benchtime 1x -test.count 1) | sed -n "s/^Benchmark/$side Benchmark/p"
	done
fi
