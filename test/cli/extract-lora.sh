# mk-extract-lora: adapters against mergekit-extract-lora 0.1.5's
# (testdata/extract-lora, scripts/extract-lora-golden.py; compared by
# test/tools/mk-adapter-compare.py: adapter_config.json's r, lora_alpha,
# rank_pattern, alpha_pattern, target_modules and modules_to_save, the
# tensor names, dtypes and shapes, each module's B·A within 1e-5 relative
# Frobenius error of mergekit's in float32 (the issue's bar is 1e-4; 9e-7
# measured) and 2^-8 in bfloat16 (one rounding of the factors; 5.5e-6
# measured), modules saved whole and bias changes bit for bit); the
# adapter applied by mk-yaml (BASE+OUT) against W + B·A computed in Python
# and against the fine-tune at full rank (1e-6); an adapter read back as BASE+ADAPTER input;
# randomized errors within 1.1x the exact ones; refusals before any
# weight is read; the stages' peak RSS within --max-memory.
. "$MK_TOP/test/cli/lib.inc"
command -v python3 >/dev/null 2>&1 || exit 77
cmp_adapter() { python3 "$MK_TOP/test/tools/mk-adapter-compare.py" "$@"; }
json_get() {   # json_get FILE EXPR: a value of the JSON document j
	python3 -c 'import json, sys; j = json.load(open(sys.argv[1])); print(eval(sys.argv[2]))' "$1" "$2"
}

# --- mergekit's adapters.  Where mergekit crashes on --save-module
# (golden/CASE/patched: its output with that mended) or writes nothing
# usable, mk's deliberate answers (mk-compat(7)).
td=$MK_TOP/testdata/extract-lora
refusal() {
	case $1 in
	llama-same) echo "the same model" ;;
	llama-include-nothing) echo "no module to decompose" ;;
	llama-sv-epsilon-all) echo "do not differ in any module decomposed" ;;
	esac
}
n=0
while read -r case base ft flags; do
	case $case in '#'*|'') continue ;; esac
	rm -rf "out-$case"
	set +e
	# shellcheck disable=SC2086
	(cd "$td/models" && mk-extract-lora --quiet --model "$ft" --base-model "$base" --out-path "$OLDPWD/out-$case" \
		$flags) 2> err.txt
	rc=$?
	set -e
	want=$(refusal "$case")
	if [ -n "$want" ]; then
		[ "$rc" = 1 ] && grep -qF -- "$want" err.txt || { cat err.txt >&2; fail "$case: expected a refusal ($want)"; }
		no_out "out-$case"
		echo "$case: refused as mk-compat(7) says ($want)"
	else
		[ "$rc" = 0 ] || { cat err.txt >&2; fail "$case: mk-extract-lora failed"; }
		g=$td/golden/$case
		[ -f "$g/adapter_config.json" ] || g=$g/patched
		printf '%s: ' "$case"
		cmp_adapter --order --tol 1e-5 --bf16-tol 0.00390625 "out-$case" "$g" || fail "$case: the adapter differs from mergekit's"
	fi
	n=$((n + 1))
done < "$td/CASES"
[ "$n" -ge 29 ] || fail "only $n cases in $td/CASES"
# the tied models' adapters, mk's and mergekit's, applied by mk-yaml: the
# fine-tune at full rank (an adapter without lora_bias loses the bias
# changes: mergekit's qwen2 ones, and mk's beside an embedding's LoRA,
# where PEFT refuses lora_bias; their other tensors are checked)
for case in qwen2-default qwen2-embed-lora gemma2-default gemma2-embed-lora; do
	m=${case%%-*}
	for a in "out-$case" "$td/golden/$case"; do
		case $a in /*) ;; *) a=$PWD/$a ;; esac
		printf 'merge_method: passthrough\nmodels:\n  - model: %s/models/%s-base+%s\n' "$td" "$m" "$a" > tied.yml
		rm -rf tied
		mk-yaml --quiet tied.yml tied 2> err.txt || { cat err.txt >&2; fail "$case: mk-yaml refuses $a"; }
		only=
		case $a in "$td"/golden/qwen2* | */out-qwen2-embed-lora) only="--only weight" ;; esac
		# shellcheck disable=SC2086
		mk-st-compare --tol 1e-6 $only tied "$td/models/$m-ft" > cmp.txt ||
			{ cat cmp.txt >&2; fail "$case: $a applied is not the fine-tune"; }
	done
done

# --- generated pairs: float32, every weight changed
gen() { mk-gen-model --dtype F32 --layers 2 --hidden 16 --inter 32 --vocab 32 "$@" > /dev/null; }
gen --seed 11 b
gen --seed 12 f
mk-extract-lora -q --model f --base-model b --out-path full
[ "$(json_get full/adapter_config.json 'j["r"]')" = 16 ] || fail "full rank: r is not 16"
[ ! -e full.mk-partial ] || fail "full.mk-partial left after success"
# BASE+OUT through mk-yaml: W + B·A as computed here, and the fine-tune
printf 'merge_method: passthrough\nmodels:\n  - model: b+full\n' > apply.yml
mk-yaml --quiet apply.yml applied
python3 "$MK_TOP/test/tools/mk-lora-check.py" b full applied || fail "mk-yaml applies the adapter otherwise"
mk-st-compare --tol 1e-6 applied f > cmp.txt || { cat cmp.txt >&2; fail "b+full is not f at full rank"; }

