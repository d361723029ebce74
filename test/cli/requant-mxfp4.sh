# --quantize mxfp4 (mk-yaml, mk-pack): a merge of gpt-oss MXFP4 models
# written MXFP4 again, as gpt-oss stores its experts and transformers'
# Mxfp4 quantizer computes them; and --quantize fp8 over experts that a
# block-FP8 model stores one by one (fused in the output).  Checked by
# test/tools/mk-mxfp4-check.py and mk-fp8-check.py (Python's standard
# library, apart from mk's C code): the quantized weights bit for bit the
# plain merge quantized, every other tensor the plain merge's bytes.
# (scripts/requant-conformance: transformers loads such outputs.)
. "$MK_TOP/test/cli/lib.inc"
command -v python3 > /dev/null 2>&1 || exit 77
MX="python3 $MK_TOP/test/tools/mk-mxfp4-check.py"
G="--arch gpt_oss --quantized mxfp4 --hidden 64 --inter 96 --experts 3 --layers 2 --vocab 16 --heads 4 --kv-heads 2"
mk-gen-model $G --dtype BF16 --seed 1 a > /dev/null
mk-gen-model $G --dtype BF16 --seed 2 b > /dev/null
mk-gen-model --arch gpt_oss --hidden 64 --inter 96 --experts 3 --layers 2 --vocab 16 --heads 4 --kv-heads 2 \
	--dtype BF16 --seed 3 plainsrc > /dev/null

lin() {  # lin FILE A B DTYPE
	printf 'merge_method: linear\nmodels:\n  - model: %s\n    parameters: {weight: 0.3}\n  - model: %s\n    parameters: {weight: 0.7}\ndtype: %s\n' \
		"$2" "$3" "$4" > "$1"
}
lin f32.yml a b float32
lin bf16.yml a b bfloat16
for n in f32 bf16; do
	mk-yaml --quiet $n.yml plain-$n
	mk-yaml --quiet --quantize mxfp4 $n.yml q-$n
	$MX q-$n plain-$n > chk-$n.txt || { cat chk-$n.txt; fail "$n: not the plain merge quantized"; }
	cat chk-$n.txt
	grep -q '^mk-mxfp4-check: 4 tensors quantized bit for bit, 33 as the plain merge, 0 faults' chk-$n.txt ||
		fail "$n: expected the 4 expert weights quantized and 33 tensors as they were"
	python3 - q-$n/config.json plain-$n/config.json a/config.json <<'PY' || fail "$n: config.json"
import json, sys
q, p, src = (json.load(open(f)) for f in sys.argv[1:4])
assert q.pop("quantization_config") == src["quantization_config"], "quantization_config differs"
assert q == p, "the rest of config.json differs"
PY
done
# the plan marks the experts, and only them
mk-plan f32.yml > plan.mks
test "$(grep -ao '"requant":"mxfp4"' plan.mks | wc -l)" = 4 || fail "the plan marks other than the 4 expert weights"
grep -aq '"quantization_config":{"quant_method":"mxfp4"' plan.mks || fail "the plan's HEAD lacks the mxfp4 quantization_config"
# the stages, and the programs as processes: the same bytes
mk-fetch < plan.mks | mk-merge | mk-pack --quantize mxfp4 staged
cmp staged/model.safetensors q-f32/model.safetensors || fail "mk-pack --quantize mxfp4 differs from mk-yaml's"
mk-yaml --quiet --processes --quantize mxfp4 f32.yml procs
cmp procs/model.safetensors q-f32/model.safetensors || fail "mk-yaml --processes --quantize mxfp4 differs"
# chunks that end mid-row and mid-group (1 KiB: 256 float32 values, rows
# of 64 and 192)
mk-fetch --chunk-size 1KiB < plan.mks | mk-merge | mk-pack --quantize mxfp4 small
cmp small/model.safetensors q-f32/model.safetensors || fail "1 KiB chunks: the quantized merge differs"

# mk-multi: each merge quantized, the next reading it dequantized
printf 'name: first\nmerge_method: linear\nmodels:\n  - model: a\n    parameters: {weight: 0.3}\n  - model: b\n    parameters: {weight: 0.7}\ndtype: bfloat16\n---\nmerge_method: linear\nmodels:\n  - model: first\n    parameters: {weight: 0.5}\n  - model: a\n    parameters: {weight: 0.5}\ndtype: bfloat16\n' > multi.yml
mk-multi --quiet --quantize mxfp4 multi.yml -I mm --out-path mfinal
cmp mm/first/model.safetensors q-bf16/model.safetensors || fail "mk-multi --quantize: the first merge differs from mk-yaml's"
printf 'merge_method: linear\nmodels:\n  - model: q-bf16\n    parameters: {weight: 0.5}\n  - model: a\n    parameters: {weight: 0.5}\ndtype: bfloat16\n' > second.yml
mk-yaml --quiet --quantize mxfp4 second.yml second
cmp mfinal/model.safetensors second/model.safetensors || fail "mk-multi --quantize: the final merge differs from mk-yaml's"

