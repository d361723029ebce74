#!/bin/sh
# demo.sh BUILD - the bundled demo (make demo): merge the two bundled tiny
# models with a bundled config through mk-yaml, show the plan and the
# stream, and list what was written.
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
B=${1:-build}
case $B in /*) ;; *) B=$top/$B ;; esac
PATH=$B/bin:$PATH
out=${DEMO_OUT:-$(mktemp -d "${TMPDIR:-/tmp}/mk-demo.XXXXXX")}
cd "$top"
say() { printf '\n$ %s\n' "$*"; }

say "cat testdata/configs/gradient-slerp.yml"
cat testdata/configs/gradient-slerp.yml
say "mk-plan --explain testdata/configs/gradient-slerp.yml | head -12"
mk-plan --explain testdata/configs/gradient-slerp.yml | head -12
say "mk-yaml testdata/configs/gradient-slerp.yml $out/merged"
mk-yaml testdata/configs/gradient-slerp.yml "$out/merged"
say "ls -l $out/merged"
ls -l "$out/merged"
say "sed -n 1,20p $out/merged/README.md"
sed -n 1,20p "$out/merged/README.md"
say "mk-fetch --model testdata/models/tiny-a | mk-pack --out-shard-size 200K $out/resharded"
mk-fetch --model testdata/models/tiny-a | mk-pack --out-shard-size 200K "$out/resharded"
say "mk-fetch --model $out/resharded | mk-cat --verify"
mk-fetch --model "$out/resharded" | mk-cat --verify
echo
echo "demo: wrote $out/merged (a gradient slerp of tiny-a and tiny-b) and $out/resharded (tiny-a in 2 shards)"
