# mk-plan | mk-fetch | mk-merge | mk-pack, and mk-yaml, on the bundled
# configurations and tiny models.
. "$MK_TOP/test/cli/lib.inc"
cp -r "$MK_TOP/testdata/models" models
for c in linear gradient-slerp passthrough task-arithmetic modules; do
	sed 's|testdata/models/|models/|g' "$MK_TOP/testdata/configs/$c.yml" > $c.yml
done
# every config through the hand-built pipe and through mk-yaml: same bytes
for c in linear gradient-slerp passthrough task-arithmetic modules; do
	mk-plan $c.yml | mk-fetch | mk-merge | mk-pack --out-shard-size 100K hand-$c
	mk-yaml --out-shard-size 100K $c.yml yaml-$c
	for f in hand-$c/*; do
		b=$(basename "$f")
		[ "$b" = README.md ] && continue # titled by the output's name
		cmp "$f" "yaml-$c/$b" || fail "$c: $b differs between the pipe and mk-yaml"
	done
	grep -q "^# yaml-$c\$" yaml-$c/README.md || fail "$c: README.md not titled by OUT"
	cmp $c.yml yaml-$c/mergekit_config.yml || fail "$c: mergekit_config.yml is not the YAML as given"
	[ -f yaml-$c/config.json ] && [ -f yaml-$c/tokenizer.json ] || fail "$c: config or tokenizer missing"
done
# linear: (1.0 a + 0.5 b) / 1.5, computed here independently in float64
mk-st-compare --lin 1,0.5/1.5 --tol 1e-6 yaml-linear models/tiny-a models/tiny-b > /dev/null
# passthrough frankenmerge: 3 layers, the last being tiny-b's layer 1
grep -q '"num_hidden_layers": 3' yaml-passthrough/config.json || fail "passthrough: layer count not 3"
mk-st-compare --rename 'model.layers.2.=model.layers.1.' --only model.layers.2. --tol 0 yaml-passthrough models/tiny-b > /dev/null
mk-st-compare --only model.layers.0. --tol 0 yaml-passthrough models/tiny-a > /dev/null

# mk-merge and mk-pack never open model files: replay a saved stream
# with the models moved away
mk-plan linear.yml | mk-fetch > inputs.mks
mv models models.away
mk-merge < inputs.mks | mk-pack --out-shard-size 100K replay
for f in hand-linear/*; do cmp "$f" "replay/$(basename "$f")" || fail "replay differs: $f"; done
mv models.away models

# a model changed after mk-plan ran: mk-fetch refuses
mk-plan linear.yml > plan.mks
mk-gen-model --seed 9 --layers 3 models/tiny-b.new
rm -rf models/tiny-b && mv models/tiny-b.new models/tiny-b
expect_fail 1 "run mk-plan again" mk-fetch -i plan.mks -o x.mks
[ ! -e x.mks ] || fail "mk-fetch left a stream after refusing"

# three independent mistakes: three messages, exit 1, nothing read
cat > bad.yml <<'YML'
merge_method: linaer
models:
  - model: models/tiny-a
    parameters:
      weight: 1.0
  - model: models/nowhere
    parameters:
      weight: 0.5
dtype: float13
YML
expect_fail 1 "linaer" mk-plan bad.yml
n=$(grep -c "error:" err.txt)
[ "$n" -eq 3 ] || { cat err.txt; fail "expected 3 errors, got $n"; }
grep -q "did you mean 'linear'" err.txt || fail "no suggestion for the method"
grep -q "float13" err.txt && grep -q "nowhere" err.txt || fail "a mistake was not reported"
expect_fail 1 "linaer" mk-yaml bad.yml bad-out
no_out bad-out
# a layer range past a model's depth
printf 'merge_method: passthrough\nslices:\n  - sources:\n      - model: models/tiny-a\n        layer_range: [0, 5]\n' > deep.yml
expect_fail 1 "past the end of model" mk-plan deep.yml
# tokenizer sources and vocabularies: test/cli/tokenizer.sh

# mk-yaml --processes: a stage killed mid-run stops everything and leaves no OUT
if [ "$MK_SAN" != 1 ]; then
	mk-gen-model --dtype F32 --hidden 512 --layers 4 --big-rows 60000 big-a
	mk-gen-model --dtype F32 --hidden 512 --layers 4 --big-rows 60000 --seed 5 big-b
	printf 'merge_method: linear\nmodels:\n  - model: big-a\n    parameters: {weight: 1}\n  - model: big-b\n    parameters: {weight: 1}\n' > big.yml
	# mk-merge is stopped (SIGSTOP) before the kill, so that a stage which
	# had already ended (a merge this small lasts a tenth of a second) is
	# told from one killed mid-run; such a run is tried again
	tries=0
	caught=0
	while [ $caught = 0 ] && [ $tries -lt 5 ]; do
		tries=$((tries + 1))
		rm -rf killed
		mk-yaml --processes big.yml killed 2>kill-err.txt &
		ypid=$!
		mpid=
		i=0
		# this mk-yaml's own mk-merge only (a child of it): never another run's
		until mpid=$(pgrep -P $ypid -x mk-merge) || [ $i -gt 500 ]; do sleep 0.01; i=$((i + 1)); done
		if [ -n "$mpid" ] && kill -STOP $mpid 2>/dev/null; then
			st=
			i=0
			while [ $i -lt 200 ]; do
				st=$(sed 's/.*) //' /proc/$mpid/stat 2>/dev/null | cut -d' ' -f1) || st=
				case "$st" in T | t | Z | '') break ;; esac
				sleep 0.01
				i=$((i + 1))
			done
			case "$st" in
			T | t) kill -9 $mpid && caught=1 ;;
			*) kill -CONT $mpid 2>/dev/null || true ;;   # never seen stopped: let it go on
			esac
		fi
		set +e; wait $ypid; rc=$?; set -e
	done
	[ $caught = 1 ] || fail "mk-merge ended before it could be stopped, $tries times"
	[ $rc -ne 0 ] || fail "mk-yaml succeeded although mk-merge was killed"
	grep -q "mk-merge was killed by signal 9" kill-err.txt || { cat kill-err.txt; fail "no message about the killed stage"; }
	no_out killed
fi

# chat templates: a built-in name, a literal template, auto
cp -r models/tiny-a models/tiny-ct && printf '{\n  "bos_token": "<s>",\n  "chat_template": "{{ messages }}"\n}\n' > models/tiny-ct/tokenizer_config.json
for ct in chatml literal auto; do
	case $ct in
	chatml) v=chatml ;;
	literal) v='"{% for m in messages %}{{ m.content }}{% endfor %}"' ;;
	auto) v=auto ;;
	esac
	printf 'merge_method: linear\nmodels:\n  - model: models/tiny-ct\n    parameters: {weight: 1}\n  - model: models/tiny-a\n    parameters: {weight: 1}\nchat_template: %s\n' "$v" > ct-$ct.yml
	mk-yaml ct-$ct.yml ct-$ct
	# the template in chat_template.jinja (transformers 5's layout, as
	# mergekit writes it), none left in tokenizer_config.json
	python3 - ct-$ct "$ct" "$MK_TOP/src/planner/templates/chatml.jinja" <<'PY'
import json, sys
t = open(sys.argv[1] + "/chat_template.jinja", encoding="utf-8", newline="").read()
want = {"chatml": open(sys.argv[3], newline="").read(), "literal": "{% for m in messages %}{{ m.content }}{% endfor %}",
        "auto": "{{ messages }}"}[sys.argv[2]]
assert t == want, (sys.argv[2], t)
c = json.load(open(sys.argv[1] + "/tokenizer_config.json"))
assert c == {"bos_token": "<s>"}, c
PY
done
# the donor's tokenizer_config.json as transformers writes it (an integer
# beyond 64 bits, its own indent): only chat_template is added, every
# other byte kept
cp -r models/tiny-a models/tiny-big
printf '{\n    "bos_token": "<s>",\n    "model_max_length": 1000000000000000019884624838656,\n    "clean_up_tokenization_spaces": false\n}\n' > models/tiny-big/tokenizer_config.json
printf 'merge_method: linear\nmodels:\n  - model: models/tiny-big\n    parameters: {weight: 1}\n  - model: models/tiny-a\n    parameters: {weight: 1}\nchat_template: chatml\n' > ct-big.yml
mk-yaml ct-big.yml ct-big
cmp models/tiny-big/tokenizer_config.json ct-big/tokenizer_config.json || fail "the donor's tokenizer_config.json was not kept byte for byte"
cmp "$MK_TOP/src/planner/templates/chatml.jinja" ct-big/chat_template.jinja || fail "chatml: chat_template.jinja is not the built-in template"
# a donor whose tokenizer_config.json has a template of its own: that key
# alone is removed (the chosen template is in chat_template.jinja), every
# other byte kept
python3 - models/tiny-big/tokenizer_config.json models/tiny-bigct/tokenizer_config.json <<'PY'
import os, sys
donor = open(sys.argv[1], encoding="utf-8").read()
os.makedirs(os.path.dirname(sys.argv[2]), exist_ok=True)
with open(sys.argv[2], "w", encoding="utf-8") as f:
    f.write(donor.replace('"bos_token": "<s>",', '"bos_token": "<s>",\n    "chat_template": "{{ old }}",'))
PY
for f in models/tiny-big/*; do [ -e "models/tiny-bigct/${f##*/}" ] || cp "$f" models/tiny-bigct/; done
sed 's#models/tiny-big$#models/tiny-bigct#' ct-big.yml > ct-bigct.yml
mk-yaml --quiet ct-bigct.yml ct-bigct
cmp models/tiny-big/tokenizer_config.json ct-bigct/tokenizer_config.json || fail "the donor's chat_template key was not removed alone"
cmp "$MK_TOP/src/planner/templates/chatml.jinja" ct-bigct/chat_template.jinja || fail "chatml over a donor's template: chat_template.jinja differs"
# config.json too is read losslessly: an integer beyond 64 bits comes
# through (transformers' layout: sorted keys, 2-space indent)
python3 - models/tiny-big/config.json <<'PY'
import json, sys
c = json.load(open(sys.argv[1])); c["big_limit"] = 1000000000000000019884624838656
json.dump(c, open(sys.argv[1], "w"), indent=4)
PY
rm -rf ct-big && mk-yaml ct-big.yml ct-big
python3 - ct-big/config.json <<'PY'
import json, sys
text = open(sys.argv[1]).read(); c = json.loads(text)
assert c["big_limit"] == 1000000000000000019884624838656, c["big_limit"]
assert text == json.dumps(c, indent=2, sort_keys=True) + "\n", "config.json is not laid out as transformers writes it"
PY
# a broken donor file: its parser's error with line and column, no OUT
printf '{\n  "bos_token": "<s>",\n}\n' > models/tiny-big/tokenizer_config.json
expect_fail 1 "models/tiny-big/tokenizer_config.json:3:1: a comma before the closing bracket" mk-yaml ct-big.yml ct-broken
no_out ct-broken
# auto: transformers 5 keeps the template in chat_template.jinja; a file
# that does not parse is said, not skipped in silence
cp -r models/tiny-a models/tiny-jinja && printf '{{ jinja }}' > models/tiny-jinja/chat_template.jinja
printf 'merge_method: linear\nmodels:\n  - model: models/tiny-jinja\n    parameters: {weight: 1}\n  - model: models/tiny-big\n    parameters: {weight: 1}\nchat_template: auto\n' > ct-jinja.yml
mk-yaml ct-jinja.yml ct-jinja 2> jinja.err
grep -q "chat_template auto: model 'models/tiny-big': tokenizer_config.json:3:1: a comma before the closing bracket; its template is not counted" jinja.err ||
	{ cat jinja.err; fail "auto skipped a broken tokenizer_config.json silently"; }
