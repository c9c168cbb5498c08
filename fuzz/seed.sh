#!/bin/sh
# Builds the fuzz corpora from the checked-in fixtures (the corpora are not committed).
# Inputs of decode/records/decompress start with 8 bytes that pick the chunking; filter's are
# EXPR\0STREAM; read_file's are whole file-mode perf.data files.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
fx="$here/../tests/fixtures"
for t in decode records decompress filter buildid_elf read_file; do mkdir -p "$here/corpus/$t"; done
seeds="0000000000000000 0102030405060708 ffffffffffffff7f 1111111111111111"
for f in "$fx"/*.pipe.data; do
  n=$(basename "$f" .pipe.data)
  for s in $seeds; do
    for t in decode records decompress; do
      { printf "$(echo $s | sed 's/../\\x&/g')"; cat "$f"; } > "$here/corpus/$t/$n-$s"
    done
  done
done
# Small prefixes make the fuzzer's job on framing cheaper.
for f in "$fx"/callgraph.pipe.data "$fx"/compressed.pipe.data "$fx"/tracepoint.pipe.data "$fx"/bigendian.pipe.data; do
  n=$(basename "$f" .pipe.data)
  for t in decode records decompress; do
    { printf '\0\0\0\0\0\0\0\0'; head -c 4096 "$f"; } > "$here/corpus/$t/$n-head"
  done
done
i=0
while IFS= read -r e; do
  i=$((i + 1))
  printf '%s' "$e" > "$here/corpus/filter/expr-$i"
  { printf '%s\0' "$e"; head -c 8192 "$fx/callgraph.pipe.data"; } > "$here/corpus/filter/expr-stream-$i"
done <<'EXPRS'
pid == 1234
tid != 0 && cpu < 2
comm == "seq" || comm == "sh*"
time > 10ms && time < 1.5s
dso == "/usr/bin/*"
!(event == "cpu-clock") && period >= 20000
ip >= 0xffffffff80000000
cpumode == kernel
(pid == 1 || pid == 2) && !(tid == 3)
addr == 0 || id > 5
EXPRS
# ELF inputs: a few binaries from this machine, small ones first.
for b in /bin/true /bin/ls /usr/lib/x86_64-linux-gnu/libc.so.6; do
  [ -r "$b" ] && cp "$b" "$here/corpus/buildid_elf/$(basename "$b")"
done
# Tiny ELFs (under 1 KiB) and a bare note section, when there is a C compiler.
if command -v cc >/dev/null; then
  tmp=$(mktemp -d)
  printf 'void _start(void){for(;;);}\n' > "$tmp/tiny.c"
  for m in "" -m32; do
    # shellcheck disable=SC2086 # an empty $m is no word
    cc $m -Os -nostdlib -static -Wl,--build-id -Wl,-z,noseparate-code -o "$tmp/tiny$m" "$tmp/tiny.c" 2>/dev/null &&
      strip "$tmp/tiny$m" && cp "$tmp/tiny$m" "$here/corpus/buildid_elf/tiny$m"
  done
  objcopy -O binary --only-section=.note.gnu.build-id "$tmp/tiny" "$here/corpus/buildid_elf/note-tiny" 2>/dev/null
  rm -rf "$tmp"
fi
# Raw notes sections of the running kernel's modules.
for m in /sys/module/*/notes/.note.gnu.build-id; do
  [ -r "$m" ] && cp "$m" "$here/corpus/buildid_elf/note-$(echo "$m" | cut -d/ -f4)" 2>/dev/null
done
# File-mode perf.data: the fixtures, and small recordings of `true` when perf is here (a few KiB
# each, so the fuzzer mutates them quickly).
cp "$fx"/*.file.data "$here/corpus/read_file/"
if command -v perf >/dev/null; then
  i=0
  for opts in "" "-g" "--buildid-mmap" "-z" "-e cpu-clock,task-clock" "--switch-events"; do
    i=$((i + 1))
    # shellcheck disable=SC2086 # opts are words
    perf record -q -e cpu-clock $opts -o "$here/corpus/read_file/true-$i.data" true >/dev/null 2>&1 || true
  done
fi
true
