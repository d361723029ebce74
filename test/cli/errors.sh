# Bad input gets a clear error, exit 1, and nothing that looks complete.
. "$MK_TOP/test/cli/lib.inc"
mk-gen-model --shards 2 --layers 1 --seed 3 m
mk-fetch --model m > good.mks
first=$(ls m/model-00001-of-00002.safetensors)

# --- streams -------------------------------------------------------------
mk-forge ok | mk-pack ok; [ -f ok/model.safetensors ] && [ -f ok/config.json ] || fail "forged ok stream"
mk-forge unknown-ancillary | mk-pack anc; [ -f anc/model.safetensors ] || fail "ancillary frame not passed over"
for case in "unknown-critical:unknown critical frame type 'ZZZZ'" \
	    "plan:this is a 'plan' stream" \
	    "out-of-order:out of order" \
	    "missing-data:incomplete" \
	    "no-end:without an END frame" \
	    "bad-dtype:is F32, chunk is I32" \
	    "bad-file=../evil:'..' component" \
	    "bad-file=/etc/evil:is absolute" \
	    "bad-file=a//b:empty" \
	    "bad-file=model.safetensors:would overwrite a weight file"; do
	k=${case%%:*} msg=${case#*:}
	mk-forge "$k" > s.mks
	expect_fail 1 "$msg" mk-pack -i s.mks out
	no_out out
	[ ! -e evil ] && [ ! -e /etc/evil ] || fail "a FILE frame escaped OUT"
	# mk-cat --verify finds the same faults (bad names, ordering, framing)
	case $k in unknown-ancillary|plan|bad-file=model.safetensors) ;; *) set +e; mk-cat --verify s.mks >/dev/null 2>&1; rc=$?; set -e
		[ $rc -eq 1 ] || fail "mk-cat --verify accepted '$k' ($rc)" ;; esac
done
# truncated streams, at many places, incl. inside the END frame
size=$(wc -c < good.mks)
for cut in 0 10 16 40 100 1000 $((size / 2)) $((size - 100)) $((size - 1)); do
	head -c "$cut" good.mks > cut.mks
	expect_fail 1 "stdin" sh -c 'mk-pack out < cut.mks'
	no_out out
	set +e; mk-cat --verify cut.mks >/dev/null 2>&1; rc=$?; set -e
	[ $rc -eq 1 ] || fail "mk-cat --verify accepted a stream cut at $cut"
done
# a flipped byte anywhere is caught by the frame checksum
for at in 30 200 $((size / 2)) $((size - 20)); do
	cp good.mks bad.mks
	printf '\377' | dd of=bad.mks bs=1 seek="$at" conv=notrunc 2>/dev/null
	cmp -s good.mks bad.mks && continue
	expect_fail 1 "frame #" mk-pack -i bad.mks out
	no_out out
	set +e; mk-cat --verify bad.mks >/dev/null 2>&1; rc=$?; set -e
	[ $rc -eq 1 ] || fail "mk-cat --verify accepted a flipped byte at $at"
done
# bytes after END, and garbage that is not a stream
cat good.mks good.mks > twice.mks
expect_fail 1 "after the END frame" mk-pack -i twice.mks out; no_out out
echo "hello" > text.mks
expect_fail 1 "not an mk stream" mk-pack -i text.mks out; no_out out