[ "$(cat ct-jinja/chat_template.jinja)" = "{{ jinja }}" ] || fail "auto did not find chat_template.jinja"
python3 -c 'import json, sys; assert "chat_template" not in json.load(open(sys.argv[1]))' ct-jinja/tokenizer_config.json ||
	fail "auto: a template left in tokenizer_config.json beside chat_template.jinja"
# auto counts as mergekit does: from a list of named templates (Hermes,
# Command-R) the one named "default", each stripped of white space at
# both ends (Python's str.strip, Unicode spaces too), empty ones left out
cp -r models/tiny-a models/tiny-named && python3 - models/tiny-named/tokenizer_config.json <<'PY'
import json, sys
json.dump({"bos_token": "<s>", "chat_template": [{"name": "tool_use", "template": "{{ tools }}"},
          {"name": "default", "template": "\u3000 {{ named }}\n\n"}]}, open(sys.argv[1], "w"))
PY
cp -r models/tiny-a models/tiny-named2 && cp models/tiny-named/tokenizer_config.json models/tiny-named2/
cp -r models/tiny-a models/tiny-empty && printf '{"chat_template": ""}' > models/tiny-empty/tokenizer_config.json
cp -r models/tiny-a models/tiny-empty2 && cp models/tiny-empty/tokenizer_config.json models/tiny-empty2/
printf 'merge_method: linear\nmodels:\n' > ct-named.yml
for m in tiny-empty tiny-empty2 tiny-jinja tiny-named tiny-named2; do
	printf '  - model: models/%s\n    parameters: {weight: 1}\n' $m >> ct-named.yml
