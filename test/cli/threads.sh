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
	# wait until main() reads its stdin (the kernel's wait channel: a
	# pipe read), so that the loader's and the libraries' constructors
	# have all run; right after the exec it is still loading, one thread
	# whatever OpenBLAS is about to do
	n=0 w=
	while [ $n -lt 200 ]; do
		w=$(cat "/proc/$pid/wchan" 2>/dev/null || true)
		case $w in *pipe_read*) break ;; esac
		sleep 0.025
		n=$((n + 1))
	done
	case $w in
	*pipe_read*) ;;
	0 | "") exec 3>&-; wait $pid || true; exit 77 ;;   # no wait channels here: cannot tell
	*) fail "$p never waited on its input (wait channel: $w)" ;;
	esac
	tasks=$(ls "/proc/$pid/task" | wc -l)
	exec 3>&-
	wait $pid || true
	[ "$tasks" -eq 1 ] || fail "$p waiting on its input runs $tasks threads, expected 1"
done