# --- checkpoints -----------------------------------------------------------
# a truncated shard: mk-fetch refuses (MetadataIncompleteBuffer) and the
# pipe leaves no OUT
cp -r m t && truncate -s -1 t/model-00001-of-00002.safetensors
expect_fail 1 "MetadataIncompleteBuffer" mk-fetch --model t -o s.mks
[ ! -e s.mks ] || fail "mk-fetch left a partial stream file"
set +e; mk-fetch --model t 2>/dev/null | mk-pack out 2>err.txt; set -e
no_out out
# trailing junk is refused too
cp -r m j && printf 'x' >> j/model-00002-of-00002.safetensors
expect_fail 1 "MetadataIncompleteBuffer" mk-fetch --model j -o s.mks
# a missing shard
cp -r m ms && rm ms/model-00002-of-00002.safetensors
expect_fail 1 "model-00002-of-00002.safetensors" mk-fetch --model ms -o s.mks
# an index naming a shard outside the model directory
cp -r m esc && sed -i 's|"model-00001-of-00002.safetensors"|"../model-00001-of-00002.safetensors"|' esc/model.safetensors.index.json
expect_fail 1 ".." mk-fetch --model esc -o s.mks
# header length beyond the file, and not JSON
cp -r m hl && printf '\377\377\377\377\000\000\000\000' | dd of=hl/$(basename "$first") conv=notrunc 2>/dev/null
expect_fail 1 "HeaderTooLarge" mk-fetch --model hl -o s.mks
cp -r m nj && printf '\010\000\000\000\000\000\000\000[1,2,3] ' > nj/model-00001-of-00002.safetensors
expect_fail 1 "model-00001-of-00002.safetensors" mk-fetch --model nj -o s.mks
# neither local nor cached
HF_HUB_CACHE=$PWD/nocache expect_fail 1 "HF_HUB_OFFLINE=1 forbids downloading it" mk-fetch --model nobody/nothing -o s.mks
expect_fail 1 "not a local directory" mk-fetch --model ./nowhere -o s.mks
# a pytorch_model.bin that is not a torch.save zip: said so, naming it
mkdir bin && echo x > bin/pytorch_model.bin
expect_fail 1 "bin/pytorch_model.bin: not a zip file (no end of central directory): not a torch.save checkpoint" mk-fetch --model bin -o s.mks
# two models sharing tensor names
cp -r m m2
expect_fail 1 "is in both" mk-fetch --model m --model m2 -o s.mks

# --- output --------------------------------------------------------------
mkdir exists
expect_fail 1 "already exists" mk-pack -i good.mks exists
mk-pack --force -i good.mks exists && mk-st-diff m exists
mkdir fresh.mk-partial
expect_fail 1 "did not finish" mk-pack -i good.mks fresh
rmdir fresh.mk-partial; [ ! -e fresh ] || fail "fresh written despite a leftover partial"
if [ "$(id -u)" -ne 0 ]; then
	mkdir ro && chmod 555 ro
	expect_fail 1 "ro/out" mk-pack -i good.mks ro/out
fi
# parents are created (as mergekit), but not through a file
mk-pack -i good.mks new/parent/out && [ -f new/parent/out/config.json ] || fail "parents of OUT not created"
expect_fail 1 "good.mks/out" mk-pack -i good.mks good.mks/out
no_out good.mks/out
# usage errors exit 2
expect_fail 2 "missing output directory" mk-pack -i good.mks
expect_fail 2 "--out-shard-size" mk-pack --out-shard-size 12q out
set +e; script -qec mk-fetch /dev/null > tty.txt 2>&1; rc=$?; set -e
[ $rc -eq 2 ] && grep -q "standard input is a terminal" tty.txt || fail "mk-fetch read a plan from a terminal ($rc)"
expect_fail 2 "unrecognized option" mk-cat --bogus
# a binary stream is never written to (or read from) a terminal
if command -v script >/dev/null 2>&1; then
	set +e
	script -qec "mk-fetch --model m" /dev/null > tty.txt 2>&1; rc=$?
	set -e
	[ $rc -eq 2 ] || fail "mk-fetch to a terminal exited $rc"
	grep -q "refusing to write a binary stream to a terminal" tty.txt || fail "no terminal refusal message"
	set +e
	script -qec "mk-pack out" /dev/null > tty.txt 2>&1 < /dev/null; rc=$?
	set -e
	[ $rc -eq 2 ] && grep -q "refusing to read a binary stream from a terminal" tty.txt || fail "mk-pack read a terminal ($rc)"
	no_out out