# the checker sees a fault: one code byte changed
cp -r q-bf16 broken
python3 - broken/model.safetensors <<'PY'
import json, struct, sys
f = open(sys.argv[1], "r+b")
n = struct.unpack("<Q", f.read(8))[0]
h = json.loads(f.read(n))
off = 8 + n + h["model.layers.1.mlp.experts.down_proj_blocks"]["data_offsets"][0] + 7
f.seek(off); b = f.read(1); f.seek(off); f.write(bytes([b[0] ^ 0x10]))
PY
if $MX broken plain-bf16 > /dev/null; then fail "mk-mxfp4-check missed a changed code"; fi

# mk reads its output back dequantized: within MXFP4's rounding of the
# plain merge (FP4's steps are at most 2 apart, so a value is at most its
# group's scale 2^k from the plain one), and not equal to it
printf 'merge_method: passthrough\nmodels:\n  - model: q-bf16\n' > back.yml
mk-yaml --quiet back.yml back
python3 - back plain-bf16 q-bf16 <<'PY' || fail "re-read output not within MXFP4 rounding of the plain merge"
import json, os, struct, sys
def load(d):
    f = open(os.path.join(d, "model.safetensors"), "rb")
    h = json.loads(f.read(struct.unpack("<Q", f.read(8))[0])); data = f.read()
    return {k: (v["shape"], data[v["data_offsets"][0]:v["data_offsets"][1]]) for k, v in h.items() if k != "__metadata__"}
