#!/usr/bin/env bash
# The debuginfod client's HTTP candidates side by side (benches/http-clients/, one tiny program
# each that fetches a URL N times into a file): a clean release build (wall and CPU seconds, the
# workspace's release profile), the stripped binary's size over the std-only floor, the crates
# built, and the median fetch time from a real `debuginfod` on loopback, over http and, through
# socat's TLS with a CA made here (SSL_CERT_FILE), over https. Results: benches/results/http-clients.md.
#
#   benches/http_clients.sh              # 50 fetches of the small file, 10 of the large one
#   BENCH_FETCHES=200 benches/http_clients.sh
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
work=${HTTP_BENCH_DIR:-/tmp/perfpipe-http-bench}
n=${BENCH_FETCHES:-50}
variants=${HTTP_VARIANTS:-std rustls attohttpc ureq}
rm -rf "$work" && mkdir -p "$work/debug"
pids=()
trap 'for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done' EXIT

echo "# $(date -u +%FT%TZ) $(uname -r), $(nproc) cores, $(rustc --version)"
printf '%-10s %8s %8s %10s %10s %6s\n' variant wall_s cpu_s bin_bytes stripped crates
for v in $variants; do
    t="$work/target-$v"
    (cd "$here/http-clients/$v" && cargo fetch -q)
    /usr/bin/time -o "$work/time-$v" -f '%e %U %S' \
        bash -c "cd '$here/http-clients/$v' && CARGO_TARGET_DIR='$t' nice -n 10 cargo build --release -q 2>/dev/null"
    read -r wall user sys <"$work/time-$v"
    bin="$t/release/f-$v"
    strip -o "$work/f-$v.stripped" "$bin"
    crates=$(cd "$here/http-clients/$v" && cargo tree -e normal --prefix none | sed 's/ (\*)//' | sort -u | wc -l)
    printf '%-10s %8.1f %8.1f %10d %10d %6d\n' "$v" "$wall" "$(echo "$user + $sys" | bc)" \
        "$(stat -c %s "$bin")" "$(stat -c %s "$work/f-$v.stripped")" "$((crates - 1))"
done

# What debuginfod serves: a small C program's debug file, and a large one (a variant's binary,
# whose line tables make it a debuginfo file).
cc -g -O1 -fno-omit-frame-pointer -o "$work/fp" "$here/../tests/workloads/fp.c"
objcopy --only-keep-debug "$work/fp" "$work/debug/fp.debug"
cp "$(ls -S "$work"/target-*/release/f-* | head -1)" "$work/debug/big"
id_of() { readelf -n "$1" | sed -n 's/.*Build ID: //p'; }
small=$(id_of "$work/debug/fp.debug")
big=$(id_of "$work/debug/big")

# A test CA and a server certificate for 127.0.0.1 signed by it.
(
    cd "$work"
    openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.pem -days 1 \
        -subj /CN=perfpipe-bench-ca 2>/dev/null
    openssl req -newkey rsa:2048 -nodes -keyout server.key -out server.csr \
        -subj /CN=127.0.0.1 2>/dev/null
    printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\n' >san.ext
    openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 1 \
        -extfile san.ext -out server.crt 2>/dev/null
    cat server.crt server.key >server.pem
)
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
port=$(free_port)
tls=$(free_port)
debuginfod -F -d :memory: -t 0 -g 0 -p "$port" "$work/debug" >/dev/null 2>&1 &
pids+=($!)
socat "OPENSSL-LISTEN:$tls,bind=127.0.0.1,reuseaddr,fork,cert=$work/server.pem,verify=0" \
    "TCP:127.0.0.1:$port" 2>/dev/null &
pids+=($!)
for _ in $(seq 150); do
    "$work/target-std/release/f-std" "http://127.0.0.1:$port/buildid/$big/debuginfo" "$work/out" 1 \
        >/dev/null 2>&1 && break
    sleep 0.2
done
export SSL_CERT_FILE="$work/ca.pem"
echo
echo "median (min) ms of one fetch: $n of fp.debug ($(stat -c %s "$work/debug/fp.debug") B), $((n / 5)) of big ($(stat -c %s "$work/debug/big") B)"
printf '%-10s %22s %22s %22s %22s\n' variant http_small https_small http_big https_big
for v in $variants; do
    bin="$work/target-$v/release/f-$v"
    row=()
    for scheme_port in "http $port" "https $tls"; do
        set -- $scheme_port
        for file in "$small $n" "$big $((n / 5))"; do
            set -- "$1" "$2" $file
            if [[ $v == std && $1 == https ]]; then
                row+=("-")
                continue
            fi
            r=$("$bin" "$1://127.0.0.1:$2/buildid/$3/debuginfo" "$work/out" "$4" 2>&1 || true)
            row+=("$(echo "$r" | awk '/median_ms/ {printf "%s (%s)", $4, $6; next} {printf "error: %s", $0}')")
        done
    done
    printf '%-10s %22s %22s %22s %22s\n' "$v" "${row[0]}" "${row[2]}" "${row[1]}" "${row[3]}"
done