fi

# --- configs -----------------------------------------------------------------
# a model reference with an empty path is a config error at its position,
# reported alone (mk-plan used to crash on these, opening the unset model)
bad_ref() {
	printf 'merge_method: linear\nmodels:\n  - model: %s\n  - model: m\n' "$1" > e.yml
	want=$2
	expect_fail 1 "mk-plan: error: e.yml:$want" mk-plan e.yml -o e.mks
	[ "$(grep -c 'error:' err.txt)" -eq 1 ] || { cat err.txt >&2; fail "mk-plan: not one error for model: $1"; }
	[ ! -s e.mks ] || fail "mk-plan wrote a plan for model: $1"
	expect_fail 1 "mk-card: error: e.yml:$want" mk-card e.yml
}
bad_ref '""' "3:12: models[0].model: can't parse model reference '': the model path is empty"
bad_ref '"@main"' "3:12: models[0].model: can't parse model reference '@main': the model path is empty"
bad_ref '"+"' "3:12: models[0].model: can't parse model reference '+': the model path is empty"
bad_ref '"a+"' "3:12: models[0].model: can't parse model reference 'a+' (LoRA part): the model path is empty"
bad_ref '{model: {path: ""}}' "3:27: models[0].model.model: the model path is empty"
bad_ref '{path: ""}' "3:12: models[0].model: missing 'model' in the model reference"

# --- misspelled parameters ---------------------------------------------------
# a setting the method has no parameter for is ignored with a warning at its
# key and the closest name (it used to be ignored silently: defaults merged)
mk-gen-model --layers 1 --seed 4 m2 >/dev/null
cat > p.yml <<'YML'
merge_method: ties
base_model: m
models:
  - model: m
  - model: m2
    parameters: {weight: 1, densty: 0.2}
parameters: {normalise: false}
YML
mk-plan p.yml -o p.mks 2>err.txt || { cat err.txt >&2; fail "mk-plan refused a config with a misspelled parameter"; }
err_has "p.yml:6:29: models[1].parameters.densty: ties has no parameter 'densty'; it is ignored (did you mean 'density'?)" "no warning for densty"
err_has "p.yml:7:14: parameters.normalise: ties has no parameter 'normalise'; it is ignored (did you mean 'normalize'?)" "no warning for normalise"
printf 'merge_method: linear\nmodels:\n  - model: m\n    parameters: {weight: 1, zap: 2}\n  - model: m2\n    parameters: {weight: 1}\n' > p.yml
mk-plan p.yml -o p.mks 2>err.txt
err_has "linear has no parameter 'zap'; it is ignored (linear's are: weight, normalize)" "no warning for zap"
# a global parameter set for one model is ignored (mergekit reads it only
# from the top-level, module and slice parameters): said at its key, and
# the merge is the one without it
printf 'merge_method: linear\nmodels:\n  - model: m\n    parameters: {weight: 1, normalize: false}\n  - model: m2\n    parameters: {weight: 1}\n' > p.yml
mk-plan p.yml -o scoped.mks 2>err.txt
err_has "p.yml:4:29: models[0].parameters.normalize: 'normalize' is one value for all models in linear; set for one model it is ignored (set it in the top-level parameters)" "no warning for a per-model normalize"
printf 'merge_method: slerp\nbase_model: m\nslices:\n  - sources:\n      - model: m\n        layer_range: [0, 1]\n      - model: m2\n        layer_range: [0, 1]\n        parameters: {t: 0.5}\n    parameters: {t: 0.3}\n' > p.yml
mk-plan p.yml -o p.mks 2>err.txt
err_has "p.yml:9:22: slices[0].sources[1].parameters.t: 't' is one value for all models in slerp" "no warning for a per-source t"
[ "$(grep -c warning err.txt)" -eq 1 ] || { cat err.txt >&2; fail "a slice's own t drew a warning"; }
# an integer parameter that is not whole: the method's resolution says
# so, once for the tensors it spoils, not once per tensor
printf 'merge_method: karcher\nmodels:\n  - model: m\n  - model: m2\nparameters: {max_iter: 2.5}\n' > p.yml
expect_fail 1 "parameter 'max_iter' must be an integer (got 2.5)" mk-plan p.yml -o p.mks
[ "$(grep -c "must be an integer" err.txt)" -eq 1 ] || { cat err.txt >&2; fail "a non-integer max_iter said more than once"; }
grep -qF "(the same for" err.txt || { cat err.txt >&2; fail "no count of the other tensors"; }
# a plan whose JOB sets a parameter the method lacks, or at the wrong
# scope (edited, as by another mk): a reader that knows the method says
# which and how as it decodes the JOB, mk-fetch of the plan as mk-merge of
# its inputs
printf 'merge_method: slerp\nbase_model: m\nmodels:\n  - model: m\n  - model: m2\nparameters: {t: 0.5}\n' > p.yml
mk-plan p.yml -o p.mks
mk-fetch < p.mks > p-in.mks
mk-forge 'job-edit="global":{"t":0.5}/"global":{"zap":0.5}' < p.mks > edited.mks
expect_fail 1 "'): slerp has no parameter 'zap' (slerp's are: t); was the plan made by another mk?" \
	mk-fetch -o /dev/null < edited.mks
