#!/bin/sh
# bench.sh - merge synthetic llama-shaped models with mk, and with
# mergekit when its venv exists, and compare with the I/O floor.
# A benchmark, not a test: it reports, never asserts.
#
#   sh scripts/bench.sh          (after `make`)
#
# Environment: BUILD (build), LAYERS (8: 3 models of about 1 GB in BF16),
# RUNS (3, median), METHODS ("linear slerp ties dare_ties"),
# MK_CONFORMANCE_VENV (mergekit's venv; ~/.cache/mk/mergekit-0.1.5-venv),
# BENCH_DIR (${TMPDIR:-/tmp}).
#
# Per method: mk's wall time (mk-plan | mk-fetch | mk-merge | mk-pack,
# output fsynced), its throughput over the input bytes, each stage's peak
# RSS, and the I/O floor measured in the same run (the inputs read once
# with cat, the output's size written once and fsynced); inputs in page
# cache.  mergekit-yaml on the same config (output fsynced too), once.
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${BUILD:-$top/build}
LAYERS=${LAYERS:-8}
RUNS=${RUNS:-3}
METHODS=${METHODS:-"linear slerp ties dare_ties"}
venv=${MK_CONFORMANCE_VENV:-$HOME/.cache/mk/mergekit-0.1.5-venv}
BENCH_DIR=${BENCH_DIR:-${TMPDIR:-/tmp}}
B=$BUILD/bin T=$BUILD/tools
command -v bc >/dev/null || { echo "bench: needs bc" >&2; exit 1; }
work=$(mktemp -d "$BENCH_DIR/mk-bench.XXXXXX")
trap 'rm -rf "$work"' EXIT INT TERM
for s in a b c; do
	$T/mk-gen-model --dtype BF16 --hidden 2048 --layers "$LAYERS" --vocab 32000 --shards 2 \
		--seed "$(printf '%d' "'$s")" "$work/$s"
done
in_bytes() { cat "$@" | wc -c; }
now() { date +%s.%N; }
median() { sort -n | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
warm() { cat "$work"/a/* "$work"/b/* "$work"/c/* > /dev/null; }
config() {
	case $1 in
	linear) printf 'merge_method: linear\nmodels:\n  - model: %s/a\n    parameters: {weight: 0.5}\n  - model: %s/b\n    parameters: {weight: 0.3}\n  - model: %s/c\n    parameters: {weight: 0.2}\n' "$work" "$work" "$work" ;;
	slerp) printf 'merge_method: slerp\nbase_model: %s/a\nmodels:\n  - model: %s/a\n  - model: %s/b\nparameters:\n  t: 0.4\n' "$work" "$work" "$work" ;;
	ties|dare_ties) printf 'merge_method: %s\nbase_model: %s/a\nmodels:\n  - model: %s/b\n    parameters: {weight: 0.6, density: 0.5}\n  - model: %s/c\n    parameters: {weight: 0.4, density: 0.5}\n' "$1" "$work" "$work" "$work" ;;
	esac
}
echo "machine: $(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo), $(uname -r)"
printf '%-10s %9s %9s %9s %8s %10s %10s %10s %10s %12s %14s\n' method "in MB" "floor s" "mk s" "x floor" "MB/s" \
	"plan MiB" "fetch MiB" "merge MiB" "pack MiB" "mergekit s/MiB"
for m in $METHODS; do
	config $m > "$work/$m.yml"
	files=$(case $m in linear|ties|dare_ties) echo "$work"/a/*.safetensors "$work"/b/*.safetensors "$work"/c/*.safetensors ;;
		*) echo "$work"/a/*.safetensors "$work"/b/*.safetensors ;; esac)
	inb=$(in_bytes $files)
	ts="" fl="" rp=0 rf=0 rm=0 rk=0
	for i in $(seq "$RUNS"); do
		rm -rf "$work/out" "$work/floor"; sync; warm
		outb=$(cat "$work"/a/*.safetensors | wc -c)
		t0=$(now)
		cat $files > /dev/null
		head -c "$outb" /dev/zero > "$work/floor"; sync "$work/floor"
		t1=$(now)
		fl="$fl $(echo "$t1 - $t0" | bc)"
		rm -f "$work/floor"; sync; warm
		t0=$(now)
		$T/mk-rss "$work/p.rss" $B/mk-plan "$work/$m.yml" | $T/mk-rss "$work/f.rss" $B/mk-fetch |
			$T/mk-rss "$work/m.rss" $B/mk-merge | $T/mk-rss "$work/k.rss" $B/mk-pack --no-progress "$work/out"
		t1=$(now)
		ts="$ts $(echo "$t1 - $t0" | bc)"
		for k in p f m k; do
			v=$(cat "$work/$k.rss")
			eval "cur=\$r$k"
			[ "$v" -gt "$cur" ] && eval "r$k=$v"
		done
	done
	t=$(echo $ts | tr ' ' '\n' | median) floor=$(echo $fl | tr ' ' '\n' | median)
	mkres="-"
	if [ -x "$venv/bin/mergekit-yaml" ]; then
		rm -rf "$work/ref"; sync; warm
		/usr/bin/time -f "%e %M" -o "$work/time.txt" sh -c "'$venv/bin/mergekit-yaml' '$work/$m.yml' '$work/ref' >/dev/null 2>&1 && sync '$work/ref'/*" || true
		mkres=$(awk '{printf "%.1f/%.0f", $1, $2/1024}' "$work/time.txt")
		rm -rf "$work/ref"
	fi
	printf '%-10s %9.0f %9.2f %9.2f %8.2f %10.0f %10.1f %10.1f %10.1f %12.1f %14s\n' $m "$(echo "$inb/1000000" | bc)" "$floor" "$t" \
		"$(echo "$t/$floor" | bc -l)" "$(echo "$inb/$t/1000000" | bc -l)" "$(echo "$rp/1024" | bc -l)" "$(echo "$rf/1024" | bc -l)" \
		"$(echo "$rm/1024" | bc -l)" "$(echo "$rk/1024" | bc -l)" "$mkres"
done
