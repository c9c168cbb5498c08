#!/usr/bin/env bash
# Off-CPU folded stacks: perfpipe against the best text route from perf's own tools, on a large
# system-wide `perf record -a -g -e sched:sched_switch` recording.
#
# Times, alternating for BENCH_ROUNDS rounds (default 3; the starting command rotates):
#   perfpipe   $PERFPIPE -i REC --weight offcpu -o ours.folded
#   perf+awk   perf script -i REC --ns -F tid,time,trace,ip,sym | awk (collapse the intervals)
# (perf sorts the records by time before it prints them, so the collapser pairs each switch-out
# with the thread's next switch-in with no state but one open interval per thread: the simplest
# correct text route. `perf record --off-cpu` needs BPF skeletons Debian's perf lacks; `perf
# sched timehist` prints times, not stacks.) For each: the whole pipeline's wall time, and the
# user/sys CPU and peak RSS of its first process (perfpipe, or perf script), with GNU time; then
# medians, the ratio, and how much of the off-CPU weight the two outputs agree on.
#
# Input: $OFFCPU_INPUT (default /tmp/perfpipe-bench/offcpu.data), recorded if missing with
#   perf record -m 8192 -a -g -e sched:sched_switch -o REC -- perf bench sched pipe -l $OFFCPU_LOOPS
# (OFFCPU_LOOPS default 300000: about 600 K switches, 140 MB, no lost samples on a 2-vCPU VM).
set -euo pipefail

script_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo_root=$(cd "$script_dir/.." && pwd)
source "$script_dir/lib.sh"
INPUT=${OFFCPU_INPUT:-/tmp/perfpipe-bench/offcpu.data}
BENCH_ROUNDS=${BENCH_ROUNDS:-3}
PERF=${PERF:-perf}
PERFPIPE=${PERFPIPE:-$repo_root/target/release/perfpipe}
BENCH_OUT=${BENCH_OUT:-$script_dir/results/offcpu-$(date -u +%F).tsv}

[[ -x /usr/bin/time ]] || die "needs GNU time (apt-get install time)"
[[ -x $PERFPIPE ]] || die "build it first: cargo build --release ($PERFPIPE)"
[[ -e /sys/kernel/tracing/events/sched ]] || die "needs tracefs: mount -t tracefs nodev /sys/kernel/tracing"

if [[ ! -s $INPUT ]]; then
    mkdir -p "$(dirname "$INPUT")"
    log "recording $INPUT"
    "$PERF" record -q -m 8192 -a -g -e sched:sched_switch -o "$INPUT.tmp" -- \
        "$PERF" bench sched pipe -l "${OFFCPU_LOOPS:-300000}" >/dev/null
    mv -f "$INPUT.tmp" "$INPUT"
fi
input_size=$(stat -c %s "$INPUT")
echo "input: $INPUT ($input_size bytes)"

workdir=$(mktemp -d)
trap 'rm -rf "$workdir"' EXIT

# The collapser: one open interval per thread, charged at its switch-in to the folded stack of
# its switch-out (comm;[off-cpu: STATE];root…leaf), in ns.
cat >"$workdir/collapse.awk" <<'AWK'
function ns(t,   p) { p = index(t, "."); return substr(t, 1, p - 1) * 1000000000 + substr(t, p + 1) }
/prev_pid=/ {
    for (i = 1; i <= NF; i++) if ($i ~ /^[0-9]+\.[0-9]+:$/) { t = ns(substr($i, 1, length($i) - 1)); break }
    match($0, /prev_comm=.* prev_pid=/); comm = substr($0, RSTART + 10, RLENGTH - 20); gsub(/ /, "_", comm)
    match($0, / prev_pid=[0-9]+/); prev = substr($0, RSTART + 10, RLENGTH - 10)
    match($0, / prev_state=[^ ]+/); state = substr($0, RSTART + 12, RLENGTH - 12); sub(/\+$/, "", state)
    match($0, / next_pid=[0-9]+/); next_ = substr($0, RSTART + 10, RLENGTH - 10)
    n = 0; in_sample = 1; next
}
in_sample && /^[ \t]+[0-9a-f]+ / { sub(/^[ \t]+[0-9a-f]+ /, ""); frames[++n] = $0; next }
in_sample && /^$/ {
    in_sample = 0
    if (prev != 0) {
        key = comm ";[off-cpu: " state "]"
        for (i = n; i >= 1; i--) key = key ";" frames[i]
        open_[prev] = key; since[prev] = t
    }
    if (next_ in open_) { w[open_[next_]] += t - since[next_]; delete open_[next_] }
}
END { for (k in w) print k, w[k] }
AWK