done
printf 'chat_template: auto\n' >> ct-named.yml
mk-yaml --quiet ct-named.yml ct-named
[ "$(cat ct-named/chat_template.jinja)" = "{{ named }}" ] || fail "auto: the named default template, stripped, is not the one written"
# donors without tokenizer.json or tokenizer_config.json: a tokenizer in
# any layout transformers loads is copied as it is (mergekit writes one
# whenever AutoTokenizer loads it); none at all is said
cp -r models/tiny-a models/gpt2ish && rm models/gpt2ish/tokenizer.json
printf '{"a": 0, "b": 1, "ab": 2}' > models/gpt2ish/vocab.json && printf '#version: 0.2\na b\n' > models/gpt2ish/merges.txt
cp -r models/tiny-a models/noconfig && rm models/noconfig/tokenizer_config.json
cp -r models/tiny-a models/novocab && rm models/novocab/tokenizer.json
for m in gpt2ish noconfig novocab; do
	printf 'merge_method: linear\nmodels:\n  - model: models/%s\n    parameters: {weight: 1}\n  - model: models/tiny-a\n    parameters: {weight: 1}\n' $m > donor-$m.yml
	rm -rf donor-$m && mk-yaml donor-$m.yml donor-$m 2> donor.err
	case $m in
	gpt2ish) for f in vocab.json merges.txt tokenizer_config.json; do cmp models/$m/$f donor-$m/$f || fail "$m: $f not copied"; done ;;
	noconfig) cmp models/$m/tokenizer.json donor-$m/tokenizer.json || fail "$m: tokenizer.json not copied"
		  [ ! -e donor-$m/tokenizer_config.json ] || fail "$m: a tokenizer_config.json from nowhere" ;;
	novocab) grep -q "donor-novocab.yml:1:15: merge_method: model 'models/novocab' has no tokenizer (no tokenizer.json, tokenizer.model, vocab.json with merges.txt, or vocab.txt): the output has none" donor.err ||
			 { cat donor.err; fail "no word on a donor without a tokenizer"; }
		 [ ! -e donor-$m/tokenizer_config.json ] || fail "$m: tokenizer files copied without a vocabulary" ;;
	esac
