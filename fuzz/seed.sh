#!/bin/sh
# Builds the fuzz corpora from the checked-in fixtures (the corpora are not committed).
# Inputs of decode/records/decompress start with 8 bytes that pick the chunking; filter's are
# EXPR\0STREAM.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
fx="$here/../tests/fixtures"
for t in decode records decompress filter buildid_elf; do mkdir -p "$here/corpus/$t"; done
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
# Raw notes sections of the running kernel's modules.
for m in /sys/module/*/notes/.note.gnu.build-id; do
  [ -r "$m" ] && cp "$m" "$here/corpus/buildid_elf/note-$(echo "$m" | cut -d/ -f4)" 2>/dev/null
done
true