# a rank-4 adapter, read back as the fine-tune: the same products
mk-extract-lora -q --model f --base-model b --out-path r4 --max-rank 4
mk-extract-lora -q --model b+r4 --base-model b --out-path r4again --max-rank 4
printf 'b+r4 again: '
cmp_adapter r4again r4 || fail "an adapter extracted from BASE+ADAPTER differs from that adapter"
[ "$(json_get r4/adapter_config.json 'j["r"]')" = 4 ] || fail "--max-rank 4: r is not 4"

# the report: each module's rank and error, measured
[ "$(json_get r4/extraction_report.json 'len(j["modules"])')" = 14 ] || fail "the report lacks modules"
python3 - r4/extraction_report.json full/extraction_report.json <<'PY' || fail "the report's errors are wrong"
import json, sys
r4, full = (json.load(open(p)) for p in sys.argv[1:])
for m in r4["modules"]:
    assert m["rank"] == 4 and 0.05 < m["relative_error"] < 1, m
for m in full["modules"]:
    assert m["rank"] == 16 and m["relative_error"] < 1e-5, m
PY

# --sv-epsilon past every singular value: nothing to write
expect_fail 1 "do not differ in any module decomposed" mk-extract-lora --model f --base-model b --out-path none \
	--sv-epsilon 1e9
no_out none

# --- refusals, before any weight is read
gen --seed 13 --layers 3 f3
expect_fail 1 "required but not present in model 'b'" mk-extract-lora --model f3 --base-model b --out-path x
no_out x
expect_fail 1 "the same model" mk-extract-lora --model b --base-model b --out-path x
expect_fail 1 "--include-regex '(': missing closing parenthesis" mk-extract-lora --model f --base-model b \
	--out-path x -i '('
expect_fail 1 "no module to decompose" mk-extract-lora --model f --base-model b --out-path x -i nothing_matches
expect_fail 2 "--model, --base-model and --out-path are required" mk-extract-lora --model f --out-path x
expect_fail 2 "--max-rank" mk-extract-lora --model f --base-model b --out-path x --max-rank 0
expect_fail 1 "exists" mk-extract-lora --model f --base-model b --out-path full
no_out x
mk-extract-lora -q --model f --base-model b --out-path full --force --max-rank 2
[ "$(json_get full/adapter_config.json 'j["r"]')" = 2 ] || fail "--force did not replace OUT"

# --- larger matrices: the budget, randomized against exact
mk-gen-model --dtype F32 --layers 1 --hidden 512 --inter 1024 --vocab 64 --seed 21 B > /dev/null
mk-gen-model --dtype F32 --layers 1 --hidden 512 --inter 1024 --vocab 64 --seed 22 F > /dev/null
expect_fail 1 "more than the merge budget" mk-extract-lora --model F --base-model B --out-path x --max-memory 40M
err_has "model.layers.0.mlp.down_proj.weight" "the refusal does not name the weight"
no_out x
mk-extract-lora -q --model F --base-model B --out-path ex --max-rank 24
mk-extract-lora -q --model F --base-model B --out-path rnd --max-rank 24 --randomized
python3 - ex/extraction_report.json rnd/extraction_report.json <<'PY' || fail "randomized is more than 1.1x exact"
import json, sys
ex, rnd = (json.load(open(p)) for p in sys.argv[1:])
assert rnd["mode"] == "randomized" and ex["mode"] == "exact"
worst = 0
for a, b in zip(ex["modules"], rnd["modules"]):
    assert a["module"] == b["module"] and a["rank"] == b["rank"] == 24
    worst = max(worst, b["relative_error"] / a["relative_error"])
print("randomized / exact error: worst %.4f" % worst)
assert worst <= 1.1
PY

# the peak RSS of mk-extract-lora (planning) and of the stages it runs
# then, together, within --max-memory; its last step (the adapter's copy,
# after the stages) alone
mem=64M
mk-rss p.rss mk-extract-lora --print-pipeline --max-memory $mem --model F --base-model B --out-path memout > pipe.txt
set -- $(tr ' ' '\n' < pipe.txt | grep -A1 -e '--max-memory' | grep -v -e '--max-memory' -e '^--$')
plan=$(tr ' ' '\n' < pipe.txt | grep -A1 -e '^-i$' | tail -1)
mk-rss f.rss mk-fetch --max-memory "$1" -i "$plan" | mk-rss m.rss mk-merge --max-memory "$2" |
	mk-rss k.rss mk-pack --basename adapter_model --max-memory "$3" memout
rm -rf "$(dirname "$plan")"
echo "$(( $(cat p.rss) + $(cat f.rss) + $(cat m.rss) + $(cat k.rss) ))" > sum.rss
echo "planning $(cat p.rss) KiB, mk-fetch $(cat f.rss), mk-merge $(cat m.rss), mk-pack $(cat k.rss)"
rss_under sum.rss $((64 * 1024)) "mk-extract-lora's plan and the stages at --max-memory $mem"
mk-rss one.rss mk-extract-lora -q --max-memory $mem --model F --base-model B --out-path memout2
rss_under one.rss $((64 * 1024)) "mk-extract-lora at --max-memory $mem (its largest process)"