T="/usr/bin/time -f $T_FORMAT -o $workdir/t"
names=("perfpipe" "perf+awk")
cmds=(
    "$T '$PERFPIPE' -i '$INPUT' --weight offcpu -o '$workdir/ours.folded'"
    "$T '$PERF' script -i '$INPUT' --ns -F tid,time,trace,ip,sym 2>/dev/null | mawk -f '$workdir/collapse.awk' > '$workdir/theirs.folded'"
)
mkdir -p "$(dirname "$BENCH_OUT")"
runs_out="${BENCH_OUT%.tsv}.runs.tsv"
cat "$INPUT" >/dev/null # page cache
run_rounds

printf 'name\tmedian_pipeline_wall_s\tmedian_user_s\tmedian_sys_s\tmedian_maxrss_mb\n' >"$BENCH_OUT"
echo "rounds: $BENCH_ROUNDS   machine: $(nproc) CPU, $(uname -r), $("$PERF" --version)"
printf '%-9s %9s %8s %8s %9s\n' command pipe_s user_s sys_s rss_MB
declare -A pw
for n in "${names[@]}"; do
    pw[$n]=$(col "$n" 4 | median)
    u=$(col "$n" 6 | median); s=$(col "$n" 7 | median)
    rss=$(col "$n" 8 | median | awk '{ if ($1=="NA") print "NA"; else printf "%.1f", $1/1024 }')
    printf '%s\t%s\t%s\t%s\t%s\n' "$n" "${pw[$n]}" "$u" "$s" "$rss" >>"$BENCH_OUT"
    printf '%-9s %9s %8s %8s %9s\n' "$n" "${pw[$n]}" "$u" "$s" "$rss"
done
echo "perf+awk / perfpipe wall time: $(ratio "${pw[perf+awk]}" "${pw[perfpipe]}")x"

# Agreement: the off-CPU ns per state, both ways, of the intervals closed by a switch-in (the
# text route drops those the recording ended in; perfpipe shows them apart, "open at end"). Per
# state, not per comm: the text route names a thread by the tracepoint's prev_comm, perfpipe by
# its COMM records as perf report does (kworker/0:0 vs kworker/0:0-events).
for f in ours theirs; do
    grep -v ', open at end\]' "$workdir/$f.folded" | awk '{ n = $NF; $NF = ""; split($0, p, ";"); sub(/ +$/, "", p[2]); w[p[2]] += n } END { for (k in w) print k "\t" w[k] }' \
        | sort >"$workdir/$f.by-comm"
done
awk -F'\t' 'FNR == NR { o[$1] = $2; next } { t[$1] = $2 }
    END {
        for (k in o) { a += o[k]; d += (o[k] > t[k] ? o[k] - t[k] : t[k] - o[k]) }
        for (k in t) { b += t[k]; if (!(k in o)) d += t[k] }
        for (k in o) printf "  %-16s ours %14.0f  theirs %14.0f\n", k, o[k], t[k]
        printf "off-CPU ns by state (closed intervals): ours %.0f, theirs %.0f, |difference| %.3f%% of theirs\n", a, b, 100 * d / b
    }' "$workdir/ours.by-comm" "$workdir/theirs.by-comm"
nfail=$(failed_runs)
((nfail == 0)) || { echo "FAILED runs: $nfail (see $runs_out)"; exit 1; }
