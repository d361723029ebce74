# Resume an interrupted merge: kill each stage of the pipe (mk-fetch,
# mk-merge: kill -9 at varying points of the run, once mk-merge has read
# so much of its input; mk-pack: killed at its Nth write of tensor data by
# test/preload/faultio.so, and by kill -9), resume with
# mk-fetch --skip-done | mk-merge | mk-pack --resume, and compare OUT byte
# for byte with an uninterrupted run.  Then mk-yaml --resume, copy mode,
# and the refusals: no --resume, another merge, another shard size, a
# tensor whose bytes changed.  Under the sanitizers (slow) fewer points.
. "$MK_TOP/test/cli/lib.inc"
FIO=$MK_TOP/build/preload/faultio.so   # the plain build's (make check builds it first)
[ -f "$FIO" ] || { [ "$MK_SAN" = 1 ] && exit 77; fail "no $FIO"; }
[ "$MK_SAN" = 1 ] && export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}verify_asan_link_order=0"
# writes PROG CMD...: the call by which PROG writes the tensors' bytes in
# CMD (splice, pwrite or io_uring's O_DIRECT writes: whichever it makes
# most of) and how many it makes, as "OP N"; CMD must succeed
writes() {
	prog=$1
	shift
	MK_FAULT_IO_COUNT=1 MK_FAULT_IO_PROG=$prog LD_PRELOAD=$FIO "$@" 2>&1 >/dev/null |
		sed -n 's/^faultio: //p' | tr ' ' '\n' | grep -E '^(splice|pwrite|dpwrite)=' | sort -t= -k2 -n |
		tail -n 1 | tr '=' ' '
}
# crash PROG OP N CMD...: CMD, PROG killed (SIGKILL) as it makes its Nth OP
crash() {
	prog=$1 op=$2 at=$3
	shift 3
	MK_FAULT_IO=$op:$at:kill MK_FAULT_IO_PROG=$prog LD_PRELOAD=$FIO "$@"
}
mk-gen-model --dtype F32 --hidden 256 --layers 4 --big-rows 8192 a
mk-gen-model --dtype F32 --hidden 256 --layers 4 --big-rows 8192 --seed 9 b
mk-gen-model --dtype F32 --hidden 256 --layers 4 --big-rows 8192 --seed 5 c
slerp_config slerp.yml a b
slerp_config other.yml a c
points=20
[ "$MK_SAN" = 1 ] && points=4
shard=--out-shard-size=6M
# small commits (a quarter of --max-memory), so kills land between them
pack_opts="--no-progress --max-memory 12MiB $shard"

pipe() { # pipe [ENV=..]: the resumable hand-built pipe into out
	mk-plan --name out slerp.yml | mk-fetch --skip-done out.mk-partial | mk-merge |
		mk-pack --resume $pack_opts out
}
# the reference, and the size of the stream mk-merge reads
mk-plan --name out slerp.yml | mk-fetch | mk-merge | mk-pack $pack_opts ref
mk-plan --name out slerp.yml | mk-fetch > in.mks
bytes=$(wc -c < in.mks)
rm in.mks
ntensors=$(grep -c '": "model-' ref/model.safetensors.index.json)
echo "uninterrupted run: $bytes bytes into mk-merge, $ntensors tensors"
[ "$ntensors" -gt 20 ] || fail "only $ntensors tensors in the reference"
# mk-pack's writes of tensor data in the pipe: where it is killed below
set -- $(writes mk-pack pipe)
wop=${1:-} nw=${2:-0}
rm -rf out
[ "$nw" -gt "$points" ] || fail "mk-pack made $nw data writes ($wop), fewer than the $points points"
echo "mk-pack writes tensor data by $nw ${wop}s"

