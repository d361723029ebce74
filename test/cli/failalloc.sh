# Allocation failure, SQLite's way: over a small merge, make each of mk's
# own allocations fail in turn (test/preload/failalloc.c), in every stage.
# Each run must end cleanly: exit 1 with an error message (mk-pack leaving
# neither OUT nor OUT.mk-partial), or exit 0 with the same output as a
# run where nothing failed.  Never a crash, an abort or a usage error.
# In the sanitized build the same shim sits in front of ASan's allocator
# (which then serves the allocations it lets through), so every run is
# also checked for leaks (LeakSanitizer, at exit) and memory errors.
# Which allocations fail: every one under make check-full (MK_TEST_FULL=1),
# a seeded sample of each stage's under make check (sweep_points, in
# lib.inc: the first four, the last and 32 spread between).
. "$MK_TOP/test/cli/lib.inc"
if [ "$MK_SAN" = 1 ]; then
	P=$MK_TOP/build/preload/failalloc.so   # the plain build's (make check builds it first)
	[ -f "$P" ] || exit 77
	export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}verify_asan_link_order=0:detect_leaks=1"
else
	P=$MK_BUILD/preload/failalloc.so
	[ -f "$P" ] || fail "no $P"
fi
# clean ERRFILE NAME N: no sanitizer report in ERRFILE
clean() {
	if grep -q "Sanitizer" "$1"; then
		sed -n '1,30p' "$1"
		fail "$2: allocation $3 failed: a sanitizer report (leak or memory error)"
	fi
}
W=$(pwd)             # mk-plan and mk-fetch run in MK_TOP (the config's paths)
(cd "$MK_TOP" && mk-plan testdata/configs/ties.yml) > plan.mks
(cd "$MK_TOP" && mk-fetch) < plan.mks > in.mks
mk-merge < in.mks > t.mks
mk-pack ref < t.mks
count() { MK_FAIL_ALLOC_COUNT=1 LD_PRELOAD=$P "$@" 2>&1 >/dev/null | sed -n 's/^failalloc: \([0-9]*\) allocations$/\1/p'; }
total=0 fails=0
# sweep NAME INPUT EXPECTED CMD...: N = the sweep's points of 1..count
sweep() {
	name=$1 input=$2 want=$3
	shift 3
	c=$(count "$@" < "$input")
	[ -n "$c" ] && [ "$c" -gt 10 ] || fail "$name: no allocation counted ($c)"
	tried=0
	for n in $(sweep_points "$c" "$name"); do
		rc=0
		MK_FAIL_ALLOC=$n LD_PRELOAD=$P "$@" < "$input" > "$W/got" 2> "$W/err" || rc=$?
		clean "$W/err" "$name" $n
		tried=$((tried + 1))
		case $rc in
		0) cmp -s "$W/got" "$want" || fail "$name: allocation $n failed, exit 0, but the output differs" ;;
		1) grep -q "error: " "$W/err" || { cat "$W/err"; fail "$name: allocation $n: exit 1 without a message"; }
		   fails=$((fails + 1)) ;;
		*) cat "$W/err"; fail "$name: allocation $n failed: exit $rc" ;;
		esac
		total=$((total + 1))
	done
	[ "$tried" -gt 0 ] || fail "$name: no allocation tried"
	echo "$name: $c allocations, $tried of them failed in turn"
}
(cd "$MK_TOP" && sweep mk-plan /dev/null "$OLDPWD/plan.mks" mk-plan testdata/configs/ties.yml)
(cd "$MK_TOP" && sweep mk-fetch "$OLDPWD/plan.mks" "$OLDPWD/in.mks" mk-fetch)
sweep mk-merge in.mks t.mks mk-merge -j2
# the same over a merged vocabulary (a union, tokens: of every kind, aux
# rows, fills)
V=test/conformance/tokenizer-vocab-tokens-f32.yml
(cd "$MK_TOP" && mk-plan $V) > vplan.mks 2>/dev/null
(cd "$MK_TOP" && mk-fetch) < vplan.mks > vin.mks
mk-merge < vin.mks > vt.mks
(cd "$MK_TOP" && sweep mk-plan-vocab /dev/null "$OLDPWD/vplan.mks" mk-plan $V)
(cd "$MK_TOP" && sweep mk-fetch-vocab "$OLDPWD/vplan.mks" "$OLDPWD/vin.mks" mk-fetch)
sweep mk-merge-vocab vin.mks vt.mks mk-merge -j2
# a PyTorch checkpoint read in copy mode (the zip, the pickle machine;
# views, gathered)
if command -v python3 >/dev/null 2>&1; then
	python3 "$MK_TOP/test/tools/mk-gen-torchbin.py" "$MK_TOP/testdata/models/tiny-a" tbin --shards 2 --offset --strided
	printf 'merge_method: passthrough\nmodels:\n  - model: %s/tbin\n' "$W" > tbin.yml
	mk-plan tbin.yml > tbin.plan
	mk-fetch < tbin.plan > tbin.mks
	sweep mk-plan-torchbin /dev/null tbin.plan mk-plan tbin.yml
	sweep mk-fetch-torchbin tbin.plan tbin.mks mk-fetch
	mk-fetch --model tbin > tcopy.mks
	sweep mk-fetch-copy /dev/null tcopy.mks mk-fetch --model tbin
fi
# mk-pack writes a directory
c=$(rm -rf p; count mk-pack p < t.mks)
[ -n "$c" ] && [ "$c" -gt 10 ] || fail "mk-pack: no allocation counted ($c)"
tried=0
for n in $(sweep_points "$c" mk-pack); do
	rm -rf p p.mk-partial
	rc=0
	MK_FAIL_ALLOC=$n LD_PRELOAD=$P mk-pack p < t.mks 2> err || rc=$?
	clean err mk-pack $n
	tried=$((tried + 1))
	case $rc in
	0) diff -r p ref > /dev/null || fail "mk-pack: allocation $n failed, exit 0, but OUT differs" ;;
	1) grep -q "error: " err || { cat err; fail "mk-pack: allocation $n: exit 1 without a message"; }
	   no_out p ;;
	*) cat err; fail "mk-pack: allocation $n failed: exit $rc" ;;
	esac
done
[ "$tried" -gt 0 ] || fail "mk-pack: no allocation tried"
echo "mk-pack: $c allocations, $tried of them failed in turn"
