#!/bin/sh
# run-tests.sh - mk's test runner: every test of each build, in parallel.
#
#   make check                both builds (build/, and build-san/ under
#                             ASan+UBSan) made in parallel, then every
#                             cmocka unit test, fuzz corpus replay and CLI
#                             test (test/cli/*.sh) of each, JOBS at a time
#                             (default: nproc); the fault sweeps (failalloc,
#                             faultio, ...) try a sample of their points
#   make check-full           the same, every point of every sweep
#                             (MK_TEST_FULL=1)
#   make check JOBS=4         4 tests (or compilers) at a time (under
#                             make -j4 check, that make's 4 job slots)
#   MK_TEST_SEED=N make check repeat a run: the seed that picks the sampled
#                             points is printed first ("check: seed N");
#                             each run draws a new one unless it is given
#   make check TESTS='cli/failalloc unit/test_pool'
#                             only the tests whose BUILD/KIND/NAME ends so
#                             (shell patterns: TESTS='cli/multi*')
#   sh scripts/run-test.sh build/cli/failalloc
#                             one test alone, its output on the terminal
#                             (build-san/cli/hub, build/unit/test_pool,
#                             build/fuzz/fuzz_config; MK_TEST_SEED and
#                             MK_TEST_FULL as above; after make all-tests,
#                             and make SAN=address,undefined all-tests)
#
# Usage: run-tests.sh [-j N] [-m] [-t 'PATTERN...'] BUILD...
#   -m  make each BUILD first (`make all-tests`, SAN=address,undefined for
#       a BUILD named *san*), the BUILDs in parallel
# Each test's output is in build/test-logs/BUILD_KIND_NAME.log
# (MK_TEST_LOGS), its line shows its seconds, the slowest ten are listed at
# the end, then, alone on the last line, "check: N passed, N failed, N
# skipped"; the status is 1 on any failure.  A test exiting 77 is skipped.
# The graph is scripts/tests.mk; the tests start slowest first, by the
# times of the last run (build/test-logs/times, else scripts/test-times);
# those that time their own threads' CPU run alone at the end (alone=).
# A test that races a process waits for states (a file, a byte count, a
# process's wait channel), never for a time: here it shares the CPUs.
set -u
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"
jobs=$(nproc 2>/dev/null || echo 2)
domake=0 pats=""
while [ $# -gt 0 ]; do
	case $1 in
	-j) jobs=$2; shift 2 ;;
	-j*) jobs=${1#-j}; shift ;;
	-m) domake=1; shift ;;
	-t) pats=$2; shift 2 ;;
	--) shift; break ;;
	-*) echo "usage: run-tests.sh [-j N] [-m] [-t 'PATTERN...'] BUILD..." >&2; exit 2 ;;
	*) break ;;
	esac
done
[ $# -gt 0 ] || set -- build
logdir=${MK_TEST_LOGS:-$top/build/test-logs}
mkdir -p "$logdir"
[ -n "${MK_TEST_SEED:-}" ] || MK_TEST_SEED=$(od -An -N4 -tu4 /dev/urandom | tr -d ' ')
export MK_TEST_SEED
if [ "${MK_TEST_FULL:-0}" = 1 ]; then
	echo "check: seed $MK_TEST_SEED; every point of every fault sweep (MK_TEST_FULL=1)"
else
	echo "check: seed $MK_TEST_SEED (MK_TEST_SEED=$MK_TEST_SEED make check repeats this run's samples)"
fi

# The tests: BUILD/KIND/NAME, from the sources (a build not made yet has
# no binaries to list).
all=""
for b in "$@"; do
	for s in test/cli/*.sh; do n=${s##*/}; all="$all $b/cli/${n%.sh}"; done
	for s in test/fuzz/fuzz_*.c; do n=${s##*/}; all="$all $b/fuzz/${n%.c}"; done
	for s in test/unit/test_*.c; do n=${s##*/}; all="$all $b/unit/${n%.c}"; done
	case $b in *san*) ;; *) all="$all $b/unit/test_pool-tsan" ;; esac
done
tests=""
for t in $all; do
	if [ -n "$pats" ]; then
		keep=0
		for p in $pats; do
			case $t in *$p) keep=1 ;; esac
		done
		[ $keep = 1 ] || continue
	fi
	tests="$tests $t"
