# I/O faults, in every stage: the Nth read, pread, write, pwrite or
# writev fails with EIO (writes also ENOSPC) or comes up short or is
# interrupted (EINTR); mk-pack's O_DIRECT writes (dpwrite) also fail
# with EINVAL, as for an alignment the file system refuses, which must
# not matter either (the rest goes through the page cache); the Nth fsync, fdatasync, ftruncate,
# posix_fallocate or rename fails with EIO (test/preload/faultio.c).  N is
# every call of a clean run's count under make check-full (MK_TEST_FULL=1);
# under make check a seeded sample of them, for each call and fault
# (sweep_points, in lib.inc: the first four, the last and three spread
# between).  A failure must end cleanly: exit 1 with a
# message that says what failed, mk-pack leaving neither OUT nor
# OUT.mk-partial (or, for a failure after OUT was renamed into place,
# exit 0, OUT whole, and a warning saying what failed); a short or interrupted call must not matter at all
# (exit 0, the same bytes).  In the sanitized build the shim sits in front
# of ASan, so every error path is also checked for leaks and memory
# errors.
. "$MK_TOP/test/cli/lib.inc"
P=$MK_TOP/build/preload/faultio.so   # the plain build's (make check builds it first)
[ -f "$P" ] || { [ "$MK_SAN" = 1 ] && exit 77; fail "no $P"; }
[ "$MK_SAN" = 1 ] && export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}verify_asan_link_order=0:detect_leaks=1"
export MK_IO=pread   # io_uring's and mmap's reads do not pass through the shim
W=$(pwd)             # mk-plan and mk-fetch run in MK_TOP (the config's paths)
(cd "$MK_TOP" && mk-plan testdata/configs/ties.yml) > plan.mks
(cd "$MK_TOP" && mk-fetch) < plan.mks > in.mks
mk-merge < in.mks > t.mks
mk-pack ref < t.mks
runs=0 failed=0 same=0 warned=0
ONLY=""                # stage: try only this op's faults
# counts NAME INPUT CMD...: the shim's counts of a clean run, "op=n ..."
counts() {
	name=$1 input=$2
	shift 2
	MK_FAULT_IO_COUNT=1 LD_PRELOAD=$P "$@" < "$input" 2>&1 >/dev/null | sed -n 's/^faultio: //p'
}
# one NAME INPUT WANT SPEC CMD...: run CMD with fault SPEC, check the end
one() {
	name=$1 input=$2 want=$3 spec=$4
	shift 4
	rm -rf "$W/p" "$W/p.mk-partial"
	rc=0
	MK_FAULT_IO=$spec LD_PRELOAD=$P "$@" < "$input" > "$W/got" 2> "$W/err" || rc=$?
	runs=$((runs + 1))
	cd "$W"
	if grep -q "Sanitizer" err; then sed -n 1,30p err; fail "$name, $spec: a sanitizer report"; fi
	case $spec in
	*:short|*:shortall|*:eintr|*:einval)
		[ $rc = 0 ] || { cat err; fail "$name, $spec: exit $rc (a short or interrupted call is not an error)"; }
		if [ "$want" = DIR ]; then diff -r p ref > /dev/null || fail "$name, $spec: OUT differs"
		else cmp -s got "$want" || fail "$name, $spec: the output differs"; fi
		same=$((same + 1)) ;;
	*)
		if [ $rc = 0 ] && [ "$want" = DIR ] && grep -q "warning: .* is complete, but" err; then
			# after OUT is in place (the fsync that makes its rename
			# durable): a warning, OUT whole
			diff -r p ref > /dev/null || fail "$name, $spec: OUT differs"
			warned=$((warned + 1))
			cd "$OLDPWD"
			return
		fi
		[ $rc = 1 ] || { cat err; fail "$name, $spec: exit $rc, expected 1"; }
		grep -q "error: " err || { cat err; fail "$name, $spec: exit 1 without a message"; }
		case $spec in
		*:eio) grep -q "Input/output error" err || { cat err; fail "$name, $spec: the message does not say EIO"; } ;;
		*:enospc) grep -q "No space left" err || { cat err; fail "$name, $spec: the message does not say ENOSPC"; } ;;
		esac
		[ "$want" = DIR ] && no_out p
		failed=$((failed + 1)) ;;
	esac
	cd "$OLDPWD"
}
# stage NAME INPUT WANT CMD...: every op the stage uses, at its points
stage() {
	name=$1 input=$2 want=$3
	shift 3
	c=$(counts "$name" "$input" "$@")
	[ -n "$c" ] || fail "$name: the shim counted nothing"
	tried=$runs f0=$failed s0=$same w0=$warned
	for kv in $c; do
		op=${kv%=*} n=${kv#*=}
		[ "$n" -gt 0 ] || continue
		[ -z "$ONLY" ] || [ "$op" = "$ONLY" ] || continue
		case $op in
		read|pread|write|pwrite|writev|splice) kinds="eio short eintr" ;;
		dpwrite) kinds="eio short eintr einval" ;;
		*) kinds="eio" ;;
		esac
		case $op in write|pwrite|dpwrite|writev|splice|fallocate) kinds="$kinds enospc" ;; esac
		for k in $kinds; do
			for at in $(sweep_points "$n" "$name $op $k" 3); do
				one "$name" "$input" "$want" "$op:$at:$k" "$@"
			done
		done
		case $op in read|pread|write|pwrite|dpwrite|writev|splice) one "$name" "$input" "$want" "$op:1:shortall" "$@" ;; esac
	done
	[ $runs -gt $tried ] || fail "$name: no fault tried"
	echo "$name: calls $c; $((runs - tried)) faults tried ($((failed - f0)) clean errors, $((same - s0)) short or interrupted calls with the same output, $((warned - w0)) warnings)"
}
(cd "$MK_TOP" && stage mk-plan /dev/null "$OLDPWD/plan.mks" mk-plan testdata/configs/ties.yml)
(cd "$MK_TOP" && stage mk-fetch "$OLDPWD/plan.mks" "$OLDPWD/in.mks" mk-fetch)
stage mk-merge in.mks t.mks mk-merge -j2
stage mk-pack t.mks DIR mk-pack "$W/p"
# through pipes, where mk-fetch and mk-pack splice (test/cli/splice.sh):
# the splice calls fail or come up short too (sh's status is mk-fetch's;
# the other calls are those of the stages above; cat runs without the shim)
ONLY=splice
(cd "$MK_TOP" && stage mk-fetch-piped "$OLDPWD/plan.mks" "$OLDPWD/in.mks" \
	sh -c '{ mk-fetch; echo $? > "$0"; } | env -u LD_PRELOAD cat; exit $(cat "$0")' "$W/fetch.rc")
stage mk-pack-piped t.mks DIR sh -c 'env -u LD_PRELOAD cat | mk-pack "$0"' "$W/p"
ONLY=""
