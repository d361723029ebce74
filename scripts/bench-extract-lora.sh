#!/bin/sh
# bench-extract-lora.sh - mk-extract-lora, exact and randomized, against
# mergekit-extract-lora 0.1.5 on a pair with 7B-sized layers.  A
# benchmark, not a test: it reports, never asserts.
#
#   sh scripts/bench-extract-lora.sh      (after `make`)
#
# The pair: mk-gen-model's base (hidden 4096, intermediate 14336, 32
# heads and 8 KV heads, so q/o_proj are 4096x4096, k/v_proj 1024x4096,
# gate/up_proj 14336x4096 and down_proj 4096x14336; BF16) and a fine-tune
# of it made here: each layer matrix plus a rank-RANK change with
# singular values falling from 1 to 0.01 times the weight's scale, plus
# noise of 1e-3 of it; norms moved a little.  mk runs at --max-rank
# MAX_RANK exact and --randomized; mergekit once (exact, torch on the
# CPU).  Each mk row is the median of RUNS runs (farm-bench); the table
# gives wall seconds, peak RSS of the largest process, and per module the
# relative error (mk's report) and mk's B·A against mergekit's.
#
# Environment: BUILD (build), PYTHON (a python3 with numpy: Debian's
# /usr/bin/python3 after `make deps`), LAYERS (2), RANK (64), MAX_RANK (128),
# RUNS (3), MERGEKIT_VENV (~/.cache/mk/mergekit-0.1.5-venv; no venv: no
# mergekit row), WORK (a scratch directory, /tmp/mk-bench-extract).
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${BUILD:-$top/build}
LAYERS=${LAYERS:-2}
RANK=${RANK:-64}
MAX_RANK=${MAX_RANK:-128}
RUNS=${RUNS:-3}
VENV=${MERGEKIT_VENV:-$HOME/.cache/mk/mergekit-0.1.5-venv}
PYTHON=${PYTHON:-/usr/bin/python3}
WORK=${WORK:-/tmp/mk-bench-extract}
PATH=$BUILD/bin:$BUILD/tools:$PATH
export PATH
mkdir -p "$WORK"
cd "$WORK"

echo "# $(date -u +%Y-%m-%d), $(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2 / 1048576}' /proc/meminfo),"\
" $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
if [ ! -f ft/model.safetensors ]; then
	rm -rf base ft
	mk-gen-model --dtype BF16 --layers "$LAYERS" --hidden 4096 --inter 14336 --heads 32 --kv-heads 8 \
		--vocab 1024 --seed 7 base > /dev/null
	"$PYTHON" - base ft "$RANK" <<'PY'
import json, os, shutil, struct, sys
import numpy as np
src, dst, rank = sys.argv[1], sys.argv[2], int(sys.argv[3])
shutil.copytree(src, dst)
with open(src + "/model.safetensors", "rb") as f:
    n = struct.unpack("<Q", f.read(8))[0]
    head = f.read(n)
    data = bytearray(f.read())
h = json.loads(head)
rng = np.random.default_rng(7)
def bf16_to_f32(u):
    return (u.astype(np.uint32) << 16).view(np.float32)
def f32_to_bf16(x):
    b = x.view(np.uint32)
    return ((b + 0x7FFF + ((b >> 16) & 1)) >> 16).astype(np.uint16)
for k, v in h.items():
    if k == "__metadata__" or ".layers." not in k:
        continue
    b, e = v["data_offsets"]
    w = bf16_to_f32(np.frombuffer(bytes(data[b:e]), np.uint16)).reshape(v["shape"])
    scale = float(np.abs(w).mean()) or 1e-3
    if w.ndim == 2:
        m, nn = w.shape
        u = np.linalg.qr(rng.standard_normal((m, rank), dtype=np.float32))[0]
        vt = np.linalg.qr(rng.standard_normal((nn, rank), dtype=np.float32))[0].T
        s = scale * np.sqrt(m * nn) * np.geomspace(1, 0.01, rank).astype(np.float32) / rank
        w = w + (u * s) @ vt + 1e-3 * scale * rng.standard_normal(w.shape, dtype=np.float32)
    else:
        w = w + 0.01 * scale * rng.standard_normal(w.shape, dtype=np.float32)
    data[b:e] = f32_to_bf16(w.astype(np.float32).ravel()).tobytes()