done
[ -n "$tests" ] || { echo "run-tests.sh: no test matches '$pats'" >&2; exit 2; }
# Tests that measure the CPU time their threads take (a busy machine
# moves them): run last, one at a time, with no other test beside them.
alone='*/unit/test_pool *unit/test_pool-tsan'
# slowest first: by the last run's seconds, else by scripts/test-times
# (a run's here, for a first run: cp build/test-logs/times to refresh
# it), else by kind (a CLI test under the sanitizers, a plain one, the rest)
printf '%s\n' $tests | awk -v times="$logdir/times" -v dflt="$top/scripts/test-times" '
	BEGIN { while ((getline l < dflt) > 0) { split(l, f, " "); t[f[2]] = f[1] }
		while ((getline l < times) > 0) { split(l, f, " "); t[f[2]] = f[1] } }
	{ s = ($0 in t) ? t[$0] : ($0 ~ /san[^\/]*\/cli\// ? 1e6 : $0 ~ /\/cli\// ? 1e5 : 1e4)
	  printf "%s %d %s\n", s, NR, $0 }' | sort -k1,1gr -k2,2n | cut -d' ' -f3 > "$logdir/order"
: > "$logdir/list"
: > "$logdir/alone"
while read -r t; do
	l=list
	for p in $alone; do
		case $t in $p) l=alone ;; esac
	done
	echo "$t" >> "$logdir/$l"
done < "$logdir/order"
for t in $tests; do rm -f "$logdir/$(echo "$t" | tr / _).res"; done

# -jN, unless this runs under a make -jM (make -j4 check), whose job
# slots it then shares
case " ${MAKEFLAGS:-} " in
*jobserver*) jflag="" jobs="make's" ;;
*) jflag=-j$jobs ;;
esac
# (the builds first, then the tests: with the builds' sub-makes holding
# job slots, make starts the tests it finds ready in no useful order)
t0=$(date +%s)
mrc=0
if [ $domake = 1 ]; then
	${MAKE:-make} --no-print-directory -k $jflag -f scripts/tests.mk \
		CHECK_LIST="$logdir/order" CHECK_LOGS="$logdir" CHECK_MAKE=1 builds || mrc=$?
fi
tb=$(date +%s)
if [ $mrc = 0 ]; then
	[ ! -s "$logdir/list" ] || ${MAKE:-make} --no-print-directory -k $jflag -f scripts/tests.mk \
		CHECK_LIST="$logdir/list" CHECK_LOGS="$logdir" CHECK_MAKE=0 || mrc=$?
	[ ! -s "$logdir/alone" ] || ${MAKE:-make} --no-print-directory -k -f scripts/tests.mk \
		CHECK_LIST="$logdir/alone" CHECK_LOGS="$logdir" CHECK_MAKE=0 CHECK_SERIAL=1 || mrc=$?
fi
t1=$(date +%s)

pass=0 fail=0 skip=0 failed="" notrun=""
: > "$logdir/times.new"
: > "$logdir/ran"
for t in $tests; do
	res=$logdir/$(echo "$t" | tr / _).res
	if [ ! -f "$res" ]; then
		fail=$((fail + 1)) notrun="$notrun $t"
		continue
	fi
	read -r r s rc cpu < "$res"
	echo "$s $t" >> "$logdir/times.new"
	echo "$s ${cpu:-?} $t" >> "$logdir/ran"
	case $r in
	PASS) pass=$((pass + 1)) ;;
	SKIP) skip=$((skip + 1)) ;;
	*) fail=$((fail + 1)) failed="$failed $t" ;;
	esac
done
# keep the times of the tests not run this time, for the next ordering
[ -f "$logdir/times" ] && awk 'NR == FNR { seen[$2] = 1; next } !($2 in seen)' \
	"$logdir/times.new" "$logdir/times" >> "$logdir/times.new"
mv "$logdir/times.new" "$logdir/times"
[ -s "$logdir/ran" ] && echo "slowest (wall, cpu):"
sort -k1,1gr "$logdir/ran" | head -n 10 | awk '{ printf "  %7.1fs %7.1fs  %s\n", $1, $2, $3 }'
[ $domake = 0 ] || echo "check: $((tb - t0)) s to build"
echo "check: $((t1 - tb)) s wall of tests, $(awk '{ w += $1; c += $2 } END { printf "%.0f s of tests, %.0f s of their cpu", w, c }' \
	"$logdir/ran"); $jobs jobs; seed $MK_TEST_SEED"
[ $mrc = 0 ] || echo "check: make failed (exit $mrc): a build failed, no test was run"
[ -z "$notrun" ] || echo "not run:$notrun"
[ -z "$failed" ] || echo "failed:$failed"
echo "check: $pass passed, $fail failed, $skip skipped"
[ "$fail" -eq 0 ] && [ $mrc = 0 ]
