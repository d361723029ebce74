#!/bin/sh
# bench-splice.sh - what splice(2) saves mk-fetch and mk-pack: the same
# pipelines with and without --no-splice, interleaved.
#
#   sh scripts/bench-splice.sh            (after `make`)
#
# Environment: BUILD (build), RUNS (7), MODELS (3), BENCH_DIR
# (${TMPDIR:-/tmp}), IOS ("uring mmap"), CASES (all below), SIDE (fetch:
# mk-fetch with and without splice, mk-pack always --no-splice; pack:
# mk-pack with and without, mk-fetch always splicing; both: all on
# against all off).
#
# Generates MODELS embedding-heavy BF16 models (hidden 1024, inter 2048,
# 2 layers, vocab 65536: about 300 MB each), keeps them in the page cache,
# and times, RUNS rounds, each round every case once with and once without
# splice (the order alternating), one model after another:
#   copy   mk-fetch -m M | dd of=/dev/null       (copy mode, DATA frames)
#   plan   mk-plan linear.yml | mk-fetch | dd    (plan mode, INPT frames)
#   pack   mk-fetch -m M | mk-pack OUT           (re-shard: raw tensor bytes)
#   pipe   mk-plan linear.yml | mk-fetch | mk-merge | mk-pack OUT
#   pass   mk-plan passthrough.yml | mk-fetch | mk-merge | mk-pack OUT
# where dd reads 1 MiB at a time (read(2) copies, as mk-merge does).
# Prints per case and reader the median wall seconds of each, the median
# of the per-run ratios splice/copy (below 1: splice is faster), and the
# same for the CPU time (user + system) of all the pipeline's processes,
# which a machine shared with other work disturbs less.
set -eu

BUILD=${BUILD:-build}
RUNS=${RUNS:-7}
MODELS=${MODELS:-3}
IOS=${IOS:-uring mmap}
BENCH_DIR=${BENCH_DIR:-${TMPDIR:-/tmp}}
B=$BUILD/bin

for p in mk-plan mk-fetch mk-merge mk-pack; do
	[ -x "$B/$p" ] || { echo "bench-splice: $B/$p missing; run make" >&2; exit 1; }
done
dir=$(mktemp -d "$BENCH_DIR/mk-bench-splice.XXXXXX")
trap 'rm -rf "$dir"' EXIT INT TERM
i=1
while [ "$i" -le "$MODELS" ]; do
	"$BUILD/tools/mk-gen-model" --dtype BF16 --hidden 1024 --inter 2048 --layers 2 --vocab 65536 \
		--seed "$i" "$dir/m$i" > /dev/null
	i=$((i + 1))
done
{
	echo "merge_method: linear"
	echo "models:"
	i=1
	while [ "$i" -le "$MODELS" ]; do
		echo "  - model: $dir/m$i"
		echo "    parameters: {weight: 1.0}"
		i=$((i + 1))
	done
	echo "dtype: bfloat16"
} > "$dir/linear.yml"
printf 'merge_method: passthrough\nslices:\n  - sources:\n      - model: %s/m1\n        layer_range: [0, 2]\ndtype: bfloat16\n' \
	"$dir" > "$dir/pass.yml"
cat "$dir"/m*/*.safetensors > /dev/null

# one CASE IO FETCHOPT PACKOPT: prints "wall_s cpu_s" (cpu: user + system
# of every process of the pipeline)
one() {
	rm -rf "$dir/out"
	case $1 in
	copy) cmd='"$B/mk-fetch" --io "$IO" $FO -m "$dir/m1" | dd of=/dev/null bs=1M status=none' ;;
	plan) cmd='"$B/mk-plan" "$dir/linear.yml" | "$B/mk-fetch" --io "$IO" $FO | dd of=/dev/null bs=1M status=none' ;;
	pack) cmd='"$B/mk-fetch" --io "$IO" $FO -m "$dir/m1" | "$B/mk-pack" $PO "$dir/out"' ;;
	pipe) cmd='"$B/mk-plan" "$dir/linear.yml" | "$B/mk-fetch" --io "$IO" $FO | "$B/mk-merge" | "$B/mk-pack" $PO "$dir/out"' ;;
	pass) cmd='"$B/mk-plan" "$dir/pass.yml" | "$B/mk-fetch" --io "$IO" $FO | "$B/mk-merge" | "$B/mk-pack" $PO "$dir/out"' ;;
	esac
	B=$B dir=$dir IO=$2 FO=$3 PO=$4 /usr/bin/time -f '%e %U %S' -o "$dir/time" sh -c "$cmd"
	awk '{ printf "%.3f %.3f\n", $1, $2 + $3 }' "$dir/time"
}
median() { sort -n | awk '{ v[NR] = $1 } END { if (NR) print v[int((NR + 1) / 2)] }'; }

CASES=${CASES:-copy plan pack pipe pass}
SIDE=${SIDE:-both}
case $SIDE in
fetch) FS="" FC=--no-splice PS=--no-splice PC=--no-splice ;;
pack) FS="" FC="" PS="" PC=--no-splice ;;
both) FS="" FC=--no-splice PS="" PC=--no-splice ;;
*) echo "bench-splice: SIDE is fetch, pack or both, not '$SIDE'" >&2; exit 2 ;;
esac
echo "bench-splice: SIDE=$SIDE, $RUNS runs, $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg)" >&2
: > "$dir/res"
r=1
while [ "$r" -le "$RUNS" ]; do
	for c in $CASES; do
		for io in $IOS; do
			if [ $((r % 2)) -eq 1 ]; then
				s=$(one "$c" "$io" "$FS" "$PS"); n=$(one "$c" "$io" "$FC" "$PC")
			else
				n=$(one "$c" "$io" "$FC" "$PC"); s=$(one "$c" "$io" "$FS" "$PS")
			fi
			echo "$c $io $s $n" >> "$dir/res"
		done
	done
	r=$((r + 1))
done
# res: case io splice_wall splice_cpu copy_wall copy_cpu
printf '%-5s %-6s %8s %8s %6s %8s %8s %6s\n' case reader splice_s copy_s ratio splc_cpu copy_cpu ratio
for c in $CASES; do
	for io in $IOS; do
		col() { awk -v c="$c" -v io="$io" "\$1 == c && \$2 == io { $1 }" "$dir/res" | median; }
		printf '%-5s %-6s %8s %8s %6s %8s %8s %6s\n' "$c" "$io" "$(col 'print $3')" "$(col 'print $5')" \
			"$(col 'printf "%.3f\n", $3 / $5')" "$(col 'print $4')" "$(col 'print $6')" \
			"$(col 'printf "%.3f\n", $4 / ($6 > 0 ? $6 : 0.001)')"
	done
done
