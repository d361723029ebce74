# Conformance with mergekit 0.1.5, offline: every test/conformance/*.yml
# merged by mk against the golden outputs scripts/conformance stored from
# mergekit (testdata/golden/CASE), with the tolerance the case's first line
# states (see scripts/conformance).
. "$MK_TOP/test/cli/lib.inc"
conformance_scratch conf
n=0
for cfg in test/conformance/*.yml; do
	case=$(basename "$cfg" .yml)
	g=testdata/golden/$case
	[ -d "$g" ] || fail "no golden files for $case (run scripts/conformance --refresh)"
	mk-yaml --quiet "$cfg" "$out/$case"
	args=$(conformance_tol_args "$cfg")
	grep -q '^tokenizer' "$cfg" && args="$args --by-token" # rows by token: see scripts/conformance
	mk-st-compare $args "$out/$case" "$g" > "$out/$case.txt" || { cat "$out/$case.txt"; fail "$case: tensors differ from mergekit's"; }
	# the same card lines (mergekit orders the models by hash, mk by plan)
	sort "$out/$case/README.md" > "$out/a"; sort "$g/README.md" > "$out/b"
	cmp -s "$out/a" "$out/b" || { diff "$out/$case/README.md" "$g/README.md"; fail "$case: README.md differs"; }
	if command -v python3 >/dev/null 2>&1; then
		python3 - "$out/$case/config.json" "$g/config.json" <<'PY' || fail "$case: config.json differs"
import json, sys
mk, ref = (json.load(open(p)) for p in sys.argv[1:])
bad = [k for k in mk if k not in ("torch_dtype", "dtype") and mk[k] != ref.get(k)]
# dtype: the tensors' (mergekit keeps the donor's even when the tensors
# promoted to another, mk-compat(7)); checked against the golden tensors
import os, struct
st = os.path.join(os.path.dirname(sys.argv[2]), "model.safetensors")
if "dtype" in mk and os.path.exists(st):
    with open(st, "rb") as f:
        h = json.loads(f.read(struct.unpack("<Q", f.read(8))[0]))
    names = {"F32": "float32", "BF16": "bfloat16", "F16": "float16", "F64": "float64"}
    got = {names.get(v["dtype"]) for k, v in h.items() if k != "__metadata__" and v["dtype"] in names}
    if len(got) == 1 and mk["dtype"] not in got:
        bad.append("dtype (the tensors are %s)" % got.pop())
sys.exit(f"keys differing from mergekit's: {bad}" if bad else 0)
PY
	fi
	# a tokenizer case: the same vocabulary and added tokens as mergekit's
	if grep -q '^tokenizer' "$cfg" && command -v python3 >/dev/null 2>&1 && [ ! -e "$out/$case/tokenizer.json" ]; then
		# a SentencePiece tokenizer.model alone (copied): mk-st-compare
		# --by-token found every token of mergekit's in it; the added
		# tokens mk lists in tokenizer_config.json are mergekit's
		python3 - "$out/$case/tokenizer_config.json" "$g/tokenizer.json" <<'PY' || fail "$case: the added tokens differ from mergekit's"
import json, sys
cfg, ref = (json.load(open(p)) for p in sys.argv[1:])
flags = lambda t: (t["special"], t["normalized"], t["lstrip"], t["rstrip"], t["single_word"])
ref_by = {t["content"]: (t["id"], flags(t)) for t in ref["added_tokens"]}
mk_by = {t["content"]: (int(i), flags(t)) for i, t in cfg.get("added_tokens_decoder", {}).items()}
bad = [c for c in mk_by if c not in ref_by or mk_by[c][1] != ref_by[c][1]]
# ids: equal, but for a union's new plain tokens (hash order in mergekit's)
moved = [c for c in mk_by if c not in bad and mk_by[c][0] != ref_by[c][0]]
if bad or any(mk_by[c][1][0] for c in moved) or sorted(mk_by[c][0] for c in moved) != sorted(ref_by[c][0] for c in moved):
    sys.exit("added tokens differ: %s %s" % (bad, moved))
PY
	elif grep -q '^tokenizer' "$cfg" && command -v python3 >/dev/null 2>&1; then
		python3 - "$out/$case/tokenizer.json" "$g/tokenizer.json" <<'PY' || fail "$case: the tokenizer differs from mergekit's"
import json, sys
mk, ref = (json.load(open(p)) for p in sys.argv[1:])
if mk["model"]["vocab"] != ref["model"]["vocab"]:
    sys.exit("model.vocab differs")
flags = lambda t: (t["content"], t["special"], t["normalized"], t["lstrip"], t["rstrip"], t["single_word"])
if sorted(map(flags, mk["added_tokens"])) != sorted(map(flags, ref["added_tokens"])):
    sys.exit("added_tokens differ")
# the ids: equal, but for a union's new plain tokens, which mergekit
# numbers in hash-set order (scripts/conformance, mk-compat(7))
ia, ib = ({t["content"]: t["id"] for t in x["added_tokens"]} for x in (mk, ref))
plain = {t["content"] for t in ref["added_tokens"] if not t["special"]}
moved = [c for c in ia if ia[c] != ib[c]]
if not set(moved) <= plain or sorted(ia[c] for c in moved) != sorted(ib[c] for c in moved):
    sys.exit("added token ids differ: %s" % moved)
PY
	fi
	n=$((n + 1))
done
echo "$n cases agree with mergekit"
[ $n -ge 8 ] || fail "only $n conformance cases"
