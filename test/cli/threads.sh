# A program that is waiting runs no thread but its own: OpenBLAS's pool,
# which it starts when it is loaded and whose threads spin for a tenth of
# a second before they sleep, is stopped as libmk loads (src/core/blas.c).
# Before that, every mk program burnt a core for its first 0.1 s.
. "$MK_TOP/test/cli/lib.inc"
# on one CPU OpenBLAS starts no pool: nothing to see
[ "$(nproc)" -gt 1 ] || exit 77
mkfifo in
for p in mk-cat mk-pack mk-merge; do
	case $p in
	mk-pack) "$MK_BIN/$p" --force out < in 2> /dev/null & ;;
	*) "$MK_BIN/$p" < in > /dev/null 2>&1 & ;;
	esac
	pid=$!
	# the shell opens the FIFO for the program's stdin and blocks there
	# until a writer comes; give it a writer that writes nothing yet
	exec 3> in
	# the program is now running main() and waits on its stdin
	n=0
	while [ "$(readlink "/proc/$pid/exe" 2>/dev/null)" != "$MK_BIN/$p" ] && [ $n -lt 100 ]; do
		sleep 0.05
		n=$((n + 1))
	done
	sleep 0.2
	tasks=$(ls "/proc/$pid/task" | wc -l)
	exec 3>&-
	wait $pid || true
	[ "$tasks" -eq 1 ] || fail "$p waiting on its input runs $tasks threads, expected 1"
done