mk-forge 'job-edit="global":{"t":0.5}/"global":{"zap":0.5}' < p-in.mks > edited-in.mks
expect_fail 1 "slerp has no parameter 'zap' (slerp's are: t)" mk-merge -i edited-in.mks -o /dev/null
mk-forge 'job-edit="global":{"t":0.5},"inputs":[{},{}]/"global":{},"inputs":[{"t":0.5},{"t":0.5}]' < p-in.mks > edited-in.mks
expect_fail 1 "parameter 't' is given per input, but slerp's 't' is one value for all inputs" \
	mk-merge -i edited-in.mks -o x.mks
[ ! -e x.mks ] || fail "a failing mk-merge left its -o file"
# after a failure the -o file is removed only when it is a regular file
# named as such: never a device (a failing mk-merge -o /dev/null once
# removed /dev/null), and through a symlink the file is emptied instead
if mknod nulldev c 1 3 2>/dev/null; then
	expect_fail 1 "is one value for all inputs" mk-merge -i edited-in.mks -o nulldev
	[ -c nulldev ] || fail "a failing mk-merge removed the device it wrote to"
	head -c 300 p.mks > cutplan.mks
	expect_fail 1 "stdin" sh -c 'mk-fetch -o nulldev < cutplan.mks'
	[ -c nulldev ] || fail "a failing mk-fetch removed the device it wrote to"
	printf 'merge_method: linear\nmodels:\n  - model: nope\n' > nope.yml
	expect_fail 1 "nope" mk-plan nope.yml -o nulldev
	[ -c nulldev ] || fail "a failing mk-plan removed the device it wrote to"
fi
echo keep > target.mks && ln -s target.mks link.mks
expect_fail 1 "is one value for all inputs" mk-merge -i edited-in.mks -o link.mks
[ -L link.mks ] && [ -f target.mks ] && [ ! -s target.mks ] || fail "a failing mk-merge -o SYMLINK: $(ls -l link.mks target.mks 2>&1)"
# -q silences warnings; a config without mistakes draws none
mk-plan -q p.yml -o p.mks 2>err.txt && [ ! -s err.txt ] || fail "mk-plan -q printed a warning"
printf 'merge_method: linear\nmodels:\n  - model: m\n    parameters: {weight: 1}\n  - model: m2\n    parameters: {weight: 1}\n' > p.yml
mk-plan p.yml -o p.mks 2>err.txt && [ ! -s err.txt ] || { cat err.txt >&2; fail "warnings for a clean config"; }
# slerp without t: the tensors are the base's, said once with their number
printf 'merge_method: slerp\nbase_model: m\nmodels:\n  - model: m\n  - model: m2\n' > p.yml
mk-plan p.yml -o p.mks 2>err.txt
grep -qE "p.yml:1:15: merge_method: [0-9]+ tensors \(the first '[^']+'\) are the base model's, unchanged: slerp reads only the base for them \(no value for 't'\)" err.txt ||
	{ cat err.txt >&2; fail "slerp without t: no warning"; }
