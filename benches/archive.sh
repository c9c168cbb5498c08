#!/usr/bin/env bash
# Symbolizing from an archive or a warm build-id cache against symbolizing on the recording host
# (issue 30's target: within 10 %).
#
# Records tests/fixtures/sample.c (built in a temporary directory) with -g, injects build ids,
# archives it (slim tar, slim .tar.bz2, whole tar) and fills a build-id cache from the slim tar,
# then times, alternating for BENCH_ROUNDS rounds (the starting command rotates), each writing
# folded stacks with an empty PERF_BUILDID_DIR unless said:
#   host        $PERFPIPE -i rec -o out.folded                  (the files in place, /proc/kallsyms)
#   archive     ... --symbols rec.tar                            (slim)
#   archive-bz2 ... --symbols rec.tar.bz2                        (slim, decompressed each run)
#   whole       ... --symbols rec-whole.tar
#   cache       PERF_BUILDID_DIR=cache ...                       (tar xf rec.tar -C cache)
# and prints the median wall time of each, its ratio to host, and whether the folded output is
# the host's. Environment: PERFPIPE (default target/release/perfpipe), PERF, BENCH_ROUNDS (5),
# BENCH_SAMPLE_ROUNDS (the workload's rounds, 10000), BENCH_PERIOD (cpu-clock period, 10000),
# BENCH_OUT (the per-run TSV).
set -euo pipefail

script_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
source "$script_dir/lib.sh"
repo_root=$(cd "$script_dir/.." && pwd)
PERF=${PERF:-perf}
PERFPIPE=${PERFPIPE:-$repo_root/target/release/perfpipe}
BENCH_ROUNDS=${BENCH_ROUNDS:-5}
BENCH_SAMPLE_ROUNDS=${BENCH_SAMPLE_ROUNDS:-10000}
BENCH_PERIOD=${BENCH_PERIOD:-10000}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
BENCH_OUT=${BENCH_OUT:-/tmp/perfpipe-bench/archive.runs.tsv}
mkdir -p "$(dirname "$BENCH_OUT")"

[[ -x $PERFPIPE ]] || die "perfpipe binary not found: $PERFPIPE (cargo build --release, or set PERFPIPE=...)"

mkdir -p "$work/w" "$work/empty" "$work/cache"
cc -O1 -g -fno-omit-frame-pointer -mno-omit-leaf-frame-pointer -fno-inline \
    -o "$work/w/sample" "$repo_root/tests/fixtures/sample.c"
log "recording: $PERF record -e cpu-clock -c $BENCH_PERIOD -g -o - -- sample $BENCH_SAMPLE_ROUNDS | perfpipe inject -b"
"$PERF" record -e cpu-clock -c "$BENCH_PERIOD" -g -o - -- "$work/w/sample" "$BENCH_SAMPLE_ROUNDS" \
    2>/dev/null | "$PERFPIPE" inject -b -i - -o - >"$work/rec"
log "recording: $(stat -c %s "$work/rec") bytes"
export PERF_BUILDID_DIR=$work/empty
"$PERFPIPE" archive -i "$work/rec" -o "$work/rec.tar"
"$PERFPIPE" archive -i "$work/rec" -o "$work/rec.tar.bz2"
"$PERFPIPE" archive -i "$work/rec" -o "$work/rec-whole.tar" --whole
tar xf "$work/rec.tar" -C "$work/cache"
log "archives: slim $(stat -c %s "$work/rec.tar"), slim bz2 $(stat -c %s "$work/rec.tar.bz2"), whole $(stat -c %s "$work/rec-whole.tar") bytes"

names=(host archive archive-bz2 whole cache)
run() { # NAME OUT
    case $1 in
    host)        "$PERFPIPE" -i "$work/rec" -o "$2" ;;
    archive)     "$PERFPIPE" -i "$work/rec" -o "$2" --symbols "$work/rec.tar" ;;
    archive-bz2) "$PERFPIPE" -i "$work/rec" -o "$2" --symbols "$work/rec.tar.bz2" ;;
    whole)       "$PERFPIPE" -i "$work/rec" -o "$2" --symbols "$work/rec-whole.tar" ;;
    cache)       PERF_BUILDID_DIR=$work/cache "$PERFPIPE" -i "$work/rec" -o "$2" ;;
    esac
}

printf 'round\tcommand\twall_s\n' >"$BENCH_OUT"
for ((r = 0; r < BENCH_ROUNDS; r++)); do
    for ((i = 0; i < ${#names[@]}; i++)); do
        n=${names[$(((i + r) % ${#names[@]}))]}
        t0=$(date +%s%N)
        run "$n" "$work/$n.folded"
        t1=$(date +%s%N)
        printf '%d\t%s\t%s\n' "$r" "$n" "$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.4f", (b - a) / 1e9 }')" >>"$BENCH_OUT"
    done
done

host=$(awk -F'\t' '$2 == "host" { print $3 }' "$BENCH_OUT" | median)
echo "recording $(stat -c %s "$work/rec") bytes; perfpipe $("$PERFPIPE" --version | head -1); perf: $("$PERF" --version); kernel: $(uname -r); $(nproc) CPUs; $(date -u +%FT%TZ)"
printf '%-12s %10s %8s %s\n' command median_s vs_host "folded = host's"
for n in "${names[@]}"; do
    m=$(awk -F'\t' -v n="$n" '$2 == n { print $3 }' "$BENCH_OUT" | median)
    same=$(cmp -s <(sort "$work/host.folded") <(sort "$work/$n.folded") && echo yes || echo NO)
    printf '%-12s %10s %8s %s\n' "$n" "$m" "$(awk -v a="$m" -v b="$host" 'BEGIN { printf "%.3f", a / b }')" "$same"
done
echo "per-run times: $BENCH_OUT"
