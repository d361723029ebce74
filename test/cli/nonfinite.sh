# Non-finite values are reported: an output tensor that holds NaN or
# infinite elements although its inputs were finite is a warning naming it
# (an error with --strict, and then no OUT); one that inherits them from
# an input is not; a sound merge says nothing.
. "$MK_TOP/test/cli/lib.inc"
a=$MK_TOP/testdata/models/tiny-a b=$MK_TOP/testdata/models/tiny-b
# weights of 1e6 into float16 overflow (the inputs are within +-0.05)
cat > over.yml <<YML
merge_method: linear
models:
  - model: $a
    parameters: {weight: 1000000}
  - model: $b
    parameters: {weight: 1000000}
parameters: {normalize: false}
dtype: float16
YML
mk-yaml over.yml out1 2> over.err
grep -q "warning: tensor 'model.embed_tokens.weight': [0-9]* of 16384 elements are NaN or infinite, from inputs that were all finite" over.err ||
	{ cat over.err; fail "no warning naming the overflowed tensor"; }
grep -q "and 12 more tensors with NaN or infinite elements" over.err || { cat over.err; fail "the rest are not counted"; }
[ -d out1 ] || fail "a warning stopped the merge"
# the counts are exact, and the same whether mk-merge writes the output
# into its frame in place, counting it piece by piece on its threads (in
# one process), or counts each range's output as it sends it (processes)
mk-yaml --processes over.yml out1p 2> over-p.err
grep 'warning' over.err | sed 's/^[a-z-]*: //' | sort > w1
grep 'warning' over-p.err | sed 's/^[a-z-]*: //' | sort > w2
[ -s w1 ] && cmp -s w1 w2 || { diff w1 w2; fail "the in-process counts differ from the pipeline's"; }
# ... and on tensors of many pieces (mk-merge's threads take 65536
# elements a piece and count them apart): an embedding of 4 Mi elements,
# -j 2 and -j 3, against the pipeline's counts of the whole ranges
mk-gen-model --dtype BF16 --hidden 64 --inter 128 --layers 1 --vocab 65536 --seed 3 wide1 > /dev/null
mk-gen-model --dtype BF16 --hidden 64 --inter 128 --layers 1 --vocab 65536 --seed 4 wide2 > /dev/null
sed "s|$a|$PWD/wide1|; s|$b|$PWD/wide2|" over.yml > wide.yml
mk-yaml --processes wide.yml outwp 2> wide-p.err
grep 'warning' wide-p.err | sed 's/^[a-z-]*: //' | sort > wp
grep -q "tensor 'model.embed_tokens.weight': [0-9]* of 4194304 elements" wp || { cat wide-p.err; fail "no overflow in the wide embedding (the case tests nothing)"; }
for j in 2 3; do
	mk-yaml -j $j wide.yml outw$j 2> wide-$j.err
	grep 'warning' wide-$j.err | sed 's/^[a-z-]*: //' | sort > w$j
	cmp -s wp w$j || { diff wp w$j; fail "-j $j: the in-process counts of many pieces differ from the pipeline's"; }
done
expect_fail 1 "from inputs that were all finite (--strict)" mk-yaml --strict over.yml out2
no_out out2
# a sound merge: not a word about it
cat > sound.yml <<YML
merge_method: linear
models:
  - model: $a
    parameters: {weight: 1}
  - model: $b
    parameters: {weight: 1}
YML
mk-yaml sound.yml out3 2> sound.err
! grep -q 'NaN' sound.err || { cat sound.err; fail "a sound merge warned"; }
# a NaN inherited from an input is not this warning
if command -v python3 >/dev/null 2>&1; then
	cp -r "$a" nan-a
	python3 - nan-a/model.safetensors <<'PY'
