#!/usr/bin/env bash
# OTLP profiles against pprof on the same recording: wall time, peak RSS, the sink's own
# working time (--stats-json: taking samples in, naming frames, encoding) and the size of what
# each writes (the OTLP request gzip'd too, as an OTLP/HTTP body with Content-Encoding: gzip
# would be), and a windowed push (--window) to a receiver on loopback that discards the bodies.
#
#   pprof        cat rec | $PERFPIPE -o out.pb.gz
#   otlp         cat rec | $PERFPIPE -o out.otlp.pb
#   otlp push    cat rec | $PERFPIPE --window $BENCH_WINDOW -o http://127.0.0.1:PORT/v1development/profiles
#
# BENCH_ROUNDS rounds (the starting command rotates), medians. The input is
# $PERFPIPE_BENCH_INPUT (default /tmp/perfpipe-bench/otlp.pipe), recorded when missing as
# benches/passthrough.sh records its own, to BENCH_MIN_MB (default 100) MiB. See
# benches/README.md for the other environment variables.
set -euo pipefail

script_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo_root=$(cd "$script_dir/.." && pwd)
source "$script_dir/lib.sh"

bench_dir=/tmp/perfpipe-bench
INPUT=${PERFPIPE_BENCH_INPUT:-$bench_dir/otlp.pipe}
BENCH_OUT=${BENCH_OUT:-$bench_dir/otlp.tsv}
BENCH_ROUNDS=${BENCH_ROUNDS:-3}
BENCH_WINDOW=${BENCH_WINDOW:-1s}
PERF=${PERF:-perf}
PERFPIPE=${PERFPIPE:-$repo_root/target/release/perfpipe}
BENCH_MIN_MB=${BENCH_MIN_MB:-100}
BENCH_WORKLOAD_LOOPS=${BENCH_WORKLOAD_LOOPS:-4}

[[ $BENCH_ROUNDS =~ ^[1-9][0-9]*$ ]] || die "BENCH_ROUNDS must be a positive integer"
[[ -x $PERFPIPE ]] || die "perfpipe binary not found: $PERFPIPE (cargo build --release)"
[[ -x /usr/bin/time ]] || die "needs GNU time (apt-get install time)"
command -v python3 >/dev/null || die "needs python3 (the receiver)"

[[ -s $INPUT ]] || record_workload_input "$INPUT"
input_size=$(stat -c %s "$INPUT")
echo "input: $INPUT ($input_size bytes)"

workdir=$(mktemp -d)
receiver_pid=
cleanup() {
    [[ -n $receiver_pid ]] && kill "$receiver_pid" 2>/dev/null
    rm -rf "$workdir"
}
trap cleanup EXIT

# The receiver: answers 200 to every POST, counts the requests and their bytes.
cat >"$workdir/receiver.py" <<'EOF'
import http.server, sys
counts = [0, 0]
class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_POST(self):
        n = int(self.headers["Content-Length"])
        self.rfile.read(n)
        counts[0] += 1; counts[1] += n
        with open(sys.argv[2], "w") as f:
            f.write("%d %d\n" % tuple(counts))
        self.send_response(200); self.send_header("Content-Length", "0"); self.end_headers()
    def log_message(self, *a):
        pass
s = http.server.HTTPServer(("127.0.0.1", 0), H)
with open(sys.argv[1], "w") as f:
    f.write(str(s.server_address[1]))
s.serve_forever()
EOF
python3 "$workdir/receiver.py" "$workdir/port" "$workdir/received" &
receiver_pid=$!
for _ in $(seq 100); do [[ -s $workdir/port ]] && break; sleep 0.1; done
port=$(cat "$workdir/port")

T="/usr/bin/time -f $T_FORMAT -o $workdir/t"
names=("pprof" "otlp" "otlp push")
cmds=(
    "cat '$INPUT' | $T '$PERFPIPE' -o '$workdir/out.pb.gz' --stats-json '$workdir/pprof.json'"
    "cat '$INPUT' | $T '$PERFPIPE' -o '$workdir/out.otlp.pb' --stats-json '$workdir/otlp.json'"
    "cat '$INPUT' | $T '$PERFPIPE' --window $BENCH_WINDOW -o http://127.0.0.1:$port/v1development/profiles --stats-json '$workdir/push.json'"
)
jsons=(pprof otlp push)

mkdir -p "$(dirname "$BENCH_OUT")"
runs_out="${BENCH_OUT%.tsv}.runs.tsv"
cat "$INPUT" >/dev/null # page cache
run_rounds

# The sink's working seconds of the last run of each command.
sink_s() {
    python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(d["stages"][-1]["working_seconds"])' "$1"
}
samples=$(python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(d["stages"][-1]["counters"]["samples"])' "$workdir/otlp.json" 2>/dev/null || echo NA)

printf 'name\truns_ok\tmedian_pipeline_wall_s\tmedian_user_s\tmedian_maxrss_mb\tsink_working_s\tbytes\n' >"$BENCH_OUT"
echo
echo "rounds: $BENCH_ROUNDS   input: $input_size bytes, $samples samples   machine: $(nproc) CPU, $(uname -r)"
printf '%-10s %3s %8s %8s %8s %8s %12s\n' command ok pipe_s user_s rss_MB sink_s bytes
for k in "${!names[@]}"; do
    n=${names[$k]}
    ok=$(col "$n" 4 | wc -l)
    pw=$(col "$n" 4 | median); u=$(col "$n" 6 | median)
    rss=$(col "$n" 8 | median | awk '{ if ($1=="NA") print "NA"; else printf "%.0f", $1/1024 }')
    sink=$(sink_s "$workdir/${jsons[$k]}.json" 2>/dev/null || echo NA)
    case $n in
        pprof) bytes=$(stat -c %s "$workdir/out.pb.gz") ;;
        otlp) bytes=$(stat -c %s "$workdir/out.otlp.pb") ;;
        *) bytes=$(awk '{print $2" ("$1" requests, last run)"}' "$workdir/received" 2>/dev/null || echo NA) ;;
    esac
    printf '%-10s %3s %8s %8s %8s %8s %12s\n' "$n" "$ok" "$pw" "$u" "$rss" "$sink" "$bytes"
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$n" "$ok" "$pw" "$u" "$rss" "$sink" "$bytes" >>"$BENCH_OUT"
done
gz=$(gzip -c "$workdir/out.otlp.pb" | wc -c)
echo "otlp request gzip'd: $gz bytes"
printf 'otlp gzip\t\t\t\t\t\t%s\n' "$gz" >>"$BENCH_OUT"
(($(failed_runs) == 0)) || die "$(failed_runs) runs failed (see $runs_out)"