with open(dst + "/model.safetensors", "wb") as f:
    f.write(struct.pack("<Q", n) + head + bytes(data))
PY
fi
echo "# pair: $(du -sh base | cut -f1) each, $LAYERS layers, planted rank $RANK, --max-rank $MAX_RANK"
cat base/model.safetensors ft/model.safetensors > /dev/null   # in the page cache, for every run

median() { sort -n | awk '{a[NR] = $1} END {print a[int((NR + 1) / 2)]}'; }
run_mk() {   # run_mk NAME FLAGS...: RUNS timed runs, median wall s and peak RSS
	name=$1
	shift
	: > "$name.times"
	i=0
	while [ $i -lt "$RUNS" ]; do
		rm -rf "$name"
		/usr/bin/time -f '%e %M' -o t.txt mk-extract-lora -q --model ft --base-model base --out-path "$name" \
			--max-rank "$MAX_RANK" "$@" 2>> "$name.err"
		cat t.txt >> "$name.times"
		i=$((i + 1))
	done
	echo "$(cut -d' ' -f1 "$name.times" | median) $(cut -d' ' -f2 "$name.times" | median)"
}
set -- $(run_mk exact)
ex_s=$1 ex_kb=$2
set -- $(run_mk rnd --randomized)
rn_s=$1 rn_kb=$2
mk_s=- mk_kb=- cmp=-
if [ -x "$VENV/bin/mergekit-extract-lora" ]; then
	rm -rf mergekit
	# (paths with a slash: a bare name is looked up on the Hub for the card)
	HF_HUB_OFFLINE=1 /usr/bin/time -f '%e %M' -o t.txt "$VENV/bin/mergekit-extract-lora" --model "$WORK/ft" \
		--base-model "$WORK/base" --out-path mergekit --max-rank "$MAX_RANK" > mergekit.log 2>&1 || true
	set -- $(tail -n 1 t.txt)
	mk_s=$1 mk_kb=$2
fi
"$PYTHON" - exact rnd mergekit <<'PY' > quality.txt
import json, os, struct, sys
import numpy as np
ex, rnd = (json.load(open(d + "/extraction_report.json")) for d in sys.argv[1:3])
ratio = max(b["relative_error"] / a["relative_error"] for a, b in zip(ex["modules"], rnd["modules"]))
worst = max(a["relative_error"] for a in ex["modules"])
def load(d):
    with open(d + "/adapter_model.safetensors", "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]; h = json.loads(f.read(n)); data = f.read()
    out = {}
    for k, v in h.items():
        if k == "__metadata__": continue
        b, e = v["data_offsets"]
        raw = np.frombuffer(data[b:e], np.uint16 if v["dtype"] == "BF16" else np.float32)
        x = (raw.astype(np.uint32) << 16).view(np.float32) if v["dtype"] == "BF16" else raw
        out[k] = x.reshape(v["shape"]).astype(np.float64)
    return out
vs = "-"
if os.path.exists(sys.argv[3] + "/adapter_model.safetensors"):
    g, r = load(sys.argv[1]), load(sys.argv[3])
    e = 0.0
    for k in g:
        if ".lora_A." in k:
            kb = k.replace(".lora_A.", ".lora_B.")
            pg, pr = g[kb] @ g[k], r[kb] @ r[k]
            e = max(e, float(np.linalg.norm(pg - pr) / np.linalg.norm(pr)))
    vs = "%.2g" % e
print("%.3g %.4f %s" % (worst, ratio, vs))
PY
set -- $(cat quality.txt)
echo
echo "| run | wall s | peak RSS MiB | x mergekit |"
echo "|---|---|---|---|"
speed() { [ "$mk_s" = - ] && echo - || echo "$mk_s $1" | awk '{printf "%.1fx", $1 / $2}'; }
echo "| mergekit-extract-lora (exact) | $mk_s | $( [ "$mk_kb" = - ] && echo - || echo $((mk_kb / 1024))) | 1 |"
echo "| mk-extract-lora (exact) | $ex_s | $((ex_kb / 1024)) | $(speed "$ex_s") |"
echo "| mk-extract-lora --randomized | $rn_s | $((rn_kb / 1024)) | $(speed "$rn_s") |"
echo
echo "exact: largest module error $1; randomized error / exact error at the same rank: at most $2;"
echo "mk's exact B·A against mergekit's: largest relative Frobenius difference $3"
