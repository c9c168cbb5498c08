#!/bin/sh
# Runs every fuzz target in turn, one job at a time (the machine is shared), SECS seconds each
# (default 420), continuing after crashes; artifacts land in fuzz/artifacts/<target>/.
# Usage: fuzz/run.sh [SECS] [TARGET…]
set -u
here=$(cd "$(dirname "$0")" && pwd)
cd "$here"
secs=${1:-420}
[ $# -gt 0 ] && shift
targets=${*:-decode records decompress buildid_elf filter}
[ -d corpus ] || ./seed.sh
for t in $targets; do cargo +nightly fuzz build -O "$t" || exit 1; done
for t in $targets; do
  mkdir -p "artifacts/$t"
  echo "== $t: ${secs}s"
  cargo +nightly fuzz run -O "$t" "corpus/$t" -- \
    -max_total_time="$secs" -rss_limit_mb=2048 -timeout=10 -max_len=262144 \
    -fork=1 -ignore_crashes=1 -ignore_timeouts=1 -ignore_ooms=1 -print_final_stats=1 \
    -artifact_prefix="artifacts/$t/" > "artifacts/$t.log" 2>&1
  grep -E "stat::|INFO: fuzzed|exec/s" "artifacts/$t.log" | tail -n 3
done
