#!/usr/bin/env bash
# Multi-process CPU workload used to create the large benchmark recording
# (reference perf-format.md §5.2): two parallel jobs, each running
# BENCH_WORKLOAD_LOOPS iterations of
#   gzip -1 -c BIN | gzip -d, sha256sum BIN, a small python3 loop, a perl loop
# where BIN is /usr/bin/perf (override with BENCH_WORKLOAD_FILE).
set -euo pipefail

loops=${BENCH_WORKLOAD_LOOPS:-15}
file=${BENCH_WORKLOAD_FILE:-/usr/bin/perf}

job() {
    local i
    for ((i = 0; i < loops; i++)); do
        gzip -1 -c "$file" | gzip -d >/dev/null
        sha256sum "$file" >/dev/null
        python3 -c 's = 0
for i in range(300000):
    s += i * i
' 
        perl -e 'my $s = 0; for my $i (1 .. 300000) { $s += $i * $i }'
    done
}

job &
job &
wait