import json, struct, sys
p = sys.argv[1]
b = bytearray(open(p, 'rb').read())
n = struct.unpack('<Q', b[:8])[0]
h = json.loads(b[8:8 + n])
t = h['model.norm.weight']
assert t['dtype'] == 'BF16'
off = 8 + n + t['data_offsets'][0]
b[off:off + 2] = struct.pack('<H', 0x7fc0)   # one NaN
open(p, 'wb').write(bytes(b))
PY
	sed "s|$a|$PWD/nan-a|" sound.yml > nan.yml
	mk-yaml --strict nan.yml out4 2> nan.err || { cat nan.err; fail "an inherited NaN failed --strict"; }
	! grep -q 'NaN' nan.err || { cat nan.err; fail "an inherited NaN was reported as new"; }
	# and through a method with statistics passes (inputs counted as
	# the output's pass converts them), which carries the NaN over
	cat > nan-ties.yml <<YML
merge_method: ties
base_model: $b
models:
  - model: $PWD/nan-a
    parameters: {weight: 1, density: 0.5}
YML
	mk-yaml --strict nan-ties.yml out5 2> nan-ties.err || { cat nan-ties.err; fail "ties: an inherited NaN failed --strict"; }
	! grep -q 'NaN' nan-ties.err || { cat nan-ties.err; fail "ties: an inherited NaN was reported as new"; }
	python3 - out5/model.safetensors <<'PY' || fail "ties: the NaN did not reach the output (the case tests nothing)"
import json, struct, sys
b = open(sys.argv[1], 'rb').read()
n = struct.unpack('<Q', b[:8])[0]
t = json.loads(b[8:8 + n])['model.norm.weight']
o, e = t['data_offsets']
v = [struct.unpack('<H', b[8 + n + i:8 + n + i + 2])[0] for i in range(o, e, 2)]
sys.exit(0 if any((x & 0x7f80) == 0x7f80 and x & 0x7f for x in v) else 1)
PY
	# the same with the inputs streamed once per pass (an embedding over
	# what --max-memory 64M holds), in one process and as processes
	mk-gen-model --dtype BF16 --hidden 256 --inter 512 --layers 1 --vocab 65536 --seed 1 big1 > /dev/null
	mk-gen-model --dtype BF16 --hidden 256 --inter 512 --layers 1 --vocab 65536 --seed 2 big2 > /dev/null
	python3 - big2/model.safetensors <<'PY'
import json, struct, sys
p = sys.argv[1]
b = bytearray(open(p, 'rb').read())
n = struct.unpack('<Q', b[:8])[0]
t = json.loads(b[8:8 + n])['model.embed_tokens.weight']
off = 8 + n + t['data_offsets'][0] + 2 * 5000000
b[off:off + 2] = struct.pack('<H', 0x7fc0)   # one NaN, far into the tensor
open(p, 'wb').write(bytes(b))
PY
	printf 'merge_method: ties\nbase_model: big1\nmodels:\n  - model: big2\n    parameters: {weight: 1, density: 0.5}\n' > big-ties.yml
	mk-plan --explain --max-memory 64M big-ties.yml | grep -A1 '^model.embed_tokens.weight' | grep -q 'streamed once per pass' ||
		fail "the embedding is not streamed once per pass (the case tests nothing)"
	for mode in "" --processes; do
		rm -rf out6
		mk-yaml --strict --max-memory 64M $mode big-ties.yml out6 2> big.err ||
			{ cat big.err; fail "ties, streamed $mode: an inherited NaN failed --strict"; }
		! grep -q 'NaN' big.err || { cat big.err; fail "ties, streamed $mode: an inherited NaN was reported as new"; }
		python3 - out6/model.safetensors <<'PY' || fail "ties, streamed $mode: the NaN did not reach the output"
import json, struct, sys
b = open(sys.argv[1], 'rb').read()
n = struct.unpack('<Q', b[:8])[0]
t = json.loads(b[8:8 + n])['model.embed_tokens.weight']
o = 8 + n + t['data_offsets'][0] + 2 * 5000000
x = struct.unpack('<H', b[o:o + 2])[0]
sys.exit(0 if (x & 0x7f80) == 0x7f80 and x & 0x7f else 1)
PY
	done
fi
echo "non-finite outputs reported, inherited ones not"
