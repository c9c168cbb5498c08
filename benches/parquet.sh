#!/usr/bin/env bash
# Parquet output benchmark: samples/s into Parquet, file size against the recording, and the
# DuckDB top-20 query time; then the same query on a partitioned dataset with DuckDB and, if
# pyspark is installed, Spark in local mode (benches/spark_top.py).
#
#   benches/parquet.sh            # input: $PERFPIPE_BENCH_INPUT or /tmp/perfpipe-bench/rec.pipe
#
# The input is the passthrough benchmark's recording (a >= 400 MB -g recording; run
# benches/passthrough.sh once to make it). BENCH_ROUNDS rounds (default 3), medians.
set -euo pipefail

script_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
source "$script_dir/lib.sh"
repo_root=$(cd "$script_dir/.." && pwd)
INPUT=${PERFPIPE_BENCH_INPUT:-/tmp/perfpipe-bench/rec.pipe}
PERFPIPE=${PERFPIPE:-$repo_root/target/release/perfpipe}
BENCH_ROUNDS=${BENCH_ROUNDS:-3}
out=$(mktemp -d /tmp/perfpipe-parquet.XXXXXX)
trap 'rm -rf "$out"' EXIT

[[ -f $INPUT ]] || { echo "parquet.sh: no $INPUT (run benches/passthrough.sh first)" >&2; exit 1; }
[[ -x $PERFPIPE ]] || cargo build --release --manifest-path "$repo_root/Cargo.toml"
python3 -c "import duckdb" 2>/dev/null || python3 -m pip install -q duckdb


walls=(); rss=()
for ((i = 0; i < BENCH_ROUNDS; i++)); do
    rm -f "$out/s.parquet"
    t=$( { /usr/bin/time -f "%e %M" "$PERFPIPE" -i "$INPUT" -o "$out/s.parquet" --stats-json "$out/stats.json" 2>&1 >/dev/null; } | tail -1)
    walls+=("${t% *}"); rss+=("${t#* }")
done
wall=$(printf '%s\n' "${walls[@]}" | median)
peak=$(printf '%s\n' "${rss[@]}" | median)
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
echo "input: $INPUT, $((in_bytes / 1000000)) MB; rows: $rows"
awk -v w="$wall" -v r="$rows" -v m="$peak" -v a="$in_bytes" -v b="$pq_bytes" -v q="$qt" 'BEGIN {
    printf "perfpipe -o x.parquet: %.2f s (median of rounds), %.2f M samples/s, peak RSS %d MB\n", w, r / w / 1e6, m / 1024
    printf "file: %.1f MB = %.3f x the recording\n", b / 1e6, b / a
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
