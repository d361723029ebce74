#!/bin/sh
# run-test.sh [-l LOGDIR] BUILD/KIND/NAME - run one test of one build:
#   build/unit/test_pool        a cmocka binary (build/test/test_pool)
#   build-san/fuzz/fuzz_config  a fuzz harness over its corpus
#   build/cli/failalloc         a CLI script (test/cli/failalloc.sh), in a
#                               fresh scratch directory
# Alone (no -l) the test's output goes to the terminal and its status is
# the exit status (77: skipped).  With -l (scripts/tests.mk, for
# `make check`) the output goes to LOGDIR/BUILD_KIND_NAME.log, the result
# ("PASS|FAIL|SKIP SECONDS EXIT CPU-SECONDS") to the same name .res, one
# line "PASS   1.2s build/cli/x (cpu 0.9s)" is printed (a failure adds its
# log's tail), and the status is 0 whatever the test did.  (The CPU time,
# user and system, of the test's processes that were waited for: on a
# loaded machine the wall time says more about the load.)
# MK_TEST_SEED picks the points the fault sweeps sample (one is chosen and
# printed when unset); MK_TEST_FULL=1 sweeps every point.
set -u
top=$(cd "$(dirname "$0")/.." && pwd)
logdir=""
if [ "${1:-}" = -l ]; then
	logdir=$2
	shift 2
fi
[ $# = 1 ] || { echo "usage: run-test.sh [-l LOGDIR] BUILD/KIND/NAME" >&2; exit 2; }
id=$1
b=${id%%/*} rest=${id#*/}
kind=${rest%%/*} name=${rest#*/}
build=$top/$b
if [ -z "${MK_TEST_SEED:-}" ]; then
	MK_TEST_SEED=$(od -An -N4 -tu4 /dev/urandom | tr -d ' ')
	echo "seed: MK_TEST_SEED=$MK_TEST_SEED" >&2
fi
export MK_TEST_SEED
san=0
case $b in *san*) san=1 ;; esac

run() {
	case $kind in
	unit) "$build/test/$name" ;;
	fuzz) "$build/fuzz/$name-replay" "$top/test/fuzz/corpus/${name#fuzz_}" ;;
	cli)
		work=$(mktemp -d "${TMPDIR:-/tmp}/mk-test.XXXXXX") || return 1
		(cd "$work" && MK_TOP="$top" MK_BUILD="$build" MK_BIN="$build/bin" MK_TOOLS="$build/tools" \
			MK_SAN=$san exec sh -eu "$top/test/cli/$name.sh")
		rc=$?
		rm -rf "$work"
		return $rc ;;
	*) echo "run-test.sh: no kind '$kind' (unit, fuzz or cli)" >&2; return 2 ;;
	esac
}

if [ -z "$logdir" ]; then
	run
	exit $?
fi
base=$logdir/$(echo "$id" | tr / _)
t0=$(date +%s.%N)
run > "$base.log" 2>&1 < /dev/null
rc=$?
t1=$(date +%s.%N)
s=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }')
# the children's user and system time: times' second line, "0m1.5s 0m0.2s"
# (in this shell: a subshell's times are its own)
times > "$base.cpu"
cpu=$(sed -n 2p "$base.cpu" | awk '{ n = 0; for (i = 1; i <= 2; i++) { split($i, f, "m"); n += f[1] * 60 + f[2] }
	printf "%.1f", n }')
rm -f "$base.cpu"
case $rc in
0) r=PASS ;;
77) r=SKIP ;;
*) r=FAIL ;;
esac
echo "$r $s $rc $cpu" > "$base.res"
line=$(printf '%s %6ss %s (cpu %ss)' $r "$s" "$id" "$cpu")
# (one write, so that the lines of tests ending together do not mix)
if [ $r = FAIL ]; then
	line="$line (exit $rc; log: $base.log)
$(tail -n 15 "$base.log" | sed 's/^/    | /')"
fi
printf '%s\n' "$line"

exit 0