[ "$(grep -c warning err.txt)" -eq 1 ] || { cat err.txt >&2; fail "slerp without t: not one warning"; }
printf 'merge_method: slerp\nbase_model: m\nmodels:\n  - model: m\n  - model: m2\nparameters: {t: 0.5}\n' > p.yml
mk-plan p.yml -o p.mks 2>err.txt && [ ! -s err.txt ] || { cat err.txt >&2; fail "slerp with t: a warning"; }

# --- names are safe to print -------------------------------------------------
# FILE names that are not printable UTF-8 are refused by every reader, and
# the refusal prints the name escaped, never the raw control characters
esc=$(printf '\033')
for name in "$(printf 'a\033]0;x\007b')" "$(printf 'cr\rlf\nz')" "$(printf 'caf\351')" "$(printf 'c1\302\233x')"; do
	mk-forge "bad-file=$name" > s.mks
	expect_fail 1 "is not printable UTF-8" mk-pack -i s.mks out
	no_out out
	! grep -q "$esc\|$(printf '\007')" err.txt || fail "mk-pack printed a control character raw"
	[ "$(wc -l < err.txt)" -eq 1 ] || { cat err.txt >&2; fail "mk-pack's message spans lines"; }
	expect_fail 1 "is not printable UTF-8" mk-cat s.mks
	expect_fail 1 "is not printable UTF-8" mk-cat --verify s.mks
done
mk-forge "bad-file=$(printf 'a\033]0;x\007b')" > s.mks
mk-pack -i s.mks out 2>err.txt || true
err_has 'a\x1b]0;x\x07b' "the name is not escaped as \\xHH"
# printable UTF-8 is a name like any other
mk-forge "named-file=café.txt" > s.mks
mk-pack -i s.mks utf && [ -f utf/café.txt ] || fail "a UTF-8 file name was refused"
mk-cat s.mks | grep -qF "name=café.txt" || fail "mk-cat did not print a UTF-8 name as is"
# a path in a message is escaped too
printf 'merge_method: linear\nmodels:\n  - model: "m\\e[31mX"\n    parameters: {weight: 1}\n' > p.yml
expect_fail 1 'm\x1b[31mX' mk-plan p.yml -o p.mks
! grep -q "$esc" err.txt || fail "mk-plan printed an escape raw"

# --- messages a user can act on ----------------------------------------------
# mk-yaml: a failing stage's message, not the downstream stages' "empty
# input" or "without an END frame" lines (run alone, a stage still says it)
printf 'merge_method: linear\nmodels:\n  - model: m\n    parameters: {weight: 1}\n  - model: nope\n    parameters: {weight: 1}\n' > p.yml
expect_fail 1 "mk-yaml: error: mk-plan exited with status 1" mk-yaml --processes p.yml yout
grep -q "mk-plan: error: p.yml:5:12: models\[1\].model: model 'nope'" err.txt || { cat err.txt >&2; fail "mk-yaml: no mk-plan message"; }
[ "$(wc -l < err.txt)" -eq 2 ] || { cat err.txt >&2; fail "mk-yaml: downstream stages added lines"; }
no_out yout
# in one process: the diagnostic alone, as mk-yaml's
expect_fail 1 "mk-yaml: error: p.yml:5:12: models[1].model: model 'nope'" mk-yaml p.yml yout
[ "$(wc -l < err.txt)" -eq 1 ] || { cat err.txt >&2; fail "mk-yaml: more than the diagnostic"; }
no_out yout
expect_fail 1 "stdin: empty input" mk-fetch < /dev/null
# int64 is refused by mk-plan, before any weight is read
for k in dtype out_dtype; do
	printf 'merge_method: linear\n%s: int64\nmodels:\n  - model: m\n    parameters: {weight: 1}\n  - model: m2\n    parameters: {weight: 1}\n' $k > p.yml
	expect_fail 1 "p.yml:2:" mk-plan p.yml -o p.mks
	err_has "$k: int64 is not supported: mk merges weights as floating point" "$k int64"
