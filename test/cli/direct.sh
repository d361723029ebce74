# mk-pack writes tensor data O_DIRECT (whole 4 KiB blocks from a bounce
# buffer; the blocks a tensor shares with its neighbours or the header go
# through the page cache), which changes no byte: streams of tensors of
# many sizes whose chunks (of random lengths, not block multiples) come
# interleaved, packed with and without --buffered, from a file (every
# chunk from memory) and from a pipe (large chunks spliced among small
# ones written from memory, within one tensor), into one shard and many;
# the same on tmpfs; the O_DIRECT path is the one taken (strace), and
# mk-yaml --buffered changes no byte and reaches mk-pack in one process
# and as processes.  (Write errors and refused
# alignments on that path: test/cli/faultio.sh, op dpwrite.)
. "$MK_TOP/test/cli/lib.inc"
for seed in 1 2 3 4 5; do
	mk-forge interleaved=$seed > il.mks
	for ss in 5B 1M 300K 40K; do
		mk-pack --buffered --no-splice --out-shard-size $ss b < il.mks
		mk-pack --out-shard-size $ss d < il.mks
		cat il.mks | mk-pack --out-shard-size $ss s
		diff -r b d > /dev/null || fail "seed $seed, shards $ss: O_DIRECT output differs from --buffered"
		diff -r b s > /dev/null || fail "seed $seed, shards $ss: spliced + O_DIRECT output differs from --buffered"
		[ "$ss" != 40K ] || [ "$(ls b | wc -l)" -gt 10 ] || fail "seed $seed: expected many shards at 40K"
		rm -rf b d s
	done
done
# the bytes are the forged ones (a hash of tensor and place: every 61st
# byte of every tensor read back)
mk-pack --out-shard-size 300K b < il.mks
if command -v python3 > /dev/null 2>&1; then
	python3 - b <<'EOF'
import json, os, struct, sys
M = (1 << 64) - 1
def byte(t, b):
    z = (((t << 40) ^ b) + 0x9E3779B97F4A7C15) & M
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M
    return (z ^ (z >> 31)) >> 56
seen = 0
for f in sorted(os.listdir(sys.argv[1])):
    if not f.endswith(".safetensors"):
        continue
    data = open(os.path.join(sys.argv[1], f), "rb").read()
    n = struct.unpack("<Q", data[:8])[0]
    for name, v in json.loads(data[8:8 + n]).items():
        if name == "__metadata__":
            continue
        lo, hi = v["data_offsets"]
        t = int(name[1:])
        for b in range(0, hi - lo, 61):
            if data[8 + n + lo + b] != byte(t, b):
                sys.exit("%s byte %d: %d, want %d" % (name, b, data[8 + n + lo + b], byte(t, b)))
        seen += 1
if seen != 24:
    sys.exit("%d tensors, want 24" % seen)
EOF
fi
[ -d /dev/shm ] && [ -w /dev/shm ] && {
	t=$(mktemp -d /dev/shm/mk-direct.XXXXXX)
	mk-pack --out-shard-size 300K "$t/o" < il.mks
	diff -r b "$t/o" > /dev/null || { rm -rf "$t"; fail "tmpfs output differs"; }
	rm -rf "$t"
}
if command -v strace > /dev/null 2>&1 && strace -f -o /dev/null true 2>/dev/null; then
	ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
	export ASAN_OPTIONS
	strace -f -e trace=openat -o tr.txt mk-pack --out-shard-size 300K d < il.mks
	grep -Eq 'safetensors", O_WRONLY\|O_DIRECT' tr.txt || fail "mk-pack did not open its shard O_DIRECT"
	strace -f -e trace=openat -o tr.txt mk-pack --out-shard-size 300K --buffered e < il.mks
	! grep -Eq 'O_DIRECT[|)]' tr.txt || fail "mk-pack --buffered opened a file O_DIRECT"
	diff -r b d > /dev/null && diff -r b e > /dev/null || fail "the traced outputs differ"
	ASAN_OPTIONS=${ASAN_OPTIONS%detect_leaks=0}
fi
# a merge of models whose tensors are not block multiples, in one process
# and as processes, with and without --buffered
mk-gen-model --shards 2 --all-dtypes --big-rows 3001 --seed 3 m > /dev/null
mk-gen-model --shards 2 --all-dtypes --big-rows 3001 --seed 4 n > /dev/null
printf 'merge_method: ties\nbase_model: m\nmodels:\n  - model: n\n    parameters: {weight: 0.7, density: 0.5}\n' > t.yml
mk-yaml --out-shard-size 100K t.yml y1/o
mk-yaml --out-shard-size 100K --buffered t.yml y2/o
mk-yaml --out-shard-size 100K --processes t.yml y3/o
mk-yaml --out-shard-size 100K --processes --buffered t.yml y4/o
[ "$(ls y1/o/*.safetensors | wc -l)" -gt 2 ] || fail "expected several shards"
for d in y2 y3 y4; do
	diff -r y1/o $d/o > /dev/null || fail "mk-yaml output $d differs from the O_DIRECT one in one process"
done
# --buffered reaches mk-pack in both modes (mk_run_opts.buffered, the
# stage's argument)
if command -v strace > /dev/null 2>&1 && strace -f -o /dev/null true 2>/dev/null; then
	ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
	export ASAN_OPTIONS
	for mode in "" --processes; do
		rm -rf y5 y6
		strace -f -e trace=openat -o tr.txt mk-yaml $mode t.yml y5/o
		grep -Eq 'safetensors", O_WRONLY\|O_DIRECT' tr.txt || fail "mk-yaml $mode: no shard opened O_DIRECT"
		strace -f -e trace=openat -o tr.txt mk-yaml $mode --buffered t.yml y6/o
		! grep -Eq 'O_DIRECT[|)]' tr.txt || fail "mk-yaml $mode --buffered: a file opened O_DIRECT"
	done
	ASAN_OPTIONS=${ASAN_OPTIONS%detect_leaks=0}
fi
