#!/bin/sh
# bench-quant-memory.sh [WORKDIR] - peak RSS of each stage of a linear
# merge of two block-FP8 models shaped like DeepSeek-V3's layers (hidden
# 7168, an expert's intermediate 2048, 128x128 blocks; q/k/v/o as dense
# 7168x7168 matrices, llama-shaped), under --max-memory 2G: mk-plan |
# mk-fetch | mk-merge | mk-pack, each wrapped by mk-rss.  Not in `make
# check` (about 1.5 GB of disk); test/cli/quant.sh has the small check.
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
PATH=$top/build/bin:$top/build/tools:$PATH
w=${1:-$(mktemp -d)}
layers=${LAYERS:-2}
mkdir -p "$w" && cd "$w"
for s in 1 2; do
	[ -d m$s ] || mk-gen-model --dtype BF16 --hidden 7168 --inter 2048 --layers "$layers" --vocab 256 \
		--heads 56 --kv-heads 56 --quantized fp8 --seed $s m$s
done
printf 'merge_method: linear\nmodels:\n  - model: m1\n    parameters: {weight: 0.5}\n  - model: m2\n    parameters: {weight: 0.5}\n' > lin.yml
rm -rf out
t0=$(date +%s)
mk-rss plan.rss mk-plan --max-memory 2G lin.yml | mk-rss fetch.rss mk-fetch --max-memory 2G |
	mk-rss merge.rss mk-merge --max-memory 2G | mk-rss pack.rss mk-pack --max-memory 2G out
t1=$(date +%s)
du -sh m1 out
for st in plan fetch merge pack; do printf '%-6s peak RSS %s KiB\n' $st "$(cat $st.rss)"; done
echo "wall $((t1 - t0)) s"
