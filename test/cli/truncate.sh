# --unsafe-truncate-embeddings (mergekit-yaml 0.1.5's option): models
# whose vocabularies differ in size merged over the rows they all have.
# The cases of testdata/truncate/ against mergekit's outputs stored there
# (float32, max|mk - mergekit| <= 1e-6 * max(1, max|mergekit|) per tensor,
# as the conformance cases; the shapes and config.json's vocab_size
# exactly), the refusal without the option, the option doing nothing under
# a tokenizer source or a passthrough of slices, and mk-yaml in-process,
# mk-yaml --processes and mk-plan | mk-fetch | mk-merge | mk-pack agreeing
# byte for byte.
. "$MK_TOP/test/cli/lib.inc"
td=$MK_TOP/testdata/truncate

# the input models (testdata/truncate/README): vocabularies of 16, 12, 20
gen() { mk-gen-model --seed "$1" --layers 1 --hidden 8 --inter 16 --vocab "$2" --dtype F32 --bpe-tokenizer "$3" > /dev/null; }
gen 1 16 a
gen 2 12 b
gen 3 20 c
if command -v sha256sum > /dev/null 2>&1; then
	sha256sum a/model.safetensors b/model.safetensors c/model.safetensors > sums.txt
	while read -r sum name; do
		grep -q "^$sum  $name\$" sums.txt ||
			fail "mk-gen-model no longer makes $name as when the golden files were made (testdata/truncate/README)"
	done <<EOF
cab9b939e5750be8f86a94994766a37056cd869510cc4f378507e6984cd9f833 a/model.safetensors
75e96b69cca4ecb749302506596dbcd7e56a808a09799fa175d4cd9b8ed18e81 b/model.safetensors
1362facc2610cf5a3b30d0b900fc2037f57bd00bdb653e6d9143db018c2d329b c/model.safetensors
EOF
fi

# vocab N DIR: DIR/config.json says vocab_size N
vocab() {
	grep -q "\"vocab_size\": *$1[,}]*\$" "$2/config.json" || { cat "$2/config.json" >&2; fail "$2: vocab_size is not $1"; }
}
golden_vocab() { sed -n 's/.*"vocab_size": *\([0-9]*\).*/\1/p' "$1/config.json"; }