done
# a shape mismatch is reported at the model that has the other shape
mk-gen-model --layers 1 --seed 5 --hidden 32 narrow >/dev/null
printf 'merge_method: linear\nmodels:\n  - model: m\n    parameters: {weight: 1}\n  - model: narrow\n    parameters: {weight: 1}\n' > p.yml
expect_fail 1 "p.yml:5:12: models[1].model: method 'linear', tensor" mk-plan p.yml -o p.mks
! grep -q "models\[0\]" err.txt || { cat err.txt >&2; fail "the mismatch is reported at models[0]"; }
! grep -q "p.yml:0:0" err.txt || { cat err.txt >&2; fail "a message at 0:0"; }
# the config may come from a pipe; -o /dev/stdout is a terminal like '-'
printf 'merge_method: linear\nmodels:\n  - model: m\n    parameters: {weight: 1}\n  - model: m2\n    parameters: {weight: 1}\n' > p.yml
mk-plan p.yml -o p.mks
cat p.yml | mk-plan /dev/stdin -o p2.mks && cmp -s p.mks p2.mks || fail "mk-plan refused a config from a pipe"
if command -v script >/dev/null 2>&1; then
	set +e; script -qec "mk-plan p.yml -o /dev/stdout" /dev/null > tty.txt 2>&1; rc=$?; set -e
	[ $rc -eq 2 ] && grep -q "refusing to write a binary stream to a terminal" tty.txt || fail "mk-plan -o /dev/stdout wrote to a terminal ($rc)"
fi
# model.safetensors that exists as something else is named as such, not "no model.safetensors"
for k in loop fifo dir; do
	rm -rf x$k && cp -r m2 x$k && rm -f x$k/model*.safetensors*
	case $k in loop) ln -s model.safetensors x$k/model.safetensors ;; fifo) mkfifo x$k/model.safetensors ;;
		dir) mkdir x$k/model.safetensors ;; esac
	printf 'merge_method: linear\nmodels:\n  - model: x%s\n    parameters: {weight: 1}\n' $k > p.yml
	case $k in loop) want="is a symbolic link that does not resolve" ;; fifo) want="is a FIFO, not a regular file" ;;
		dir) want="is a directory, not a regular file" ;; esac
	expect_fail 1 "model.safetensors in x$k $want" mk-plan p.yml -o p.mks
done
# a --max-memory below the stages' least is raised, and mk-yaml says so
mk-yaml --max-memory 1K --print-pipeline "$MK_TOP/testdata/configs/linear.yml" lowmem > /dev/null 2> lowmem.err
grep -q "note: --max-memory 1K is less than the stages need at the least" lowmem.err || { cat lowmem.err; fail "no note on a raised --max-memory"; }
grep -q "they get 50331648 bytes in all (33554432 for the stages at rest, mk-fetch 4194304, mk-pack 8388608, merging 4194304)" lowmem.err ||
	{ cat lowmem.err; fail "the raised --max-memory is not what the stages get"; }
mk-yaml --max-memory 1K --print-pipeline "$MK_TOP/testdata/configs/linear.yml" lowmem 2>/dev/null | grep -q "mk-merge --max-memory 4194304" ||
	fail "merging got no bound under a tiny --max-memory"
