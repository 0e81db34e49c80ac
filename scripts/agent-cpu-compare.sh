#!/usr/bin/env bash
# agent-cpu-compare.sh BINARY...: BenchmarkAgentCPU with each `correlator`
# binary as the whole agent, alternated ROUNDS times in one run so that the
# machine's drift hits every side alike; prints one line per run and the
# median of each side. Needs root.
#
#   RATE       the sub-benchmark: rate=300 (default) or rate=max
#   BENCHTIME  execs per run (default 6000x)
#   ROUNDS     (default 3)
#
# Build a side from a commit with: git worktree add /tmp/old <commit> &&
# (cd /tmp/old && go build -o /tmp/correlator-old ./cmd/correlator).
set -euo pipefail
(($# > 0)) || { echo "usage: scripts/agent-cpu-compare.sh BINARY..." >&2; exit 2; }
root=$(cd "$(dirname "$0")/.." && pwd)
rate=${RATE:-rate=300} benchtime=${BENCHTIME:-6000x} rounds=${ROUNDS:-3}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
(cd "$root" && go test -c -o "$tmp/capture.test" ./pkg/capture)
bins=()
for b in "$@"; do
	[[ -x $b ]] || { echo "not an executable: $b" >&2; exit 2; }
	bins+=("$(cd "$(dirname "$b")" && pwd)/$(basename "$b")")
done
for ((r = 1; r <= rounds; r++)); do
	for i in "${!bins[@]}"; do
		line=$(cd "$root/pkg/capture" && CORRELATOR_BENCH_AGENT=${bins[i]} "$tmp/capture.test" -test.run '^$' \
			-test.bench "^BenchmarkAgentCPU\$/$rate\$" -test.benchtime "$benchtime" | grep '^BenchmarkAgentCPU')
		us=$(awk '{for (i = 1; i < NF; i++) if ($(i+1) == "agent-µs/exec") print $i}' <<<"$line")
		echo "round $r ${bins[i]}: $us agent-µs/exec ($(awk '{for (i = 1; i < NF; i++) if ($(i+1) == "execs/s") print $i}' <<<"$line") execs/s)"
		echo "$us" >>"$tmp/side$i"
	done
done
for i in "${!bins[@]}"; do
	echo "median ${bins[i]}: $(sort -n "$tmp/side$i" | awk '{v[NR] = $1} END {print v[int((NR + 1) / 2)]}') agent-µs/exec"
done
