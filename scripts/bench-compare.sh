#!/usr/bin/env bash
# bench-compare.sh OLD_COMMIT: the exec-overhead benchmark of OLD_COMMIT's
# probes and of the working tree's, alternated (three rounds of -count 2) in
# one run, so drift on the machine hits both alike. Needs root.
set -euo pipefail
old=${1:?usage: scripts/bench-compare.sh OLD_COMMIT}
root=$(cd "$(dirname "$0")/.." && pwd)
tmp=$(mktemp -d)
trap 'git -C "$root" worktree remove --force "$tmp/old" >/dev/null 2>&1 || true; rm -rf "$tmp"' EXIT
git -C "$root" worktree add -q "$tmp/old" "$old"
(cd "$tmp/old" && go test -c -o "$tmp/before.test" ./pkg/capture)
(cd "$root" && go test -c -o "$tmp/after.test" ./pkg/capture)
for round in 1 2 3; do
	for side in before after; do
		dir=$tmp/old
		[[ $side == after ]] && dir=$root
		(cd "$dir/pkg/capture" && "$tmp/$side.test" -test.run '^$' -test.bench ExecOverhead \
			-test.benchtime "${BENCHTIME:-3000x}" -test.count 2) | sed -n "s/^Benchmark/$side Benchmark/p"
	done
done