def bf16(raw):
    h = struct.unpack("<%dH" % (len(raw) // 2), raw)
    return struct.unpack("<%df" % len(h), struct.pack("<%dI" % len(h), *[x << 16 for x in h]))
B, P, Q = load(sys.argv[1]), load(sys.argv[2]), load(sys.argv[3])
worst, n, moved = 0.0, 0, 0
for k, (shape, raw) in P.items():
    if k + "_scales" not in Q:
        assert B[k] == (shape, raw), k + " changed"
        continue
    E, C, R = shape
    b, p, sc = bf16(B[k][1]), bf16(raw), Q[k + "_scales"][1]
    for i in range(len(p)):
        e, c, r = i // (C * R), i // R % C, i % R
        step = 2.0 ** (sc[(e * R + r) * (C // 32) + c // 32] - 127)
        worst = max(worst, abs(b[i] - p[i]) / step)
        moved += b[i] != p[i]
    n += 1
assert n == 4 and moved, (n, moved)
assert worst <= 1.0, "a value %.3f scales from the plain merge" % worst
print("re-read: %d weights within %.3f of their groups' scale, %d values moved" % (n, worst, moved))
PY

# refused: the other format, a donor that was not MXFP4, --resume
expect_fail 1 "write them so with --quantize mxfp4" mk-yaml --quiet --quantize fp8 f32.yml x8
no_out x8
lin p.yml plainsrc a float32
expect_fail 1 "marks no weight as quantized" mk-yaml --quiet --quantize mxfp4 p.yml pq
no_out pq
# (that merge of an unquantized and an MXFP4 model is the merge with the
# dequantized copy, in 1 KiB chunks too)
mk-yaml --quiet p.yml mixed
printf 'merge_method: passthrough\nmodels:\n  - model: a\n' > pa.yml
mk-yaml --quiet pa.yml pa
lin p2.yml plainsrc pa float32
mk-yaml --quiet p2.yml mixed-dq
mk-st-diff mixed mixed-dq > /dev/null || fail "BF16 + MXFP4 differs from BF16 + the dequantized model"
mk-plan p.yml | mk-fetch --chunk-size 1KiB | mk-merge | mk-pack mixed-small
mk-st-diff mixed-small mixed-dq > /dev/null || fail "BF16 + MXFP4 in 1 KiB chunks differs"
expect_fail 2 "expected fp8 or mxfp4" mk-pack --quantize int4 x
expect_fail 1 "cannot be combined" mk-yaml --quiet --quantize mxfp4 --resume f32.yml rs
expect_fail 2 "not an option of mk-moe" mk-moe --quantize mxfp4 f32.yml x

# memory: an expert's codes and a group-row at a time.  gate_up_proj of
# 2 x 1024 x 4096 (32 MiB as float32) merged by one merge thread: mk-pack
# holds a group-row (32 x 4096 float32) and the expert's codes and scales
# (4096 x 512 + 4096 x 32 bytes): 2752512 bytes
M="--arch gpt_oss --quantized mxfp4 --dtype BF16 --hidden 1024 --inter 2048 --experts 2 --layers 1 --vocab 16 --heads 8 --kv-heads 8"
mk-gen-model $M --seed 1 m1 > /dev/null
mk-gen-model $M --seed 2 m2 > /dev/null
lin m.yml m1 m2 bfloat16
mk-plan --max-memory 16M m.yml > m.mks
mk-fetch --max-memory 24M -i m.mks | mk-merge -j 1 --max-memory 16M |
	mk-rss k.rss mk-pack -v --max-memory 16M --quantize mxfp4 mout 2> pack.txt
grep -q 'at most 2.8 MB of block-rows held' pack.txt || { cat pack.txt; fail "mk-pack held other than a group-row and an expert's codes"; }
rss_under k.rss 40960 "mk-pack --quantize mxfp4, 32 MiB experts in 16M"

# block-FP8 experts stored one by one (DeepSeek-V3's release), fused in
# the output (transformers v5): --quantize fp8 writes them as the donor
# stores them, each expert's gate_proj / up_proj / down_proj a block-FP8
# tensor with its weight_scale_inv (the form transformers reads FP8 in),
# bit for bit the plain merge's fused experts cut apart and quantized
for s in 1 2; do mk-gen-arch --unfused 2 --quantized fp8 --quant-block 4 --seed $s deepseek_v3 d$s > /dev/null; done
lin d.yml d1 d2 float32
mk-yaml --quiet d.yml dplain 2> /dev/null
mk-yaml --quiet --quantize fp8 d.yml dq 2> /dev/null
mk-plan d.yml 2> /dev/null | grep -aq '"requant":"fp8","requant_parts":\["model.layers.1.mlp.experts.0.gate_proj.weight","model.layers.1.mlp.experts.0.up_proj.weight","model.layers.1.mlp.experts.1.gate_proj.weight"' ||
	fail "the plan does not give gate_up_proj's parts, in the sources' order"
python3 - dplain dsplit <<'PY' || fail "cannot split the plain merge's experts"
import json, os, shutil, struct, sys
src, dst = sys.argv[1], sys.argv[2]
shutil.copytree(src, dst)
f = open(os.path.join(src, "model.safetensors"), "rb")
h = json.loads(f.read(struct.unpack("<Q", f.read(8))[0])); data = f.read()
out = {}
for k, v in h.items():
    if k == "__metadata__":
        continue
    raw = data[v["data_offsets"][0]:v["data_offsets"][1]]
    pre, _, last = k.rpartition(".")
    if last in ("gate_up_proj", "down_proj") and pre.endswith("experts"):
        E, R, C = v["shape"]
        parts = ["gate_proj", "up_proj"] if last == "gate_up_proj" else ["down_proj"]
        pr = R // len(parts)
        for e in range(E):
            for i, nm in enumerate(parts):
                a = ((e * R) + i * pr) * C * 4
                out["%s.%d.%s.weight" % (pre, e, nm)] = ("F32", [pr, C], raw[a:a + pr * C * 4])
    else:
        out[k] = (v["dtype"], v["shape"], raw)
hdr, off, blobs = {}, 0, []
for k in sorted(out):
    dt, sh, raw = out[k]
    hdr[k] = {"dtype": dt, "shape": sh, "data_offsets": [off, off + len(raw)]}
    off += len(raw); blobs.append(raw)
hb = json.dumps(hdr).encode()
with open(os.path.join(dst, "model.safetensors"), "wb") as g:
    g.write(struct.pack("<Q", len(hb))); g.write(hb); g.write(b"".join(blobs))
PY
python3 "$MK_TOP/test/tools/mk-fp8-check.py" dq dsplit 4 4 > chk-d.txt || { cat chk-d.txt; fail "FP8 experts: not the plain merge quantized"; }
cat chk-d.txt
grep -q '^mk-fp8-check: 24 tensors quantized bit for bit' chk-d.txt || fail "expected 24 weights (12 of them experts' parts) quantized"
# read back: fused again, within FP8's rounding of the plain merge
printf 'merge_method: passthrough\nmodels:\n  - model: dq\n' > dback.yml
mk-yaml --quiet dback.yml dback 2> /dev/null
mk-st-compare --tol 0.004 dback dplain > cmp-d.txt || { cat cmp-d.txt; fail "re-read FP8 experts not near the plain merge"; }
grep -q 'experts.gate_up_proj ' cmp-d.txt || fail "the re-read fused experts not compared"
echo "requant-mxfp4: ok"
