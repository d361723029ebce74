# No orphans: killing mk-yaml alone, by SIGTERM, SIGHUP or SIGKILL,
# stops its stages at once; no stage lives on and no OUT appears after.
# (SIGINT is left out: sh starts background jobs with it ignored; Ctrl-C
# reaches every stage anyway, as they share the terminal's process group.)
. "$MK_TOP/test/cli/lib.inc"
# two models large enough that the merge runs for a while
mk-gen-model --dtype F32 --hidden 1024 --layers 1 --big-rows 65536 a
mk-gen-model --dtype F32 --hidden 1024 --layers 1 --big-rows 65536 --seed 9 b
slerp_config slerp.yml a b
for sig in TERM HUP KILL; do
	out=$PWD/out-$sig
	mk-yaml --quiet slerp.yml "$out" &
	y=$!
	# kill it once its stages run (before mk-pack finishes)
	t=0
	while [ -z "$(pgrep -P $y)" ] && [ $t -lt 100 ]; do sleep 0.02; t=$((t + 1)); done
	[ -n "$(pgrep -P $y)" ] || fail "mk-yaml started no stage"
	sleep 0.2
	[ ! -e "$out" ] || { echo "the merge finished before the kill; SIG$sig not tested"; continue; }
	kids=$(pgrep -P $y | tr '\n' ,)
	kill -$sig $y
	wait $y 2>/dev/null && fail "mk-yaml killed by SIG$sig exited 0"
	sleep 1
	# (a dead stage may linger as a zombie until its new parent reaps it)
	left=$(ps -o pid=,stat=,args= -p "${kids%,}" | awk '$2 !~ /^Z/' || true)
	[ -z "$left" ] || { echo "$left" >&2; fail "SIG$sig: stages outlived mk-yaml (above)"; }
	sleep 2
	[ ! -e "$out" ] || fail "SIG$sig: $out appeared after mk-yaml was killed"
	echo "SIG$sig: no stage left, no $out"
done
