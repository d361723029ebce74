#!/bin/sh
# bench-io-readers.sh - compare the reader backends (uring, mmap, pread).
#
#   sh scripts/bench-io-readers.sh            (after `make`)
#
# Environment: BUILD (build), SIZE_MB (2048), CHUNK (4M), QDEPTH (8),
# RUNS (3), BENCH_DIR (${TMPDIR:-/tmp}).
#
# Writes one SIZE_MB file of random bytes and reads it front to back with
# build/tools/mk-readbench through each backend, RUNS times, first with the
# file in the page cache ("warm"), then, when /proc/sys/vm/drop_caches can
# be written (root), after dropping the caches before every run ("cold").
# Prints the median MB/s and peak RSS of each.
set -eu

BUILD=${BUILD:-build}
SIZE_MB=${SIZE_MB:-2048}
CHUNK=${CHUNK:-4M}
QDEPTH=${QDEPTH:-8}
RUNS=${RUNS:-3}
BENCH_DIR=${BENCH_DIR:-${TMPDIR:-/tmp}}
BIN=$BUILD/tools/mk-readbench

if [ ! -x "$BIN" ]; then
	echo "bench-io-readers: $BIN missing; run: make $BIN" >&2
	exit 1
fi

file=$(mktemp "$BENCH_DIR/mk-bench-io.XXXXXX")
trap 'rm -f "$file" "$file.out"' EXIT INT TERM
echo "bench-io-readers: writing $SIZE_MB MB to $file" >&2
dd if=/dev/urandom of="$file" bs=1M count="$SIZE_MB" status=none
sync

can_drop=0
if (sync && echo 1 > /proc/sys/vm/drop_caches) 2>/dev/null; then
	can_drop=1
else
	echo "bench-io-readers: cannot write /proc/sys/vm/drop_caches; no cold runs" >&2
fi

# median of the numbers on stdin
median() {
	sort -n | awk '{ v[NR] = $1 } END { if (NR) print v[int((NR + 1) / 2)] }'
}

# run KIND MODE: prints "MBps rss_kb backend" (medians)
run() {
	kind=$1 mode=$2
	: > "$file.out"
	i=0
	while [ "$i" -lt "$RUNS" ]; do
		if [ "$mode" = cold ]; then
			sync
			echo 1 > /proc/sys/vm/drop_caches
		else
			cat "$file" > /dev/null
		fi
		"$BIN" -k "$kind" -c "$CHUNK" -q "$QDEPTH" "$file" >> "$file.out"
		i=$((i + 1))
	done
	mbps=$(sed 's/.*\tMBps=\([^\t]*\).*/\1/' "$file.out" | median)
	rss=$(sed 's/.*\tpeak_rss_kb=\([^\t]*\).*/\1/' "$file.out" | median)
	backend=$(sed -n '1s/^backend=\([^\t]*\).*/\1/p' "$file.out")
	echo "$mbps $rss $backend"
}

printf '%-28s %6s %6s %10s %9s %10s %9s\n' backend qdepth chunk \
	"warm MB/s" "warm RSS" "cold MB/s" "cold RSS"
for kind in uring mmap pread; do
	set -- $(run "$kind" warm)
	wm=$1 wr=$2
	shift 2
	name="$*"
	cm=- cr=-
	if [ "$can_drop" = 1 ]; then
		set -- $(run "$kind" cold)
		cm=$1 cr="$(($2 / 1024)) MB"
	fi
	printf '%-28s %6s %6s %10s %9s %10s %9s\n' "$name" "$QDEPTH" "$CHUNK" \
		"$wm" "$(($wr / 1024)) MB" "$cm" "$cr"
done
echo "($SIZE_MB MB file, median of $RUNS runs; RSS is the process's peak)"
