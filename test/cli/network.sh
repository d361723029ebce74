# Stages on two hosts: network namespaces A and B joined by a veth pair,
# streams carried by nc (netcat-openbsd), as a user spreads a merge over
# machines.  A runs mk-plan | mk-fetch, B runs mk-merge | mk-pack; OUT on
# B must be byte for byte the local pipe's.  Then the link is cut
# mid-stream three ways: the link goes down (B's nc gives up when idle),
# A's sender dies (B sees the stream end early), B's side dies (A must
# fail, not hang).  Each cut: no OUT; with --resume the partial directory
# stays and a second transfer finishes it, byte-identical.  Needs root
# (ip netns) and nc; skipped without them.
. "$MK_TOP/test/cli/lib.inc"
[ "$(id -u)" = 0 ] || exit 77
command -v nc > /dev/null || exit 77
command -v ip > /dev/null || exit 77
A=mkA$$ B=mkB$$ VA=mkva$$ VB=mkvb$$
ip netns add $A 2>/dev/null || exit 77
bg=""
cleanup() {
	for p in $bg; do kill -9 $p 2>/dev/null || true; done
	ip netns pids $A 2>/dev/null | xargs -r kill -9 2>/dev/null || true
	ip netns pids $B 2>/dev/null | xargs -r kill -9 2>/dev/null || true
	ip netns del $A 2>/dev/null || true
	ip netns del $B 2>/dev/null || true
}
trap cleanup EXIT
ip netns add $B
ip link add $VA type veth peer name $VB
ip link set $VA netns $A
ip link set $VB netns $B
ip -n $A addr add 10.77.0.1/24 dev $VA
ip -n $B addr add 10.77.0.2/24 dev $VB
for n in $A $B; do ip -n $n link set lo up; done
ip -n $A link set $VA up
ip -n $B link set $VB up
inA() { ip netns exec $A "$@"; }
inB() { ip netns exec $B "$@"; }
# listening PORT: wait until B listens on PORT
listening() {
	i=0
	until inB ss -ltn | grep -q ":$1 "; do
		i=$((i + 1))
		[ $i -lt 100 ] || fail "nothing listens on port $1 in B"
		sleep 0.05
	done
}

mk-gen-model --dtype F32 --hidden 256 --layers 4 --big-rows 8192 a
mk-gen-model --dtype F32 --hidden 256 --layers 4 --big-rows 8192 --seed 9 b
slerp_config slerp.yml a b
mk-plan --name out slerp.yml | mk-fetch | mk-merge | mk-pack ref
mk-plan --name out slerp.yml | mk-fetch > in.mks
size=$(stat -c %s in.mks)

# 1. A: mk-plan | mk-fetch, over the link, B: mk-merge | mk-pack
inB sh -c 'nc -l 10.77.0.2 9001 | mk-merge | mk-pack out' 2> b.err &
rb=$!
listening 9001
inA sh -c 'mk-plan --name out slerp.yml | mk-fetch | nc -N 10.77.0.2 9001' 2> a.err ||
	{ cat a.err; fail "A's side failed"; }
wait $rb || { cat b.err; fail "B's side failed"; }
diff -r ref out > /dev/null || fail "OUT made across the hosts differs from the local one"
rm -rf out
echo "across two hosts: OUT identical to the local pipe's ($size bytes of inputs stream carried)"

