# splice(2) in mk-fetch (file pages into the pipe) and mk-pack (the pipe
# into the shards) changes no byte: the streams and outputs with and
# without --no-splice are identical, for every reader, plan and copy mode;
# stdout or stdin that is a regular file or a socket falls back to
# write/read; a flipped data byte is still caught on the spliced path.
. "$MK_TOP/test/cli/lib.inc"
mk-gen-model --shards 2 --all-dtypes --big-rows 20000 --seed 3 m
mk-gen-model --shards 2 --all-dtypes --big-rows 20000 --seed 4 n
# copy mode, small chunks so that most are spliced and some are too small
for io in uring mmap pread; do
	MK_IO=$io mk-fetch --chunk-size 64K -m m | cat > s-$io.mks
	MK_IO=$io mk-fetch --chunk-size 64K --no-splice -m m | cat > c-$io.mks
	MK_IO=$io mk-fetch --chunk-size 64K -m m -o f-$io.mks
	cmp s-$io.mks c-$io.mks || fail "io=$io: the spliced stream differs from the copied one"
	cmp s-$io.mks f-$io.mks || fail "io=$io: the stream to a pipe differs from the one to a file"
done
cmp s-uring.mks s-mmap.mks && cmp s-uring.mks s-pread.mks || fail "readers give different streams"
mk-cat --verify s-uring.mks > /dev/null
# stdout a socket: splice is refused there, the copy path writes it
if command -v python3 > /dev/null 2>&1; then
	python3 - <<'EOF'
import socket, subprocess, sys
a, b = socket.socketpair()
p = subprocess.Popen(["mk-fetch", "--chunk-size", "64K", "-m", "m"], stdout=a)
a.close()
with open("sock.mks", "wb") as f:
    while True:
        d = b.recv(1 << 20)
        if not d:
            break
        f.write(d)
sys.exit(p.wait())
EOF
	cmp s-uring.mks sock.mks || fail "the stream through a socket differs"
fi
# the spliced path is taken (where strace can show it; LeakSanitizer
# cannot run under ptrace)
if command -v strace > /dev/null 2>&1 && strace -f -o /dev/null true 2>/dev/null; then
	ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
	export ASAN_OPTIONS
	strace -f -e trace=splice -o tr.txt mk-fetch --chunk-size 64K -m m | cat > /dev/null
	grep -q 'splice(' tr.txt || fail "mk-fetch into a pipe did not splice"
	strace -f -e trace=splice -o tr.txt mk-fetch --chunk-size 64K --no-splice -m m | cat > /dev/null
	! grep -q 'splice(' tr.txt || fail "mk-fetch --no-splice spliced"
	mk-fetch -m m | strace -f -e trace=splice -o tr.txt mk-pack sp > /dev/null
	grep -q 'splice(' tr.txt || fail "mk-pack from a pipe did not splice"
	rm -rf sp
	ASAN_OPTIONS=${ASAN_OPTIONS%detect_leaks=0}
fi
# mk-pack: from a pipe (spliced), --no-splice, from a file (read), and a
# compressed stream (never spliced): the same output
cat s-uring.mks | mk-pack --out-shard-size 300K p1
cat s-uring.mks | mk-pack --out-shard-size 300K --no-splice p2
mk-pack --out-shard-size 300K p3 < s-uring.mks
mk-fetch --chunk-size 64K -z -m m | mk-pack --out-shard-size 300K p4
mk-st-diff m p1 || fail "spliced mk-pack output differs from the model"
for d in p2 p3 p4; do
	diff -r p1 $d > /dev/null || fail "mk-pack output $d differs from the spliced one"
done
# plan mode (INPT frames) and the whole pipeline, through mk-merge
printf 'merge_method: linear\nmodels:\n  - model: m\n    parameters: {weight: 0.3}\n  - model: n\n    parameters: {weight: 0.7}\n' > lin.yml
mk-plan lin.yml > plan.mks
mk-fetch --chunk-size 64K -i plan.mks | cat > ps.mks
mk-fetch --chunk-size 64K --no-splice -i plan.mks | cat > pc.mks
cmp ps.mks pc.mks || fail "plan mode: the spliced stream differs from the copied one"
mk-merge < ps.mks | mk-pack q1
mk-fetch --no-splice -i plan.mks | mk-merge | mk-pack --no-splice q2
diff -r q1 q2 > /dev/null || fail "merge output differs with and without splice"
printf 'merge_method: passthrough\nslices:\n  - sources:\n      - model: m\n        layer_range: [0, 2]\n' > pass.yml
mk-plan pass.yml | mk-fetch | mk-merge | mk-pack r1
mk-plan pass.yml | mk-fetch --no-splice | mk-merge | mk-pack --no-splice r2
diff -r r1 r2 > /dev/null || fail "passthrough output differs with and without splice"
# a flipped byte inside a spliced DATA payload: a checksum error, no output
at=$(mk-cat s-uring.mks | awk 'BEGIN { off = 16 }
	{ len = -1; for (i = 1; i <= NF; i++) if ($i ~ /^len=/) len = substr($i, 5) + 0 }
	len < 0 { next }
	$2 == "DATA" && len > 8192 { print off + 32 + 48 + 1000; exit }
	{ off += 32 + len }')
[ -n "$at" ] || fail "no large DATA frame"
cp s-uring.mks bad.mks
printf '\377' | dd of=bad.mks bs=1 seek="$at" conv=notrunc 2>/dev/null
cmp -s bad.mks s-uring.mks && fail "the flip changed nothing"
set +e
cat bad.mks | mk-pack bo 2> err.txt
rc=$?
set -e
[ $rc -eq 1 ] || fail "mk-pack accepted a flipped data byte from a pipe (exit $rc)"
grep -q "checksum mismatch" err.txt || { cat err.txt >&2; fail "no checksum error"; }
no_out bo