# resume until OUT is there (a resume may be interrupted too); compare
finish() { # finish LABEL
	pipe 2>resume.err || { cat resume.err >&2; fail "$1: the resumed run failed"; }
	[ -d out ] && [ ! -e out.mk-partial ] || fail "$1: no out after resuming"
	diff -r ref out > diff.txt || { cat diff.txt >&2; fail "$1: the resumed OUT differs"; }
	rm -rf out
}
interrupted=0 resumed_tensors=0
# count_done: tensors the partial directory's journal lists
count_done() {
	n=0
	[ -f out.mk-partial/.mk-journal ] && n=$(grep -c '^done ' out.mk-partial/.mk-journal || true)
	echo "$n"
}

# the bytes process PID has read (/proc/PID/io; empty once it is gone)
read_bytes() { sed -n 's/^rchar: //p' "/proc/$1/io" 2>/dev/null || true; }
# kill -9 one stage of the pipe at a point of the run, BYTES into
# mk-merge's input: a state, not a time (the pipe takes 0.1 s here, and
# any time on a loaded machine).  A gate after mk-fetch passes BYTES (and
# drops what head reads beyond them: the run is failed anyway) and holds
# the rest until the kill, so that every stage is still running then:
# mk-fetch blocked on its output, mk-merge and mk-pack on their input.
gate() { # gate BYTES: until gate.open is made
	head -c "$1" || :
	while [ ! -e gate.open ]; do sleep 0.01; done
}
kill_stage() { # kill_stage STAGE BYTES
	( mk-plan --name out slerp.yml | mk-fetch --skip-done out.mk-partial | gate "$2" | mk-merge |
		mk-pack --resume $pack_opts out ) 2>/dev/null &
	sub=$!
	i=0
	while :; do
		m=$(pgrep -P $sub -x mk-merge || true)
		r=
		[ -z "$m" ] || r=$(read_bytes "$m")
		[ -n "$r" ] && [ "$r" -ge "$2" ] && break
		i=$((i + 1))
		[ $i -lt 6000 ] || fail "mk-merge never read $2 bytes (it read ${r:-none})"
		sleep 0.01
	done
	pid=$(pgrep -P $sub -x "$1" || true)
	[ -n "$pid" ] || fail "$1 was not running at $2 bytes"
	kill -9 $pid
	: > gate.open
	wait $sub 2>/dev/null || true
	rm gate.open
	# an mk-pack killed with the others' output cut keeps its partial
	if [ -d out ]; then
		diff -r ref out > diff.txt || { cat diff.txt >&2; fail "$1 not killed: OUT differs"; }
		rm -rf out
		return
	fi
	if [ ! -d out.mk-partial ]; then
		# killed before mk-pack had the HEAD (and made it)
		finish "kill -9 $1 at $2 bytes (early)"
		return
	fi
	interrupted=$((interrupted + 1))
	resumed_tensors=$((resumed_tensors + $(count_done)))
	finish "kill -9 $1 at $2 bytes"
}
for stage in mk-fetch mk-merge mk-pack; do
	before=$interrupted
	k=1
	while [ $k -le $points ]; do
		kill_stage $stage $(( bytes * k / (points + 1) ))
		k=$((k + 1))
	done
	echo "$stage: $((interrupted - before)) of $points runs interrupted and resumed"
	# (a kill before mk-pack has the HEAD, and so OUT.mk-partial, is early)
	[ $((interrupted - before)) -ge 1 ] || fail "$stage: no kill landed after mk-pack began"
done

