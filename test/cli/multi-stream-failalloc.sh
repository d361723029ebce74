# mk-multi --no-intermediates under allocation failure: over a chain of
# three merges streamed into each other (s1 -> s2 -> final, on threads of
# one process), make mk's own allocations fail in turn, at every point
# of the run under make check-full (MK_TEST_FULL=1), at a seeded sample
# of them under make check (sweep_points, in lib.inc: the first four,
# the last and 32 spread between; test/preload/failalloc.c).  Each run ends
# cleanly: exit 1 with an error message and no output of the chain (no
# OUT, no DIR/NAME, nothing partial), or exit 0 with the bytes of a run
# where nothing failed; never a crash, a hang or a usage error.  In the
# sanitized build every run is also checked for leaks and memory errors.
. "$MK_TOP/test/cli/lib.inc"
if [ "$MK_SAN" = 1 ]; then
	P=$MK_TOP/build/preload/failalloc.so   # the plain build's, in front of ASan
	[ -f "$P" ] || exit 77
	export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}verify_asan_link_order=0:detect_leaks=1"
else
	P=$MK_BUILD/preload/failalloc.so
	[ -f "$P" ] || fail "no $P"
fi
# the descriptions go to TMPDIR: a private one (one whose removal failed
# for want of memory may be left there)
mkdir tmp
TMPDIR=$(pwd)/tmp
export TMPDIR
gen() { mk-gen-model --dtype F32 --layers 1 --hidden 16 --vocab 16 --seed "$2" "$1" > /dev/null; }
gen a 1
gen b 2
gen c 3
printf 'name: s1\nmerge_method: linear\nmodels:\n  - model: a\n    parameters: {weight: 0.4}\n  - model: b\n    parameters: {weight: 0.6}\n---\n' > r.yml
printf 'name: s2\nmerge_method: slerp\nbase_model: s1\nmodels:\n  - model: s1\n  - model: c\nparameters:\n  t: 0.3\n---\n' >> r.yml
printf 'merge_method: task_arithmetic\nbase_model: a\nmodels:\n  - model: s2\n    parameters: {weight: 0.7}\n  - model: c\n    parameters: {weight: 0.3}\n' >> r.yml
run() { mk-multi --no-intermediates r.yml -I inter --out-path out; }
run 2> err.txt || { cat err.txt; fail "the chain failed with nothing failing"; }
[ -z "$(ls -A inter)" ] || fail "a streamed merge was written"
(cd out && sha256sum -- *) > want.sum
rm -rf out
c=$(MK_FAIL_ALLOC_COUNT=1 LD_PRELOAD=$P mk-multi --no-intermediates r.yml -I inter --out-path out 2>&1 >/dev/null |
	sed -n 's/^failalloc: \([0-9]*\) allocations$/\1/p')
[ -n "$c" ] && [ "$c" -gt 100 ] || fail "no allocations counted ($c)"
rm -rf out
tried=0 fails=0
for n in $(sweep_points "$c" mk-multi); do
	rm -rf out inter
	rc=0
	MK_FAIL_ALLOC=$n LD_PRELOAD=$P timeout 120 mk-multi --no-intermediates r.yml -I inter --out-path out > /dev/null 2> err || rc=$?
	if grep -q "Sanitizer" err; then
		sed -n '1,30p' err
		fail "allocation $n failed: a sanitizer report (leak or memory error)"
	fi
	case $rc in
	0) (cd out && sha256sum -- *) | cmp -s - want.sum || fail "allocation $n failed, exit 0, but the output differs" ;;
	1) grep -q "error: " err || { cat err; fail "allocation $n: exit 1 without a message"; }
	   no_out out
	   for s in s1 s2; do no_out inter/$s; done
	   fails=$((fails + 1)) ;;
	*) cat err; fail "allocation $n failed: exit $rc" ;;
	esac
	[ ! -e inter ] || [ -z "$(ls -A inter)" ] || { ls -R inter; fail "allocation $n: a streamed merge was written"; }
	tried=$((tried + 1))
done
[ "$tried" -gt 0 ] || fail "no allocation tried"
echo "mk-multi --no-intermediates: $c allocations, $tried of them failed in turn ($fails runs failed cleanly)"