# --- the golden cases: mk's output is mergekit's
n=0
for cfg in "$td"/*.yml; do
	case=$(basename "$cfg" .yml)
	g=$td/golden/$case
	cp "$cfg" "$case.yml"
	mk-yaml --quiet --unsafe-truncate-embeddings "$case.yml" "out-$case" 2> err.txt ||
		{ cat err.txt >&2; fail "$case: refused with --unsafe-truncate-embeddings"; }
	# both ways: every tensor of each in the other, of the same shape
	mk-st-compare --tol 1e-6 "out-$case" "$g" > cmp.txt || { cat cmp.txt; fail "$case: tensors differ from mergekit's"; }
	mk-st-compare --tol 1e-6 "$g" "out-$case" > cmp.txt || { cat cmp.txt; fail "$case: mergekit has tensors mk lacks"; }
	vocab "$(golden_vocab "$g")" "out-$case"
	case $case in
	tokenizer-source)
		# a tokenizer source aligns the vocabularies: the option does nothing
		grep -q 'cut to their first' err.txt && fail "$case: rows cut under a tokenizer source"
		mk-yaml --quiet "$case.yml" noflag
		cmp "out-$case/model.safetensors" noflag/model.safetensors || fail "$case: the option changed a tokenizer-source merge"
		rm -rf noflag ;;
	*)
		err_has "tensor 'model.embed_tokens.weight':" "$case: no warning for the embeddings"
		err_has "cut to their first 12 rows (--unsafe-truncate-embeddings)" "$case: the warning lacks the rows" ;;
	esac
	n=$((n + 1))
done
[ $n -ge 5 ] || fail "only $n golden cases"
# the golden shapes themselves: 12 rows everywhere but under a tokenizer source
mk-st-compare --tol 1e-6 out-linear "$td/golden/tokenizer-source" > cmp.txt && fail "12 rows compared equal to 16"
grep -q "model.embed_tokens.weight: not in reference 1 (or another size)" cmp.txt || { cat cmp.txt; fail "the embeddings' sizes"; }

# --- the stages agree: in-process, --processes, the pipeline by hand
for case in task-arithmetic linear; do
	mk-yaml --quiet --processes --unsafe-truncate-embeddings "$case.yml" procs 2> err.txt ||
		{ cat err.txt >&2; fail "$case: --processes refused the option"; }
	err_has "cut to their first 12 rows" "$case: mk-plan under mk-yaml --processes said no warning"
	cmp "out-$case/model.safetensors" procs/model.safetensors || fail "$case: --processes differs from in-process"
	mk-plan --unsafe-truncate-embeddings "$case.yml" 2> /dev/null | mk-fetch | mk-merge | mk-pack --no-progress piped
	cmp "out-$case/model.safetensors" piped/model.safetensors || fail "$case: the pipeline differs from mk-yaml"
	cmp "out-$case/config.json" piped/config.json || fail "$case: config.json differs between the pipeline and mk-yaml"
	rm -rf procs piped
done
mk-yaml --print-pipeline --unsafe-truncate-embeddings linear.yml x > pipe.txt
grep -q '^mk-plan --unsafe-truncate-embeddings ' pipe.txt || { cat pipe.txt; fail "--print-pipeline lacks the option"; }
mk-yaml --print-pipeline linear.yml x > pipe.txt
grep -q 'unsafe' pipe.txt && fail "--print-pipeline has the option unasked"
mk-plan --explain --unsafe-truncate-embeddings linear.yml > /dev/null 2> err.txt
err_has "tensor 'lm_head.weight': [16, 8], [12, 8], [20, 8] cut to their first 12 rows" "mk-plan's warning"

# --- without the option: the methods that refuse say what would merge them
for case in task-arithmetic ties; do
	expect_fail 1 "--unsafe-truncate-embeddings cuts every input to its first 12 rows" mk-yaml --quiet "$case.yml" refused
	err_has "tokenizer: {source: base} aligns them" "$case: the refusal names no tokenizer setting"
	err_has "differ in size, 12 to 20 rows" "$case: the refusal says not what differs"
	no_out refused
	expect_fail 1 "--unsafe-truncate-embeddings cuts" mk-plan -o /dev/null "$case.yml"
	expect_fail 1 "--unsafe-truncate-embeddings cuts" mk-plan -o /dev/null --unsafe-truncate-embeddings \
		--no-unsafe-truncate-embeddings "$case.yml"
	expect_fail 1 "--unsafe-truncate-embeddings cuts" mk-yaml --quiet --processes "$case.yml" refused
	no_out refused
done
# linear and slerp rectify as mergekit 0.1.4 (mk-compat(7)): with columns
# of one size, the same rows as the option's
for case in linear slerp; do
	mk-yaml --quiet "$case.yml" plain 2> err.txt
	grep -q 'cut to their first' err.txt && fail "$case: a truncation warning without the option"
	cmp "out-$case/model.safetensors" plain/model.safetensors || fail "$case: 0.1.4's rectifying differs from the option"
	rm -rf plain
done

# --- a passthrough of slices (one model per tensor): nothing to cut
printf 'merge_method: passthrough\nslices:\n  - sources:\n      - model: b\n        layer_range: [0, 1]\n  - sources:\n      - model: a\n        layer_range: [0, 1]\ndtype: float32\n' > pass.yml
mk-yaml --quiet --unsafe-truncate-embeddings pass.yml pass-flag 2> err.txt
grep -q 'cut to their first' err.txt && fail "passthrough: rows cut"
mk-yaml --quiet pass.yml pass-plain
cmp pass-flag/model.safetensors pass-plain/model.safetensors || fail "passthrough: the option changed the output"

# --- rows of another length: the option cuts rows only
mk-gen-model --seed 4 --layers 1 --hidden 12 --inter 16 --vocab 12 --dtype F32 d > /dev/null
printf 'merge_method: linear\nbase_model: a\nmodels:\n  - model: a\n    parameters: {weight: 0.5}\n  - model: d\n    parameters: {weight: 0.5}\n' > wide.yml
expect_fail 1 "[16, 8], [12, 12]: --unsafe-truncate-embeddings cuts the vocabulary rows only; model 'd' differs from model 'a' in its other dimensions" \
	mk-plan -o /dev/null --unsafe-truncate-embeddings wide.yml
# --- mk-multi takes the option for its steps (mergekit-multi's merge options)
cp "$td/task-arithmetic.yml" multi.yml
mk-multi --quiet --unsafe-truncate-embeddings multi.yml -I inter --out-path multi-out 2> /dev/null ||
	fail "mk-multi --unsafe-truncate-embeddings failed"
mk-yaml --quiet --unsafe-truncate-embeddings "$td/task-arithmetic.yml" yaml-out 2> /dev/null
cmp multi-out/model.safetensors yaml-out/model.safetensors || fail "mk-multi's step differs from mk-yaml's"
expect_fail 1 "unsafe-truncate-embeddings" mk-multi --quiet multi.yml -I inter2 --out-path multi-refused
echo "$n golden cases agree with mergekit; refusals, stages, passthrough and mk-multi checked"
