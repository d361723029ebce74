#!/bin/sh
# bench-io.sh - re-shard a ~2 GB model through the pipe and compare with
# the I/O floor.  A benchmark, not a test: it reports, never asserts.
#
#   sh scripts/bench-io.sh          (after `make`; or `make bench`)
#
# Environment: BUILD (build), RUNS (5), LAYERS (18, about 2 GB in BF16),
# BENCH_DIR (${TMPDIR:-/tmp}), IOS ("uring mmap pread"), SETTLE (2: seconds
# of pause before each run), READERS (1: also run
# scripts/bench-io-readers.sh).
#
# Floor and mk runs are interleaved, so the "x floor" of one run of the
# script is the number to read: on a noisy disk the floor alone can move
# by a factor of three within the hour.
#
# For each run, inputs are in the page cache (read once before), and
#   floor: cat the model's shards into a fresh directory, then sync them
#   mk:    mk-fetch --model M | mk-pack OUT   (mk-pack fsyncs everything)
# Prints median wall time, throughput and each stage's peak RSS.
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${BUILD:-$top/build}
RUNS=${RUNS:-5}
LAYERS=${LAYERS:-18}
IOS=${IOS:-"uring mmap pread"}
BENCH_DIR=${BENCH_DIR:-${TMPDIR:-/tmp}}
B=$BUILD/bin T=$BUILD/tools
command -v bc >/dev/null || { echo "bench-io: needs bc (apt-get install bc)" >&2; exit 1; }
for x in $B/mk-fetch $B/mk-pack $T/mk-gen-model $T/mk-rss; do
	[ -x "$x" ] || { echo "bench-io: $x missing; run make" >&2; exit 1; }
done
work=$(mktemp -d "$BENCH_DIR/mk-bench.XXXXXX")
trap 'rm -rf "$work"' EXIT INT TERM
M=$work/model
$T/mk-gen-model --dtype BF16 --hidden 2048 --layers "$LAYERS" --vocab 32000 --shards 2 "$M"
bytes=$(cat "$M"/*.safetensors | wc -c)
now() { date +%s.%N; }
median() { sort -n | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
warm() { cat "$M"/* > /dev/null; }

# Runs interleave floor and mk, so both meet the same disk weather (this
# file system is mounted with discard: a removed output keeps the device
# busy for a while); each starts after the last output is removed, synced
# and a pause.
settle() { rm -rf "$work/out" "$work/floor"; sync; sleep "${SETTLE:-2}"; warm; }
floor_t="" 
for io in $IOS; do eval "t_$io=''; f_$io=''; p_$io=''"; done
for i in $(seq "$RUNS"); do
	settle; mkdir "$work/floor"
	t0=$(now)
	for f in "$M"/*.safetensors; do cat "$f" > "$work/floor/$(basename "$f")"; done
	sync "$work"/floor/*
	t1=$(now)
	floor_t="$floor_t $(echo "$t1 - $t0" | bc)"
	for io in $IOS; do
		settle
		t0=$(now)
		MK_IO=$io $T/mk-rss "$work/f.rss" $B/mk-fetch --model "$M" | $T/mk-rss "$work/p.rss" $B/mk-pack --no-progress "$work/out"
		t1=$(now)
		eval "t_$io=\"\$t_$io $(echo "$t1 - $t0" | bc)\"; f_$io=\"\$f_$io $(cat "$work/f.rss")\"; p_$io=\"\$p_$io $(cat "$work/p.rss")\""
	done
done
floor=$(echo $floor_t | tr ' ' '\n' | median)

echo "machine: $(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo), $(uname -r), $(df -h "$BENCH_DIR" | awk 'NR==2 {print $1}')"
echo "model: $bytes bytes in 2 shards (BF16, $LAYERS layers), inputs in page cache, median of $RUNS interleaved runs"
printf '%-24s %9s %9s %8s %14s %12s\n' "what" "wall s" "MB/s" "x floor" "fetch RSS MiB" "pack RSS MiB"
printf '%-24s %9.3f %9.0f %8s %14s %12s\n' "cat + sync (floor)" "$floor" "$(echo "$bytes / $floor / 1000000" | bc -l)" "1.00" "-" "-"
for io in $IOS; do
	eval "ts=\$t_$io fr=\$f_$io pr=\$p_$io"
	t=$(echo $ts | tr ' ' '\n' | median)
	f=$(echo $fr | tr ' ' '\n' | sort -n | tail -1) p=$(echo $pr | tr ' ' '\n' | sort -n | tail -1)
	printf '%-24s %9.3f %9.0f %8.2f %14.1f %12.1f\n' "mk-fetch | mk-pack ($io)" "$t" "$(echo "$bytes / $t / 1000000" | bc -l)" \
		"$(echo "$t / $floor" | bc -l)" "$(echo "$f / 1024" | bc -l)" "$(echo "$p / 1024" | bc -l)"
done
echo "floor runs (s):$floor_t"
for io in $IOS; do eval "echo \"$io runs (s):\$t_$io\""; done
echo "(RSS: the largest of the runs)"
if [ "${READERS:-1}" = 1 ] && [ -f "$top/scripts/bench-io-readers.sh" ]; then
	echo
	BUILD=$BUILD sh "$top/scripts/bench-io-readers.sh"
fi