# mk-pack killed at its Nth write of tensor data, N over the range.  How
# many writes a run makes varies a little (a splice moves what the pipe
# holds), so the points stay within nine tenths of the count seen, and a
# run that ended before its Nth write is checked and counted as not
# interrupted; most must be.
before=$interrupted
k=1 ended=0
while [ $k -le $points ]; do
	n=$(( k * (nw * 9 / 10) / (points + 1) + 1 ))
	if crash mk-pack "$wop" $n pipe 2>/dev/null; then
		[ -d out ] && [ ! -e out.mk-partial ] || fail "write $n never came, and no OUT"
		diff -r ref out > diff.txt || { cat diff.txt >&2; fail "write $n never came: OUT differs"; }
		rm -rf out
		ended=$((ended + 1))
		k=$((k + 1))
		continue
	fi
	[ -d out.mk-partial ] && [ ! -e out ] || fail "killed at write $n: no partial, or OUT"
	d=$(count_done)
	[ "$d" -lt "$ntensors" ] || fail "killed at write $n: the journal lists all $d tensors"
	interrupted=$((interrupted + 1))
	resumed_tensors=$((resumed_tensors + d))
	# a second interruption of the resumed run (it writes less), then the last
	if [ $((k % 4)) = 0 ] && [ $k -lt $points ]; then
		crash mk-pack "$wop" 2 pipe 2>/dev/null && fail "second kill at write 2: the run succeeded"
		[ "$(count_done)" -ge "$d" ] || fail "the second run lost journal entries"
	fi
	finish "mk-pack killed at write $n"
	k=$((k + 1))
done
echo "mk-pack killed at a write: $((interrupted - before)) runs killed and resumed, $ended ended first"
[ $((ended * 2)) -le $points ] || fail "$ended of $points runs ended before mk-pack's write was reached"
echo "$interrupted interruptions, $resumed_tensors tensors found done and not made again"
[ "$resumed_tensors" -gt 0 ] || fail "no resume found a finished tensor"

# stop_late: a partial directory with tensors journaled (the sync thread
# commits in the background: a stop may come before its first commit)
stop_late() {
	tries=0
	while [ $tries -lt 5 ]; do
		rm -rf out.mk-partial
		crash mk-pack "$wop" $((nw * 9 / 10)) pipe 2>/dev/null && fail "the killed run succeeded"
		[ "$(count_done)" -gt 0 ] && return
		tries=$((tries + 1))
	done
	fail "five runs killed at write $((nw * 9 / 10)) of $nw journaled nothing"
}
# a resumed run says what it kept, and mk-fetch what it left out
stop_late
d=$(count_done)
mk-plan --name out slerp.yml | mk-fetch -v --skip-done out.mk-partial 2>fetch.err | mk-merge |
	mk-pack -v --resume $pack_opts out 2>pack.err
grep -qF "left out $d jobs done in out.mk-partial" fetch.err || { cat fetch.err >&2; fail "mk-fetch -v: no 'left out $d jobs'"; }
grep -qF "resumed out: $d tensors" pack.err || { cat pack.err >&2; fail "mk-pack -v: no 'resumed out: $d tensors'"; }
diff -r ref out
rm -rf out

# mk-pack --resume without --skip-done upstream: the done tensors' chunks
# arrive and are skipped
crash mk-pack "$wop" $((nw / 3)) pipe 2>/dev/null || true
[ -d out.mk-partial ] || fail "no partial to resume"
mk-plan --name out slerp.yml | mk-fetch | mk-merge | mk-pack --resume $pack_opts out
diff -r ref out
rm -rf out

# the refusals
stop_late
cp out.mk-partial/.mk-journal journal.saved
expect_fail 1 "to start over, or continue it with --resume" sh -c \
	"mk-plan --name out slerp.yml | mk-fetch | mk-merge | mk-pack $pack_opts out"
expect_fail 1 "to start over, or continue it with --resume" mk-yaml --quiet $shard slerp.yml out
# another merge: mk-fetch refuses before reading, and so does mk-pack
expect_fail 1 "out.mk-partial was started for another merge" sh -c \
	"mk-plan --name out other.yml | mk-fetch --skip-done out.mk-partial > /dev/null"
expect_fail 1 "out.mk-partial was started for another merge" sh -c \
	"mk-plan --name out other.yml | mk-fetch | mk-merge | mk-pack --resume $pack_opts out"
expect_fail 1 "out.mk-partial was started with --out-shard-size 6000000, this run has 5000000000" sh -c \
	"mk-plan --name out slerp.yml | mk-fetch --skip-done out.mk-partial | mk-merge | mk-pack --resume out"
