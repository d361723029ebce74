# No orphans.  mk-yaml --processes killed alone, by SIGTERM, SIGHUP or
# SIGKILL, stops its stages at once; no stage lives on and no OUT appears
# after.  (SIGINT is left out there: sh starts background jobs with it
# ignored; Ctrl-C reaches every stage anyway, as they share the
# terminal's process group.)  mk-yaml in one process, stopped by SIGINT,
# SIGTERM or SIGHUP, cancels: its stage threads stop, it dies by that
# signal, no OUT, OUT.mk-partial kept for --resume (which then writes the
# bytes of an uninterrupted run) and nothing else left in the directory;
# by SIGKILL, the same without the cancel.
. "$MK_TOP/test/cli/lib.inc"
# two models large enough that the merge runs for a while
mk-gen-model --dtype F32 --hidden 1024 --layers 1 --big-rows 131072 a
mk-gen-model --dtype F32 --hidden 1024 --layers 1 --big-rows 131072 --seed 9 b
slerp_config slerp.yml a b
for sig in TERM HUP KILL; do
	out=$PWD/out-$sig
	# env gives mk-yaml the signals' default actions back: a shell started
	# under nohup (or another parent that ignores SIGHUP) passes them on
	# ignored, and mk-yaml then rightly leaves them ignored
	env --default-signal=HUP,TERM mk-yaml --processes --quiet slerp.yml "$out" &
	y=$!
	# kill it once its stages run (before mk-pack finishes)
	t=0
	while [ -z "$(pgrep -P $y)" ] && [ $t -lt 100 ]; do sleep 0.02; t=$((t + 1)); done
	[ -n "$(pgrep -P $y)" ] || fail "mk-yaml started no stage"
	sleep 0.05
	if [ -e "$out" ]; then
		wait $y || fail "mk-yaml --processes failed"
		echo "the merge finished before the kill; SIG$sig not tested"
		rm -rf "$out"
		continue
	fi
	kids=$(pgrep -P $y | tr '\n' ,)
	if ! kill -$sig $y 2>/dev/null; then
		# it ended between the look and the kill: the merge finished
		wait $y || fail "mk-yaml --processes failed"
		echo "the merge finished before the kill; SIG$sig not tested"
		rm -rf "$out"
		continue
	fi
	# taken after the kill: OUT put in place before it has an older ctime
	# (the kernel's file times lag the clock, never lead it)
	killed=$(date +%s.%N)
	if wait $y 2>/dev/null; then
		# the signal came as it was ending: its merge must be whole
		[ -e "$out" ] || fail "mk-yaml killed by SIG$sig exited 0 and wrote no $out"
		echo "the merge finished as the kill came; SIG$sig not tested"
		rm -rf "$out"
		continue
	fi
	sleep 1
	# (a dead stage may linger as a zombie until its new parent reaps it)
	left=$(ps -o pid=,stat=,args= -p "${kids%,}" | awk '$2 !~ /^Z/' || true)
	[ -z "$left" ] || { echo "$left" >&2; fail "SIG$sig: stages outlived mk-yaml (above)"; }
	sleep 2
	if [ -e "$out" ]; then
		# mk-pack renamed OUT into place as the kill came, before mk-yaml
		# could report it: a whole merge, not one finished after
		awk -v c="$(stat -c %.9Z "$out")" -v k="$killed" 'BEGIN { exit !(c <= k) }' ||
			fail "SIG$sig: $out appeared after mk-yaml was killed"
		[ -e "$out/model.safetensors" ] || fail "SIG$sig: $out in place without its tensors"
		echo "the merge finished as the kill came; SIG$sig not tested"
		rm -rf "$out" "$out.mk-partial"
		continue
	fi
	echo "SIG$sig: no stage left, no $out"
	rm -rf "$out.mk-partial"
done

# in one process
mkdir ref
mk-yaml --quiet slerp.yml ref/one
for sig in INT TERM HUP KILL; do
	# env gives mk-yaml SIGINT back (sh ignores it in background jobs), and
	# SIGHUP and SIGTERM as above
	env --default-signal=INT,HUP,TERM mk-yaml --quiet slerp.yml one 2> err.txt &
	y=$!
	# kill it once its stage threads run (before the merge finishes)
	t=0
	while [ "$(ls /proc/$y/task 2>/dev/null | wc -l)" -lt 5 ] && [ -e /proc/$y ] && [ $t -lt 200 ]; do
		sleep 0.01; t=$((t + 1))
	done
	sleep 0.01
	if [ -e one ] || ! kill -$sig $y 2>/dev/null; then
		wait $y || { cat err.txt >&2; fail "mk-yaml failed"; }
		echo "the merge finished before the kill; SIG$sig not tested"
		rm -rf one
		continue
	fi
	set +e; wait $y; rc=$?; set -e
	if [ $rc -eq 0 ]; then
		# the signal came as it was ending: its merge must be whole
		[ -e one ] || fail "mk-yaml killed by SIG$sig exited 0 and wrote no one"
		diff -r ref/one one || fail "SIG$sig: came as it ended, and the output differs"
		echo "the merge finished as the kill came; SIG$sig not tested"
		rm -rf one
		continue
	fi
	case $sig in INT) n=2 ;; TERM) n=15 ;; HUP) n=1 ;; KILL) n=9 ;; esac
	[ $rc -eq $((128 + n)) ] || { cat err.txt >&2; fail "SIG$sig: mk-yaml exited $rc, not by the signal"; }
	[ ! -e /proc/$y ] || fail "SIG$sig: mk-yaml (pid $y) is still there"
	[ ! -e one ] || fail "SIG$sig: OUT appeared"
	if [ $sig != KILL ]; then
		grep -q "stopped by SIG$sig" err.txt || { cat err.txt >&2; fail "SIG$sig: no word of the stop"; }
		if [ -e one.mk-partial ]; then
			err_has "one.mk-partial is kept: run again with --resume" "SIG$sig: the kept partial is not named"
		fi
	fi
	# nothing but the partial output (no stray scratch or temporary file)
	left=$(ls -A | grep -v -x -e a -e b -e slerp.yml -e ref -e err.txt -e one.mk-partial || true)
	[ -z "$left" ] || fail "SIG$sig: left behind: $left"
	# the partial continues into the bytes of an uninterrupted run
	mk-yaml --quiet --resume slerp.yml one
	diff -r ref/one one || fail "SIG$sig: resumed and uninterrupted differ"
	[ ! -e one.mk-partial ] || fail "SIG$sig: one.mk-partial left after the resume"
	echo "SIG$sig: one process, stopped, no OUT, resumed to the same bytes"
	rm -rf one
done