done
# a broken pytorch_model.bin is refused at plan time, naming it
mkdir binonly && echo x > binonly/pytorch_model.bin && cp models/tiny-a/config.json binonly/
printf 'merge_method: linear\nmodels:\n  - model: binonly\n    parameters: {weight: 1}\n' > bin.yml
expect_fail 1 "binonly/pytorch_model.bin: not a zip file" mk-plan bin.yml

# embeddings of different vocabulary sizes: cut to the common block
# (as mergekit 0.1.4; mergekit 0.1.5 refuses them, see mk-compat(7))
if python3 -c 'import safetensors' 2>/dev/null; then
	C=$MK_TOP/testdata/models/conf
	printf 'merge_method: linear\nmodels:\n  - model: %s/llama-f32-a\n    parameters: {weight: 0.5}\n  - model: %s/llama-f32-v40\n    parameters: {weight: 0.5}\n' "$C" "$C" > vocab.yml
	mk-yaml vocab.yml vocab
	python3 - vocab/model.safetensors "$C/llama-f32-a/model.safetensors" "$C/llama-f32-v40/model.safetensors" <<'PY'
import struct, sys
from safetensors import deserialize
out, a, b = ({n: t for n, t in deserialize(open(p, "rb").read())} for p in sys.argv[1:])
for name in ("model.embed_tokens.weight", "lm_head.weight"):
    assert out[name]["shape"] == [32, 16], out[name]["shape"]
    o = struct.unpack("<512f", bytes(out[name]["data"]))
    x = struct.unpack("<512f", bytes(a[name]["data"]))
    y = struct.unpack("<640f", bytes(b[name]["data"]))[:512]  # the first 32 rows
    assert all(abs(o[i] - (0.5 * x[i] + 0.5 * y[i])) <= 1e-7 for i in range(512)), name