# send_half PORT: half of the inputs stream, then nothing (a stalled
# sender), in the background; its pid in $sender
send_half() {
	inA sh -c "{ head -c $((size / 2)) in.mks; sleep 60; } | nc 10.77.0.2 $1" 2>/dev/null &
	sender=$!
	bg="$bg $sender"
}
# received PORT BYTES: wait until B's socket on PORT has taken BYTES
received() {
	i=0
	while :; do
		got=$(inB ss -tni "sport = :$1" 2>/dev/null | sed -n 's/.*bytes_received:\([0-9]*\).*/\1/p' | head -n 1)
		[ -n "$got" ] && [ "$got" -ge "$2" ] && return 0
		i=$((i + 1))
		[ $i -lt 200 ] || fail "B received ${got:-nothing} of $2 bytes on port $1"
		sleep 0.05
	done
}
# resume_over PORT: the whole stream again into mk-pack --resume on B
resume_over() {
	inB sh -c "nc -l 10.77.0.2 $1 | mk-merge | mk-pack --resume out" 2> b2.err &
	rb=$!
	listening $1
	inA nc -N 10.77.0.2 $1 < in.mks
	wait $rb || { cat b2.err; fail "the resumed transfer failed"; }
	[ ! -e out.mk-partial ] || fail "out.mk-partial left after resuming"
	diff -r ref out > /dev/null || fail "the resumed OUT differs"
	rm -rf out
}

# 2. the link goes down mid-stream: B's nc gives up after 3 s idle
rc=0
inB sh -c 'nc -l -w 3 10.77.0.2 9002 | mk-merge | mk-pack --resume out' 2> b.err &
rb=$!
listening 9002
send_half 9002
received 9002 $((size / 4))
ip -n $A link set $VA down
t0=$(date +%s)
wait $rb || rc=$?
t1=$(date +%s)
kill -9 $sender 2>/dev/null || true
[ $rc != 0 ] || fail "link down: B's side exited 0"
[ ! -e out ] || fail "link down: OUT appeared"
[ -d out.mk-partial ] || fail "link down: mk-pack --resume kept no partial directory"
grep -q "without an END frame\|truncated" b.err || { cat b.err; fail "link down: no message about the cut stream"; }
echo "link down mid-stream: B's side exited $rc after $((t1 - t0)) s: $(grep mk-merge b.err | head -n 1)"
ip -n $A link set $VA up
resume_over 9003
echo "resumed over the link: OUT identical"

# 3. A's sender dies mid-stream (kill -9 of nc): B sees the stream end
rc=0
inB sh -c 'nc -l 10.77.0.2 9004 | mk-merge | mk-pack out' 2> b.err &
rb=$!
listening 9004
send_half 9004
received 9004 $((size / 4))
ip netns pids $A | xargs -r kill -9 2>/dev/null || true   # (a process may end between the two)
wait $rb || rc=$?
[ $rc != 0 ] || fail "sender killed: B's side exited 0"
no_out out
grep -q "without an END frame\|truncated" b.err || { cat b.err; fail "sender killed: no message about the cut stream"; }
echo "sender killed mid-stream: B's side exited $rc, no OUT: $(grep mk-merge b.err | head -n 1)"

# 4. B's side dies mid-stream: A's stages must fail, not hang (nc itself
# exits 0 when its peer goes away, so mk-fetch's own status is checked)
inB sh -c 'nc -l 10.77.0.2 9005 | mk-merge | mk-pack out' 2> b.err &
rb=$!
bg="$bg $rb"
listening 9005
( sleep 1; ip netns pids $B | xargs -r kill -9 2>/dev/null || true ) &
t0=$(date +%s)
rm -f fetch.rc
inA sh -c 'mk-plan --name out slerp.yml | { mk-fetch 2> fetch.err; echo $? > fetch.rc; } |
	{ head -c 1000000; sleep 2; cat; } | nc -N 10.77.0.2 9005' 2> a.err || true
t1=$(date +%s)
wait $rb 2>/dev/null || true
[ -s fetch.rc ] || fail "receiver killed: mk-fetch's status not recorded"
rc=$(cat fetch.rc)
[ "$rc" != 0 ] || fail "receiver killed: mk-fetch exited 0"
[ $((t1 - t0)) -lt 30 ] || fail "receiver killed: A's side took $((t1 - t0)) s to fail"
[ ! -e out ] || fail "receiver killed: OUT appeared"   # (a partial directory may stay: kill -9)
echo "receiver killed mid-stream: mk-fetch on A exited $rc after $((t1 - t0)) s $(head -n 1 fetch.err)"
