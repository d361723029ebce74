# Allocation failure, SQLite's way: over a small merge, make each of mk's
# own allocations fail in turn (test/preload/failalloc.c), in every stage.
# Each run must end cleanly: exit 1 with an error message (mk-pack leaving
# neither OUT nor OUT.mk-partial), or exit 0 with the same output as a
# run where nothing failed.  Never a crash, an abort or a usage error.
# Not in the sanitized build (ASan owns malloc there).
. "$MK_TOP/test/cli/lib.inc"
[ "$MK_SAN" = 1 ] && exit 77
P=$MK_BUILD/preload/failalloc.so
[ -f "$P" ] || fail "no $P"
(cd "$MK_TOP" && mk-plan testdata/configs/ties.yml) > plan.mks
(cd "$MK_TOP" && mk-fetch) < plan.mks > in.mks
mk-merge < in.mks > t.mks
mk-pack ref < t.mks
count() { MK_FAIL_ALLOC_COUNT=1 LD_PRELOAD=$P "$@" 2>&1 >/dev/null | sed -n 's/^failalloc: \([0-9]*\) allocations$/\1/p'; }
total=0 fails=0
# sweep NAME INPUT EXPECTED CMD...: N = 1..count (every 4th past 400)
sweep() {
	name=$1 input=$2 want=$3
	shift 3
	c=$(count "$@" < "$input")
	[ -n "$c" ] && [ "$c" -gt 10 ] || fail "$name: no allocation counted ($c)"
	n=1
	while [ $n -le "$c" ]; do
		rc=0
		MK_FAIL_ALLOC=$n LD_PRELOAD=$P "$@" < "$input" > got 2> err || rc=$?
		case $rc in
		0) cmp -s got "$want" || fail "$name: allocation $n failed, exit 0, but the output differs" ;;
		1) grep -q "error: " err || { cat err; fail "$name: allocation $n: exit 1 without a message"; }
		   fails=$((fails + 1)) ;;
		*) cat err; fail "$name: allocation $n failed: exit $rc" ;;
		esac
		total=$((total + 1))
		if [ $n -lt 400 ]; then n=$((n + 1)); else n=$((n + 4)); fi
	done
	echo "$name: $c allocations, swept"
}
(cd "$MK_TOP" && sweep mk-plan /dev/null "$OLDPWD/plan.mks" mk-plan testdata/configs/ties.yml)
(cd "$MK_TOP" && sweep mk-fetch "$OLDPWD/plan.mks" "$OLDPWD/in.mks" mk-fetch)
sweep mk-merge in.mks t.mks mk-merge -j2
# mk-pack writes a directory
c=$(rm -rf p; count mk-pack p < t.mks)
n=1
while [ $n -le "$c" ]; do
	rm -rf p p.mk-partial
	rc=0
	MK_FAIL_ALLOC=$n LD_PRELOAD=$P mk-pack p < t.mks 2> err || rc=$?
	case $rc in
	0) diff -r p ref > /dev/null || fail "mk-pack: allocation $n failed, exit 0, but OUT differs" ;;
	1) grep -q "error: " err || { cat err; fail "mk-pack: allocation $n: exit 1 without a message"; }
	   no_out p ;;
	*) cat err; fail "mk-pack: allocation $n failed: exit $rc" ;;
	esac
	n=$((n + 1))
done
echo "mk-pack: $c allocations, swept"