PY
fi

# jobs follow the base model's file order: a model read front to back
mk-gen-model --shards 3 --seed 4 ordered
printf 'merge_method: passthrough\nmodels:\n  - model: ordered\n' > ord.yml
mk-plan ord.yml | mk-fetch -v 2> fetch-v.txt > /dev/null
grep -q "queue depth" fetch-v.txt || fail "mk-fetch -v does not show the queue depth"
grep -q " 0 backward seeks" fetch-v.txt || { cat fetch-v.txt; fail "a single model was not read front to back"; }

# methods with statistics passes: held in memory (default budget) or
# streamed once per pass (a budget too small to hold) give the same bytes
C=$MK_TOP/testdata/models/conf
for cfg in ties-f32 slerp-gradient-f32 karcher-f32 sce-f32 breadcrumbs-ties-f32; do
	sed "s|testdata/models/conf|$C|g" "$MK_TOP/test/conformance/$cfg.yml" > held-$cfg.yml
	mk-plan held-$cfg.yml | mk-fetch | mk-merge | mk-pack held-$cfg
	mk-plan --max-memory 1 held-$cfg.yml > streamed.mks
	mk-cat streamed.mks | grep -q '"sends":[2-9]' || fail "$cfg: --max-memory 1 did not stream the passes"
	mk-fetch < streamed.mks | mk-merge | mk-pack streamed-$cfg
	for f in held-$cfg/*.safetensors; do cmp "$f" "streamed-$cfg/$(basename "$f")" || fail "$cfg: held and streamed differ"; done
	# spilled: sent once, the later passes replayed from mk-merge's file
	mkdir -p spill
	mk-plan --spill --max-memory 1 held-$cfg.yml > spilled.mks
	mk-cat spilled.mks | grep -q '"spill":true' || fail "$cfg: mk-plan --spill did not spill"
	if mk-cat spilled.mks | grep -q '"sends":[2-9]'; then fail "$cfg: a spilled job is sent more than once"; fi
	mk-fetch < spilled.mks > spilled-in.mks
	mk-merge --spill spill -v -v < spilled-in.mks 2> spill-v.txt | mk-pack spilled-$cfg
	grep -q "spill: at most [1-9]" spill-v.txt || fail "$cfg: nothing was spilled"
	[ -z "$(ls -A spill)" ] || fail "$cfg: the spill file is left in the directory"
	for f in held-$cfg/*.safetensors; do cmp "$f" "spilled-$cfg/$(basename "$f")" || fail "$cfg: held and spilled differ"; done
done
# a spilling plan needs --spill, checked at the HEAD; a bad directory is named
expect_fail 1 "run mk-merge with --spill DIR" mk-merge -i spilled-in.mks -o x.mks
expect_fail 1 "no-such-dir" mk-merge --spill no-such-dir -i spilled-in.mks -o x.mks
# the same through mk-yaml, on a random method: dare_ties and della
for cfg in dare_ties della; do
	sed -e "s|testdata/models/conf|$C|g" -e "s|^merge_method: ties|merge_method: $cfg|" \
		"$MK_TOP/test/conformance/ties-f32.yml" > r-$cfg.yml
	grep -q "merge_method: $cfg" r-$cfg.yml || fail "no $cfg config"
	mk-yaml r-$cfg.yml held-$cfg
	mk-yaml --spill spill --max-memory 2 r-$cfg.yml spilled-$cfg
	for f in held-$cfg/*.safetensors; do cmp "$f" "spilled-$cfg/$(basename "$f")" || fail "$cfg: held and spilled differ"; done
done

# override_architecture on the donor: config.json's architectures say it
# (as mergekit's config of such a reference does); the model_type stays
mk-gen-model --seed 3 ov-a > /dev/null && mk-gen-model --seed 4 ov-b > /dev/null
printf 'merge_method: linear\nbase_model: {model: ov-a, override_architecture: MistralForCausalLM}\nmodels:\n  - model: {model: ov-a, override_architecture: MistralForCausalLM}\n    parameters: {weight: 1}\n  - model: {model: ov-b, override_architecture: MistralForCausalLM}\n    parameters: {weight: 1}\n' > ov.yml
mk-yaml ov.yml ov-out
python3 - ov-out/config.json <<'PY' || fail "override_architecture: config.json's architectures"
import json, sys
c = json.load(open(sys.argv[1]))
assert c["architectures"] == ["MistralForCausalLM"] and c["model_type"] == "llama", c
PY

# --transformers-cache DIR: references resolved in that Hugging Face cache
mkdir -p hfc/models--org--tiny/snapshots/0123456789abcdef0123456789abcdef01234567 hfc/models--org--tiny/refs
cp models/tiny-a/* hfc/models--org--tiny/snapshots/0123456789abcdef0123456789abcdef01234567/
printf '0123456789abcdef0123456789abcdef01234567' > hfc/models--org--tiny/refs/main
printf 'merge_method: passthrough\nmodels:\n  - model: org/tiny\n' > hub.yml
HF_HUB_CACHE=/nonexistent HF_HUB_OFFLINE=1 mk-yaml --transformers-cache "$PWD/hfc" hub.yml hub-out
mk-st-diff models/tiny-a hub-out

# A held job's selection may add a statistics pass (a window that missed
# its cut: models whose first eighth of each tensor is 64 times the
# rest): mk-merge -vv counts the passes added, and the output is the
# bytes of the same merge streamed (no pass added: its passes are the
# plan's) and spilled (replayed from the file, passes added there too).
for s in 1 2 3; do
	mk-gen-model --hidden 512 --inter 1024 --layers 1 --vocab 256 --seed $((40 + s)) --head-scale 64 hs$s > /dev/null
	mk-gen-model --hidden 512 --inter 1024 --layers 1 --vocab 256 --seed $((40 + s)) even$s > /dev/null
done
for m in ties breadcrumbs; do
	for set in hs even; do
		printf 'merge_method: %s\nbase_model: %s1\nmodels:\n  - model: %s2\n    parameters: {weight: 0.6, density: 0.4, gamma: 0.02}\n  - model: %s3\n    parameters: {weight: 0.4, density: 0.4, gamma: 0.02}\n' \
			$m $set $set $set > $set-$m.yml
		[ $m = ties ] && sed -i 's/, gamma: 0.02//' $set-$m.yml
		mk-plan $set-$m.yml | mk-fetch | mk-merge -vv 2> held.err | mk-pack $set-$m-held
		added=$(sed -n 's/.* \([0-9]*\) statistics passes added.*/\1/p' held.err)
		[ -n "$added" ] || { cat held.err >&2; fail "$set-$m: mk-merge -vv does not count the passes added"; }
		if [ $set = hs ]; then
			[ "$added" -gt 0 ] || fail "$set-$m: no pass added (the windows held every cut)"
		else
			[ "$added" -eq 0 ] || fail "$set-$m: $added passes added to models alike throughout"
		fi
		mk-plan --max-memory 1000000 $set-$m.yml | mk-fetch | mk-merge -vv 2> streamed.err | mk-pack $set-$m-streamed
		grep -q " 0 statistics passes added" streamed.err || { cat streamed.err >&2; fail "$set-$m: a pass added to a streamed job"; }
		mkdir -p spill-$set-$m
		mk-plan --spill --max-memory 1000000 $set-$m.yml | mk-fetch | mk-merge -vv --spill spill-$set-$m 2> spilled.err |
			mk-pack $set-$m-spilled
		grep -q " $added statistics passes added" spilled.err || { cat spilled.err >&2; fail "$set-$m: spilled, other passes added"; }
		mk-yaml --quiet $set-$m.yml $set-$m-yaml
		for f in $set-$m-held/*.safetensors; do
			b=$(basename "$f")
			for o in streamed spilled yaml; do
				cmp "$f" "$set-$m-$o/$b" || fail "$set-$m: held and $o differ"
			done
		done
	done
done
# mk-yaml's own plan offers such jobs a spare pass (read only when a
# window missed): streamed in one process (merging under 4 MiB), the
# bytes of the pipeline's streamed and held merges
for s in 1 2 3; do
	mk-gen-model --hidden 1024 --inter 2048 --layers 1 --vocab 256 --seed $((50 + s)) --head-scale 64 hb$s > /dev/null
done
for m in ties breadcrumbs; do
	sed 's/hs\([123]\)/hb\1/g' hs-$m.yml > hb-$m.yml
	mk-yaml --quiet --max-memory 2 hb-$m.yml hb-$m-yaml 2> /dev/null
	mk-plan --max-memory 1000000 hb-$m.yml | mk-fetch | mk-merge | mk-pack hb-$m-streamed
	mk-plan hb-$m.yml | mk-fetch | mk-merge | mk-pack hb-$m-held
	for f in hb-$m-held/*.safetensors; do
		b=$(basename "$f")
		cmp "$f" "hb-$m-yaml/$b" || fail "hb-$m: mk-yaml streamed (a spare pass) and the pipeline held differ"
		cmp "$f" "hb-$m-streamed/$b" || fail "hb-$m: streamed and held differ"
	done
done
# In one process the fetch stage sends no more of a pass the merge stage
# will not read: with models alike throughout every window holds its
# cut, so the spare pass, the last digit pass past its first eighth and
# the cut pass end early (mk-yaml -v counts them and the chunks not
# read), and the bytes are the pipeline's, which sends every pass
for s in 1 2 3; do
	mk-gen-model --hidden 1024 --inter 2048 --layers 1 --vocab 256 --seed $((50 + s)) eb$s > /dev/null
done
for m in ties breadcrumbs; do
	sed 's/hs\([123]\)/eb\1/g' hs-$m.yml > eb-$m.yml
	mk-yaml -v --quiet --max-memory 2 eb-$m.yml eb-$m-yaml 2> eb.err
	ended=$(sed -n 's/.* \([0-9]*\) statistics passes ended early (\([0-9]*\) input chunks not read).*/\1 \2/p' eb.err)
	[ -n "$ended" ] || { cat eb.err >&2; fail "eb-$m: mk-yaml -v does not count the passes ended early"; }
	set -- $ended
	[ "$1" -ge 3 ] && [ "$2" -gt 0 ] || fail "eb-$m: $1 passes ended early, $2 chunks not read (every window held)"
	mk-plan --max-memory 1000000 eb-$m.yml | mk-fetch | mk-merge | mk-pack eb-$m-streamed
	for f in eb-$m-streamed/*.safetensors; do
		cmp "$f" "eb-$m-yaml/$(basename "$f")" || fail "eb-$m: mk-yaml (passes ended early) and the pipeline differ"
	done
done
# The same made deterministic: mk-fetch and mk-merge on one board marked
# before they start (mk-skipmerge), the first job (streamed, its windows
# holding their cuts): its cut pass left out whole gives the pipeline's
# bytes; its first or last digit pass left out (the method needs them) is
# refused, naming the pass
mk-plan --max-memory 1000000 eb-ties.yml > eb.plan
mk-fetch < eb.plan | mk-merge > eb-ref.tensors
mk-skipmerge --mark 0:2 eb.plan eb-cut.tensors 2> skip.err || { cat skip.err >&2; fail "the cut pass left out: refused"; }
cmp eb-ref.tensors eb-cut.tensors || fail "the cut pass left out: other bytes than the pipeline's"
unsent=$(sed -n 's/^unsent //p' skip.err)
[ "$unsent" -ge 3 ] || fail "the cut pass marked, $unsent chunks left out (its three inputs' at least)"
for p in 0 1; do
	if mk-skipmerge --mark 0:$p eb.plan eb-p$p.tensors 2> skip.err; then
		fail "digit pass $p left out: not refused"
	fi
	grep -q "job 0 (.*): statistics pass $p ended after 0 of its" skip.err || { cat skip.err >&2; fail "digit pass $p left out: no message"; }
done
# and a merge without the board (a standalone mk-merge's case) refuses a
# stream that leaves out even the cut pass
if mk-skipmerge --fetch-only --mark 0:2 eb.plan eb-nob.tensors 2> skip.err; then
	fail "the cut pass left out of a merge without the board: not refused"
fi
grep -q "job 0 (.*): statistics pass 2 ended after 0 of its" skip.err || { cat skip.err >&2; fail "the cut pass left out without the board: no message"; }
