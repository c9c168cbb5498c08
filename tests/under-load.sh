#!/usr/bin/env bash
# Runs the README's test command (`cargo test --workspace`) with a CPU hog per core beside it:
# no test may depend on having the machine to itself (docs/testing.md, "Tests under load").
#
#   tests/under-load.sh                                   # the whole suite
#   tests/under-load.sh -p perfpipe --test tests fold::   # the same arguments as `cargo test`
#
# The hogs are busy shell loops at the default priority, one per online cpu (`nproc`), started
# before the tests are built and killed (by their pids) when the tests end, however they end.
# The exit status is cargo's.
set -euo pipefail
cd "$(dirname "$0")/.."
hogs=()
stop() {
    if ((${#hogs[@]})); then kill "${hogs[@]}" 2>/dev/null || true; fi
    wait 2>/dev/null || true
}
trap stop EXIT INT TERM
cores=$(nproc)
for _ in $(seq "$cores"); do
    sh -c 'while :; do :; done' &
    hogs+=("$!")
done
echo "under-load.sh: $cores cpu hog(s) running (pids ${hogs[*]})" >&2
args=("$@")
if ((${#args[@]} == 0)); then args=(--workspace); fi
cargo test "${args[@]}"
