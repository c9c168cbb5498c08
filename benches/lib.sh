# Shared by the benchmark scripts (sourced, after `set -euo pipefail`): messages, medians and
# ratios, the large `-g` recording of benches/workload.sh, and timed rounds of shell pipelines.

bench_name=$(basename "$0")
die() { echo "$bench_name: $*" >&2; exit 1; }
log() { echo "# $*" >&2; }

# median: the median of the numbers on standard input (the mean of the middle two for an even
# count), NA for none.
median() {
    sort -g | awk '{a[NR]=$1} END{if(NR==0){print "NA"} else if(NR%2){print a[(NR+1)/2]} else {printf "%.3f\n",(a[NR/2]+a[NR/2+1])/2}}'
}

# ratio A B [DECIMALS]: A / B, NA when either is NA or B is 0.
ratio() {
    awk -v a="$1" -v b="$2" -v d="${3:-1}" 'BEGIN{ if (a=="NA"||b=="NA"||b==0) print "NA"; else printf "%.*f", d, a/b }'
}

# record_workload_input INPUT: `perf record -e cpu-clock -c 20000 -g -o -` of benches/workload.sh
# into INPUT, re-recorded with more loops until it has BENCH_MIN_MB MiB; writes INPUT.info.
# Reads PERF, BENCH_MIN_MB and BENCH_WORKLOAD_LOOPS (the starting loop count).
record_workload_input() {
    local input=$1 min_bytes=$((BENCH_MIN_MB * 1024 * 1024))
    local loops=$BENCH_WORKLOAD_LOOPS size tmp t0
    local script_dir
    script_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
    mkdir -p "$(dirname "$input")"
    tmp="$input.tmp.$$"
    trap 'rm -f "$tmp"' EXIT
    while :; do
        log "recording $input (workload loops=$loops, need >= $BENCH_MIN_MB MiB); takes minutes"
        t0=$SECONDS
        BENCH_WORKLOAD_LOOPS=$loops \
            "$PERF" record -e cpu-clock -c 20000 -g -o - -- "$script_dir/workload.sh" >"$tmp"
        size=$(stat -c %s "$tmp")
        log "recorded $size bytes ($((size / 1024 / 1024)) MiB) in $((SECONDS - t0)) s"
        ((size >= min_bytes)) && break
        # grow proportionally, with 15 % margin
        loops=$(( (loops * min_bytes * 115 / 100 + size - 1) / size ))
        log "too small; re-recording with loops=$loops"
    done
    mv -f "$tmp" "$input"
    trap - EXIT
    {
        echo "command: BENCH_WORKLOAD_LOOPS=$loops $PERF record -e cpu-clock -c 20000 -g -o - -- benches/workload.sh > $input"
        echo "perf: $("$PERF" --version)"
        echo "kernel: $(uname -r)"
        echo "date: $(date -u +%FT%TZ)"
        echo "bytes: $size"
    } >"$input.info"
}

# Timed rounds of pipelines. The caller sets `names` and `cmds` (parallel arrays: a label and a
# bash pipeline whose first heavy process runs under "$T", GNU time writing to $workdir/t),
# `workdir` and `runs_out`; run_rounds writes the header of `runs_out` and one row per run:
#   round name command pipeline_wall_s wall_s user_s sys_s maxrss_kb status
# BENCH_ROUNDS rounds, the starting command rotating so that none always runs first.
T_FORMAT="%e_%U_%S_%M"

# time_one TSV NAME CMD...: runs CMD once under /usr/bin/time and appends "NAME wall rss_kb cpu"
# (seconds, KiB, user + sys seconds) to TSV: one timed run of a script that rotates its own variants.
time_one() {
    local tsv=$1 name=$2 t0 t1 rss user sys
    shift 2
    t0=$(date +%s%N)
    /usr/bin/time -f '%M %U %S' -o "$tsv.time" "$@"
    t1=$(date +%s%N)
    read -r rss user sys <"$tsv.time"
    echo "$name $(echo "($t1 - $t0) / 1000000000" | bc -l | cut -c1-6) $rss $(echo "$user + $sys" | bc -l)" >>"$tsv"
}

# run_one IDX: prints "pipeline_wall wall user sys rss_kb status"
run_one() {
    local i=$1 t0 t1 st=ok vals
    rm -f "$workdir/t"
    t0=$(date +%s%N)
    bash -o pipefail -c "${cmds[$i]}" 2>"$workdir/err" || st=fail
    t1=$(date +%s%N)
    vals=$(tr '_' ' ' <"$workdir/t" 2>/dev/null | grep -E '^[0-9.]+ [0-9.]+ [0-9.]+ [0-9]+$' | tail -n1 || true)
    [[ -n $vals ]] || vals="NA NA NA NA"
    [[ $st == ok ]] || log "'${names[$i]}' failed: $(tail -n3 "$workdir/err" | tr '\n' ' ')"
    echo "$(awk -v a="$t0" -v b="$t1" 'BEGIN{printf "%.3f", (b-a)/1e9}') $vals $st"
}

run_rounds() {
    local ncmd=${#names[@]} r k i pw wall user sys rss st width=0
    for i in "${names[@]}"; do ((${#i} > width)) && width=${#i}; done
    printf 'round\tname\tcommand\tpipeline_wall_s\twall_s\tuser_s\tsys_s\tmaxrss_kb\tstatus\n' >"$runs_out"
    for ((r = 1; r <= BENCH_ROUNDS; r++)); do
        for ((k = 0; k < ncmd; k++)); do
            i=$(( (k + r - 1) % ncmd ))
            read -r pw wall user sys rss st < <(run_one "$i")
            printf '%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$r" "${names[$i]}" "${cmds[$i]}" \
                "$pw" "$wall" "$user" "$sys" "$rss" "$st" >>"$runs_out"
            log "round $r/$BENCH_ROUNDS  $(printf '%-*s' "$width" "${names[$i]}") pipeline ${pw}s (first process: wall ${wall}s user ${user}s sys ${sys}s rss ${rss}KB)  $st"
        done
    done
}

# col NAME FIELD: the values of column FIELD of NAME's successful runs in `runs_out` (name in
# column 2, status in 9; run_rounds': 4 pipeline wall, 5 wall, 6 user, 7 sys, 8 rss).
col() { awk -F'\t' -v n="$1" -v f="$2" 'NR>1 && $2==n && $9=="ok" && $f!="NA"{print $f}' "$runs_out"; }

# failed_runs: how many runs in `runs_out` did not succeed.
failed_runs() { awk -F'\t' 'NR>1 && $9!="ok"' "$runs_out" | wc -l; }
