#!/usr/bin/env bash
# Parquet and Firefox output benchmark: samples/s into Parquet and into the Firefox Profiler's
# JSON, their peak RSS, against the floor (`cat rec | cat | cat`) and pprof (`-o x.pb.gz`) in the
# same interleaved rounds; then the Parquet file's size against the recording, the DuckDB top-20
# query time, and the same query on a partitioned dataset with DuckDB and, if pyspark is
# installed, Spark in local mode (benches/spark_top.py).
#
#   benches/parquet.sh            # input: $PERFPIPE_BENCH_INPUT or /tmp/perfpipe-bench/rec.pipe
#   PERFPIPE_BEFORE=/tmp/old/perfpipe benches/parquet.sh   # the same outputs of another build too
#
# The input is the passthrough benchmark's recording (a >= 400 MB -g recording; run
# benches/passthrough.sh once to make it). BENCH_ROUNDS rounds (default 3), each running every
# command once, the first one rotating; medians. With PERFPIPE_BEFORE, the Parquet rows of both
# builds are compared with DuckDB (same rows, same order). One row per run goes to
# $BENCH_OUT (default: outputs-, the date, .runs.tsv in benches/results/).
set -euo pipefail

script_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
source "$script_dir/lib.sh"
repo_root=$(cd "$script_dir/.." && pwd)
INPUT=${PERFPIPE_BENCH_INPUT:-/tmp/perfpipe-bench/rec.pipe}
PERFPIPE=${PERFPIPE:-$repo_root/target/release/perfpipe}
PERFPIPE_BEFORE=${PERFPIPE_BEFORE:-}
BENCH_ROUNDS=${BENCH_ROUNDS:-3}
runs_out=${BENCH_OUT:-$script_dir/results/outputs-$(date -u +%F).runs.tsv}
out=$(mktemp -d /tmp/perfpipe-parquet.XXXXXX)
workdir=$out
trap 'rm -rf "$out"' EXIT

[[ -f $INPUT ]] || { echo "parquet.sh: no $INPUT (run benches/passthrough.sh first)" >&2; exit 1; }
[[ -x $PERFPIPE ]] || cargo build --release --manifest-path "$repo_root/Cargo.toml"
python3 -c "import duckdb" 2>/dev/null || python3 -m pip install -q duckdb
cat "$INPUT" >/dev/null # in the page cache

T="/usr/bin/time -f $T_FORMAT -o $workdir/t"
names=(floor parquet firefox pprof)
cmds=(
    "cat '$INPUT' | $T cat | cat >/dev/null"
    "$T '$PERFPIPE' -i '$INPUT' -o '$out/s.parquet'"
    "$T '$PERFPIPE' -i '$INPUT' -o '$out/s.json.gz'"
    "$T '$PERFPIPE' -i '$INPUT' -o '$out/s.pb.gz'"
)
if [[ -n $PERFPIPE_BEFORE ]]; then
    names+=(parquet-before firefox-before)
    cmds+=(
        "$T '$PERFPIPE_BEFORE' -i '$INPUT' -o '$out/before.parquet'"
        "$T '$PERFPIPE_BEFORE' -i '$INPUT' -o '$out/before.json.gz'"
    )
fi
run_rounds
failed=$(failed_runs)
((failed == 0)) || log "$failed runs failed (excluded from the medians)"

samples=$(python3 -c "import duckdb; print(duckdb.sql(\"select count(*) from '$out/s.parquet' where off_cpu_end is null\").fetchall()[0][0])")
floor=$(col floor 4 | median)
echo "input: $INPUT, $(($(stat -c %s "$INPUT") / 1000000)) MB, $samples samples; $BENCH_ROUNDS rounds, medians"
printf '| job | wall s | M samples/s | x floor | peak RSS MiB |\n|---|---|---|---|---|\n'
for n in "${names[@]}"; do
    w=$(col "$n" 4 | median)
    r=$(col "$n" 8 | median | awk '{ if ($1=="NA") print "NA"; else printf "%.0f", $1/1024 }')
    printf '| %s | %s | %s | %s | %s |\n' "$n" "$w" "$(ratio "$samples" "$(awk -v w="$w" 'BEGIN{print w*1e6}')" 2)" "$(ratio "$w" "$floor" 2)" "$r"
done
if [[ -n $PERFPIPE_BEFORE ]]; then
    for n in parquet firefox; do
        echo "$n: before / after wall $(ratio "$(col "$n-before" 4 | median)" "$(col "$n" 4 | median)" 2)"
    done
    python3 - "$out/before.parquet" "$out/s.parquet" <<'PY'
import duckdb, sys
a, b = sys.argv[1], sys.argv[2]
q = "select count(*) from (select * from '{}' except all select * from '{}')"
diff = duckdb.sql(q.format(a, b)).fetchall()[0][0] + duckdb.sql(q.format(b, a)).fetchall()[0][0]
n = duckdb.sql(f"select count(*) from '{a}'").fetchall()[0][0]
same_order = duckdb.sql(f"select count(*) from (select row_number() over () as i, * from '{a}') x join (select row_number() over () as i, * from '{b}') y on x.i = y.i and x.time = y.time and x.stack_id = y.stack_id").fetchall()[0][0]
print(f"Parquet rows before/after: {n} rows, {diff} differ, {same_order} in the same place")
PY
fi

rows=$(python3 -c "import duckdb; print(duckdb.sql(\"select count(*) from '$out/s.parquet'\").fetchall()[0][0])")
in_bytes=$(stat -c %s "$INPUT"); pq_bytes=$(stat -c %s "$out/s.parquet")
query="select stack[len(stack)].function as leaf, sum(period) as weight from TABLE group by leaf order by weight desc limit 20"
qt=$(python3 - "$out/s.parquet" "$query" <<'PY'
import duckdb, sys, time
path, q = sys.argv[1], sys.argv[2].replace("TABLE", f"'{sys.argv[1]}'")
times = []
for _ in range(5):
    t = time.perf_counter(); duckdb.sql(q).fetchall(); times.append(time.perf_counter() - t)
print(sorted(times)[2])
PY
)
awk -v r="$rows" -v a="$in_bytes" -v b="$pq_bytes" -v q="$qt" 'BEGIN {
    printf "Parquet: %d rows, file %.1f MB = %.3f x the recording\n", r, b / 1e6, b / a
    printf "DuckDB top-20 leaf functions: %.3f s (median of 5)\n", q
}'

# A dataset (two hosts' worth: the same recording written twice under other host names is what
# a fleet looks like; here one host, parts every 256 MB of rows) read as one table.
"$PERFPIPE" -i "$INPUT" --parquet --rotate 256M -o "$out/ds/" >/dev/null
python3 - "$out/ds" <<'PY'
import duckdb, sys, time
t = time.perf_counter()
rows = duckdb.sql(f"select count(*), count(distinct host) from read_parquet('{sys.argv[1]}/**/*.parquet', hive_partitioning = true)").fetchall()[0]
print(f"DuckDB on the dataset: {rows[0]} rows, {rows[1]} host(s), {time.perf_counter() - t:.3f} s")
PY
if python3 -c "import pyspark" 2>/dev/null; then
    python3 "$script_dir/spark_top.py" "$out/ds"
else
    echo "Spark: pyspark not installed (python3 -m pip install pyspark), skipped"
fi
