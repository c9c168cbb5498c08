#!/usr/bin/env bash
# File-mode benchmark: a perf.data file in, build ids injected, a perf.data file out.
#
# Times, alternating for BENCH_ROUNDS rounds (default 3):
#   perfpipe -b     $PERFPIPE -i IN -o OUT --buildid          (file → file, build ids)
#   perf inject -b  perf inject -b -i IN -o OUT               (the same with perf)
#   perfpipe copy   $PERFPIPE -i IN -o OUT                    (file → file, no stage)
#   perfpipe →pipe  $PERFPIPE -i IN -o /dev/null              (file → pipe, the reader alone)
# and prints, per command, the median wall time, user and system CPU and peak RSS (GNU time),
# plus the sample count of each output (perf report --stats) checked against the input's.
#
# Input: $FILEMODE_INPUT (default /tmp/perfpipe-bench/rec.file.data), recorded if missing with
#   BENCH_WORKLOAD_LOOPS=${FILEMODE_LOOPS:-4} perf record -e cpu-clock -c 20000 -g -o IN -- benches/workload.sh
# (about 120 MB on the 2-vCPU VM; must be >= 100 MiB).
set -euo pipefail

script_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
source "$script_dir/lib.sh"
repo_root=$(cd "$script_dir/.." && pwd)
bench_dir=/tmp/perfpipe-bench
INPUT=${FILEMODE_INPUT:-$bench_dir/rec.file.data}
BENCH_ROUNDS=${BENCH_ROUNDS:-3}
PERF=${PERF:-perf}
PERFPIPE=${PERFPIPE:-$repo_root/target/release/perfpipe}


[[ -x /usr/bin/time ]] || die "needs GNU time (apt-get install time)"
[[ -x $PERFPIPE ]] || die "build it first: cargo build --release ($PERFPIPE)"

if [[ ! -s $INPUT ]]; then
    mkdir -p "$(dirname "$INPUT")"
    log "recording $INPUT (takes a few minutes)"
    BENCH_WORKLOAD_LOOPS=${FILEMODE_LOOPS:-4} "$PERF" record -q -e cpu-clock -c 20000 -g \
        -o "$INPUT.tmp" -- "$script_dir/workload.sh"
    mv -f "$INPUT.tmp" "$INPUT"
fi
size=$(stat -c %s "$INPUT")
((size >= 100 * 1024 * 1024)) || die "$INPUT is $size bytes; need >= 100 MiB (raise FILEMODE_LOOPS)"

work=$(mktemp -d "$bench_dir/filemode.XXXXXX")
trap 'rm -rf "$work"' EXIT

names=("perfpipe -b" "perf inject -b" "perfpipe copy" "perfpipe ->pipe")
run_one() { # INDEX OUT
    case $1 in
    0) "$PERFPIPE" -i "$INPUT" -o "$2" --buildid ;;
    1) "$PERF" inject -b -i "$INPUT" -o "$2" ;;
    2) "$PERFPIPE" -i "$INPUT" -o "$2" ;;
    3) "$PERFPIPE" -i "$INPUT" -o /dev/null ;;
    esac
}
export -f run_one
export PERFPIPE PERF INPUT

samples() { "$PERF" report -i "$1" --stats 2>/dev/null | awk '/SAMPLE events:/ { print $3; exit }'; }
want=$(samples "$INPUT")
log "input: $INPUT ($size bytes, $((size / 1024 / 1024)) MiB, $want samples)"

for ((r = 1; r <= BENCH_ROUNDS; r++)); do
    for i in "${!names[@]}"; do
        out=$work/out.$i.data
        rm -f "$out"
        sync
        /usr/bin/time -f '%e %U %S %M' -o "$work/t.$i.$r" bash -c "run_one $i $out" \
            >/dev/null 2>"$work/err.$i"
        read -r w u s m <"$work/t.$i.$r"
        log "round $r/$BENCH_ROUNDS  $(printf '%-16s' "${names[$i]}") wall ${w}s user ${u}s sys ${s}s rss $((m / 1024)) MB"
        if ((r == 1)) && [[ -s $out ]]; then
            got=$(samples "$out")
            [[ $got == "$want" ]] || die "${names[$i]}: $got samples in the output, $want in the input"
            if ((i <= 1)); then
                "$PERF" buildid-list -i "$out" 2>/dev/null | sort >"$work/ids.$i"
            fi
        fi
    done
done

echo
echo "input: $size bytes ($want samples), rounds: $BENCH_ROUNDS, $(nproc) CPUs, $(uname -r), $("$PERF" --version)"
printf '%-16s %8s %8s %8s %8s\n' command wall_s user_s sys_s rss_MB
for i in "${!names[@]}"; do
    tcol() { for ((r = 1; r <= BENCH_ROUNDS; r++)); do awk -v c="$1" '{ print $c }' "$work/t.$i.$r"; done | median; }
    printf '%-16s %8s %8s %8s %8d\n' "${names[$i]}" "$(tcol 1)" "$(tcol 2)" "$(tcol 3)" "$(( $(tcol 4) / 1024 ))"
done
echo "build ids listed: perfpipe -b $(wc -l <"$work/ids.0"), perf inject -b $(wc -l <"$work/ids.1");" \
    "only in perf inject's: $(comm -13 "$work/ids.0" "$work/ids.1" | awk '{ printf "%s ", $2 }')"