cmp journal.saved out.mk-partial/.mk-journal || fail "a refused resume changed the journal"
# a finished tensor's bytes changed on disk: refused, nothing touched
line=$(grep '^done ' out.mk-partial/.mk-journal | head -1)
name=${line#done * * }
file=$(awk -v n="$name" -F'"' '$2 == n { print $4 }' ref/model.safetensors.index.json)
off=
command -v python3 > /dev/null && off=$(python3 -c "
import json, struct, sys
f = open('out.mk-partial/$file', 'rb'); n = struct.unpack('<Q', f.read(8))[0]
h = json.loads(f.read(n)); print(8 + n + h['$name']['data_offsets'][0])")
if [ -n "$off" ]; then
	printf 'X' | dd of="out.mk-partial/$file" bs=1 seek="$off" conv=notrunc status=none
	expect_fail 1 "tensor '$name' does not match the CRC-32C its journal recorded" sh -c \
		"mk-plan --name out slerp.yml | mk-fetch --skip-done out.mk-partial | mk-merge | mk-pack --resume $pack_opts out"
	cmp journal.saved out.mk-partial/.mk-journal || fail "a refused resume changed the journal"
	[ ! -e out ] || fail "out written despite a damaged partial"
else
	echo "python3 not found: the damaged-tensor check is skipped"
fi
rm -rf out.mk-partial
# --resume with nothing to resume is a plain run
pipe
diff -r ref out
rm -rf out

# mk-yaml --resume: the same OUT as mk-yaml, after mk-yaml itself is
# stopped (SIGTERM) or killed half way through its writes of tensor data
set -- $(writes mk-yaml mk-yaml --quiet $shard slerp.yml out)
yop=${1:-} ny=${2:-0}
[ "$ny" -gt 1 ] || fail "mk-yaml made $ny data writes ($yop)"
mv out yref
crash mk-yaml "$yop" $((ny / 2)) mk-yaml --quiet --resume $shard slerp.yml out 2>/dev/null &&
	fail "mk-yaml killed at write $((ny / 2)) of $ny succeeded"
[ -d out.mk-partial ] || fail "mk-yaml --resume removed the partial directory of a failed run"
mk-yaml --print-pipeline --resume $shard slerp.yml out | grep -qF -- "--skip-done out.mk-partial" ||
	fail "mk-yaml --resume does not pass --skip-done"
mk-yaml --quiet --resume $shard slerp.yml out
diff -r yref out
rm -rf out
mk-yaml --quiet $shard slerp.yml out &
y=$!
# stopped once mk-pack has begun OUT (its partial directory)
while [ ! -d out.mk-partial ] && kill -0 $y 2>/dev/null; do sleep 0.01; done
kill -TERM $y 2>/dev/null || true
wait $y 2>/dev/null || true
# (the merge may have finished before the kill)
[ -d out ] || mk-yaml --quiet --resume $shard slerp.yml out
diff -r yref out
rm -rf out

# copy mode: mk-fetch --model --skip-done | mk-pack --resume
set -- $(writes mk-pack sh -c "mk-fetch --model a | mk-pack $pack_opts cref")
cop=${1:-} nc=${2:-0}
[ "$nc" -gt 3 ] || fail "copy mode: mk-pack made $nc data writes ($cop)"
k=1 cdone=0
while [ $k -le 3 ]; do
	n=$((k * nc / 4))
	crash mk-pack "$cop" $n sh -c "mk-fetch --model a | mk-pack --resume $pack_opts cout" 2>/dev/null &&
		fail "copy mode: mk-pack killed at write $n succeeded"
	cdone=$((cdone + $(grep -c '^done ' cout.mk-partial/.mk-journal || true)))
	mk-fetch --model a --skip-done cout.mk-partial | mk-pack --resume $pack_opts cout
	diff -r cref cout
	rm -rf cout
	k=$((k + 1))
done
# (mk-pack alone runs ahead of its sync thread: a kill may leave nothing journaled)
echo "copy mode: $cdone tensors found done in 3 resumes"
echo "ok"
