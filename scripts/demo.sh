#!/bin/sh
# demo.sh BUILD - the bundled demo (make demo): re-shard a bundled tiny
# model through the pipe, show the stream, verify, and list what was written.
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
B=${1:-build}
case $B in /*) ;; *) B=$top/$B ;; esac
PATH=$B/bin:$PATH
out=${DEMO_OUT:-$(mktemp -d "${TMPDIR:-/tmp}/mk-demo.XXXXXX")}
M=$top/testdata/models/tiny-a
echo "\$ mk-fetch --model testdata/models/tiny-a | mk-cat | head -8"
mk-fetch --model "$M" | mk-cat | head -8
echo
echo "\$ mk-fetch --model testdata/models/tiny-a | mk-pack --out-shard-size 200K $out/tiny-a"
mk-fetch --model "$M" | mk-pack --out-shard-size 200K "$out/tiny-a"
echo
echo "\$ ls -l $out/tiny-a"
ls -l "$out/tiny-a"
echo
echo "\$ mk-fetch --model $out/tiny-a | mk-cat --verify"
mk-fetch --model "$out/tiny-a" | mk-cat --verify
echo
echo "demo: wrote $out/tiny-a (2 shards + index, config and tokenizer files)"
