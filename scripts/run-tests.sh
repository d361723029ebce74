#!/bin/sh
# run-tests.sh BUILD_DIR... - run every test against each build directory:
# the cmocka unit binaries, the CLI tests (test/cli/*.sh) and the fuzz
# corpus replays.  A test exiting 77 is skipped.  Prints one line per test
# and, last, "check: N passed, N failed, N skipped".
set -u
top=$(cd "$(dirname "$0")/.." && pwd)
pass=0 fail=0 skip=0
failed=""
logdir=${MK_TEST_LOGS:-$top/build/test-logs}
mkdir -p "$logdir"

record() { # name rc
	case $2 in
	0) pass=$((pass + 1)); echo "PASS $1" ;;
	77) skip=$((skip + 1)); echo "SKIP $1" ;;
	*) fail=$((fail + 1)); failed="$failed $1"; echo "FAIL $1 (exit $2; log: $3)" ;;
	esac
}

for b in "$@"; do
	build=$top/$b
	tag=$(basename "$b")
	for t in "$build"/test/test_*; do
		[ -x "$t" ] || continue
		n="$tag/unit/$(basename "$t")"
		log="$logdir/$(echo "$n" | tr / _).log"
		"$t" >"$log" 2>&1
		record "$n" $? "$log"
	done
	for t in "$build"/fuzz/*-replay; do
		[ -x "$t" ] || continue
		h=$(basename "$t" -replay)
		n="$tag/fuzz/$h"
		log="$logdir/$(echo "$n" | tr / _).log"
		"$t" "$top/test/fuzz/corpus/${h#fuzz_}" >"$log" 2>&1
		record "$n" $? "$log"
	done
	for t in "$top"/test/cli/*.sh; do
		[ -f "$t" ] || continue
		n="$tag/cli/$(basename "$t" .sh)"
		log="$logdir/$(echo "$n" | tr / _).log"
		work=$(mktemp -d "${TMPDIR:-/tmp}/mk-test.XXXXXX")
		(cd "$work" && MK_TOP="$top" MK_BUILD="$build" MK_BIN="$build/bin" MK_TOOLS="$build/tools" \
			MK_SAN=$(case $tag in *san*) echo 1 ;; *) echo 0 ;; esac) \
			sh -eu "$t") >"$log" 2>&1
		rc=$?
		record "$n" $rc "$log"
		[ $rc -ne 0 ] && [ $rc -ne 77 ] && sed 's/^/    | /' "$log" | tail -n 15
		rm -rf "$work"
	done
done
[ -n "$failed" ] && echo "failed:$failed"
echo "check: $pass passed, $fail failed, $skip skipped"
[ "$fail" -eq 0 ]
