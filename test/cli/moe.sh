# mk-moe: an MoE of each output architecture from generated models; every
# expert tensor equals its source bit for bit (mk-st-compare --tol 0), the
# base's other tensors likewise; the pre-checks; and the stages' peak RSS
# together within --max-memory + 32 MiB while the expert tensors are
# larger than the budget.
. "$MK_TOP/test/cli/lib.inc"

for s in 1 2 3; do
	mk-gen-model --seed $s --layers 2 --hidden 64 --inter 128 --vocab 96 --dtype BF16 --arch mistral m$s >/dev/null
done
# qwen3 models: the same weights, another model_type
for s in 1 2 3; do
	cp -r m$s q$s
	sed 's/"mistral"/"qwen3"/; s/MistralForCausalLM/Qwen3ForCausalLM/' m$s/config.json > q$s/config.json
done
experts='experts:
  - source_model: E2
    positive_prompts: ["code"]
  - source_model: E3
    positive_prompts: ["math"]
    residual_scale: 0.5'
cfg() {   # cfg FILE BASE PREFIX EXTRA
	printf 'base_model: %s1\ngate_mode: %s\n%s\n' "$2" "${5:-random}" "$4" > "$1"
	printf '%s\n' "$experts" | sed "s/E2/${3}2/; s/E3/${3}3/" >> "$1"
}
cfg mixtral.yml m m ''
cfg qwen3.yml q q '' uniform_random
cfg qwen2.yml m m 'architecture: qwen
shared_experts:
  - source_model: m1'
cfg deepseek.yml m m 'architecture: deepseek
shared_experts:
  - source_model: m1'

for a in mixtral qwen3 qwen2 deepseek; do
	mk-moe -v $a.yml out-$a 2> $a.err
	grep -q "output architecture" $a.err || fail "$a: no architecture said"
	# the base's tensors outside the MLPs
	for t in q_proj.weight k_proj.weight v_proj.weight o_proj.weight; do
		mk-st-compare --tol 0 --only "self_attn.$t" out-$a m1 >/dev/null || fail "$a: $t differs from the base"
	done
	mk-st-compare --tol 0 --only norm out-$a m1 >/dev/null || fail "$a: norms differ from the base"
done
grep -q '"model_type": "mixtral"' out-mixtral/config.json || fail "mixtral config.json"
grep -q '"num_local_experts": 2' out-mixtral/config.json || fail "mixtral num_local_experts"
grep -q '"model_type": "qwen3_moe"' out-qwen3/config.json || fail "qwen3 config.json"
grep -q '"model_type": "qwen2_moe"' out-qwen2/config.json || fail "qwen2 config.json"
grep -q '"shared_expert_intermediate_size": 128' out-qwen2/config.json || fail "qwen2 shared size"
grep -q '"n_routed_experts": 2' out-deepseek/config.json || fail "deepseek config.json"
grep -q '"n_shared_experts": 1' out-deepseek/config.json || fail "deepseek n_shared_experts"
cmp mixtral.yml out-mixtral/mergekit_moe_config.yml || fail "mergekit_moe_config.yml is not the configuration"
cmp m1/tokenizer.json out-mixtral/tokenizer.json || fail "tokenizer not the base's"
# the pad token is the BOS, as mergekit-moe saves it; nothing else changes
grep -q '"pad_token": "<s>"' out-mixtral/tokenizer_config.json || fail "no pad token in tokenizer_config.json"
grep -v pad_token out-mixtral/tokenizer_config.json | sed 's/,$//' > a.txt
sed 's/,$//' m1/tokenizer_config.json > b.txt
cmp a.txt b.txt || fail "tokenizer_config.json changed beyond its pad token"

# part TOL OUT NEXPERTS PART E SRC [OPTION...]: expert E's PART (gate_proj,
# up_proj, down_proj) in OUT's fused tensors of every layer, as transformers
# 5 lays out Mixtral's and Qwen3-MoE's experts (mlp.experts.gate_up_proj
# [E, 2I, H]: expert e's gate rows, then its up rows; mlp.experts.down_proj
# [E, H, I]), against SRC's PART
part() {
	_tol=$1 _out=$2 _ne=$3 _p=$4 _e=$5 _src=$6
	shift 6
	case $_p in
	gate_proj) _f=gate_up_proj _k=$((2 * _e)) _n=$((2 * _ne)) ;;
	up_proj) _f=gate_up_proj _k=$((2 * _e + 1)) _n=$((2 * _ne)) ;;
	*) _f=down_proj _k=$_e _n=$_ne ;;
	esac
	mk-st-compare --tol "$_tol" --only "mlp.experts.$_f" --slice "$_k/$_n" --rename ".experts.$_f=.$_p.weight" \
		"$@" "$_out" "$_src" >/dev/null
}
# the fused layout and nothing per expert in Mixtral's and Qwen3-MoE's; the
# unfused names in Qwen2-MoE's and DeepSeek's, as mergekit-moe writes them
st_header() {   # the JSON header of a safetensors file, one tensor a line
	dd if="$1" bs=1 skip=8 count=$(od -An -tu8 -N8 "$1" | tr -d ' ') 2>/dev/null | sed 's/},"/},\n"/g'
}
for a in mixtral qwen3; do
	st_header out-$a/model.safetensors > $a.hdr
	grep -q '"model.layers.1.mlp.experts.gate_up_proj":{"dtype":"BF16","shape":\[2,256,64\]' $a.hdr ||
		fail "$a: no fused gate_up_proj [2, 256, 64]"
	grep -q '"model.layers.1.mlp.experts.down_proj":{"dtype":"BF16","shape":\[2,64,128\]' $a.hdr ||
		fail "$a: no fused down_proj [2, 64, 128]"
	! grep -q 'experts\.[0-9]' $a.hdr || fail "$a: per-expert tensors beside the fused ones"
done
for a in qwen2 deepseek; do
	st_header out-$a/model.safetensors | grep -q '"model.layers.1.mlp.experts.1.down_proj.weight":{"dtype":"BF16","shape":\[64,128\]' ||
		fail "$a: no per-expert down_proj"
done
# experts bit for bit: expert 0 is model 2, expert 1 model 3 (down_proj x 0.5,
# exact in BF16: a power of two)
for p in gate_proj up_proj; do
	for a in qwen2 deepseek; do
		mk-st-compare --tol 0 --only "experts.0.$p" --rename ".experts.0.=." out-$a m2 >/dev/null ||
			fail "$a: expert 0 $p differs"
		mk-st-compare --tol 0 --only "experts.1.$p" --rename ".experts.1.=." out-$a m3 >/dev/null ||
			fail "$a: expert 1 $p differs"
	done
	part 0 out-mixtral 2 $p 0 m2 || fail "mixtral: expert 0 $p differs"
	part 0 out-mixtral 2 $p 1 m3 || fail "mixtral: expert 1 $p differs"
	part 0 out-qwen3 2 $p 0 q2 || fail "qwen3: expert 0 $p differs"  # (the qwen3 experts are q2, q3)
	part 0 out-qwen3 2 $p 1 q3 || fail "qwen3: expert 1 $p differs"
done
! part 0 out-mixtral 2 up_proj 0 m3 || fail "mixtral: expert 0's up_proj equals expert 1's source (the check cannot tell)"
for a in mixtral qwen3; do
	src=m
	[ $a = qwen3 ] && src=q
	part 0 out-$a 2 down_proj 1 ${src}3 --lin 0.5 || fail "$a: residual_scale"
	part 0 out-$a 2 down_proj 0 ${src}2 || fail "$a: expert 0 down_proj"
done
mk-st-compare --tol 0 --only "experts.1.down_proj" --rename ".experts.1.=." --lin 0.5 out-qwen2 m3 >/dev/null ||
	fail "qwen2: residual_scale"
mk-st-compare --tol 0 --only "shared_expert.gate_proj" --rename ".shared_expert.=." out-qwen2 m1 >/dev/null ||
	fail "qwen2: shared expert"
mk-st-compare --tol 0 --only "shared_experts.up_proj" --rename ".shared_experts.=." out-deepseek m1 >/dev/null ||
	fail "deepseek: shared expert"

# random gates: the same for a seed, another for another seed
mk-moe -q --random-seed 7 mixtral.yml r7
mk-moe -q --random-seed 7 mixtral.yml r7b
mk-moe -q --random-seed 8 mixtral.yml r8
cmp r7/model.safetensors r7b/model.safetensors || fail "random gates differ for one seed"
! cmp -s r7/model.safetensors r8/model.safetensors || fail "random gates the same for two seeds"

# noise_scale: normal noise on every MLP tensor of that expert (before
# residual_scale), from mk's generator: the same bits for a seed whatever
# -j and --max-memory (the chunking), other bits for another seed; none for
# an expert without it (null, 0: bit for bit).  s = 0.01: each tensor's
# noise reaches past 0.001 (its 8192 draws' largest is about 3.8 s) and
# never past 9 s (Box-Muller from 53-bit uniforms is bounded by 8.6 s),
# plus a bf16 rounding of the sum (under 1e-3 at these weights' sizes)
printf 'base_model: m1\ngate_mode: random\nexperts:\n  - source_model: m2\n    noise_scale: 0.01\n  - source_model: m3\n    noise_scale: null\n' > n1.yml
printf 'base_model: m1\ngate_mode: random\nexperts:\n  - source_model: m2\n    noise_scale: 0\n  - source_model: m3\n    noise_scale: 0.01\n    residual_scale: 0.5\n' > n2.yml
mk-moe -q -j 1 n1.yml n1a
mk-moe -q -j 2 --max-memory 24M n1.yml n1b
mk-moe -q --random-seed 9 n1.yml n1c
mk-moe -q n2.yml n2a
cmp n1a/model.safetensors n1b/model.safetensors || fail "noise_scale: other bits with -j 2 --max-memory 24M"
# the expert tensors (16 KiB) in 1 KiB chunks over two threads
mk-moe -q -j 2 --print-pipeline n1.yml n1d > n1d.txt
eval "$(sed 's/ -i / --chunk-size 1KiB -i /' n1d.txt)"
rm -rf "$(dirname "$(sed 's/.* -i \([^ ]*\).*/\1/' n1d.txt)")"
cmp n1a/model.safetensors n1d/model.safetensors || fail "noise_scale: other bits in 1 KiB chunks"
for p in gate_proj up_proj down_proj; do
	part 0.091 n1a 2 $p 0 m2 || fail "noise_scale: expert 0 $p beyond 9.1 s of its source"
	! part 0.001 n1a 2 $p 0 m2 || fail "noise_scale: expert 0 $p has no noise"
	part 0 n1a 2 $p 1 m3 || fail "noise_scale: null: expert 1 $p not its source's bits"
	part 0 n2a 2 $p 0 m2 || fail "noise_scale: 0: expert 0 $p not its source's bits"
done
# (expert 1 has no noise: a fused tensor that differs differs in expert 0's part)
for f in gate_up_proj down_proj; do
	! mk-st-compare --tol 0 --only "experts.$f" n1a n1c >/dev/null || fail "noise_scale: expert 0 $f the same for seeds 0 and 9"
done
# with residual_scale 0.5: down = (m3 + noise) * 0.5, noise within 9 s * 0.5
part 0.0455 n2a 2 down_proj 1 m3 --lin 0.5 || fail "noise_scale with residual_scale: down_proj beyond 0.5 * 9.1 s of 0.5 * its source"
! part 0.0005 n2a 2 down_proj 1 m3 --lin 0.5 || fail "noise_scale with residual_scale: down_proj has no noise"
# two experts of one model, both with noise, in one fused tensor: each
# part its own draws (the noise is keyed by the element of the fused tensor)
printf 'base_model: m1\ngate_mode: random\nexperts:\n  - source_model: m2\n    noise_scale: 0.01\n  - source_model: m2\n    noise_scale: 0.01\n' > n3.yml
mk-moe -q --i-understand-this-is-not-useful-without-training n3.yml n3a
for p in gate_proj up_proj down_proj; do
	part 0.091 n3a 2 $p 1 m2 || fail "noise_scale: expert 1 of n3 $p beyond 9.1 s of its source"
	! part 0.001 n3a 2 $p 1 m2 || fail "noise_scale: expert 1 of n3 $p has no noise"
done
python3 - n3a/model.safetensors <<'PY' || fail "noise_scale: the two experts' parts of a fused tensor have the same noise"
import json, struct, sys
b = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", b[:8])[0]
h = json.loads(b[8:8 + n])
checked = 0
for k, t in h.items():
    if ".experts." in k:
        lo, hi = t["data_offsets"]
        half = (hi - lo) // 2
        x = b[8 + n + lo:8 + n + hi]
        assert x[:half] != x[half:], k
        checked += 1
assert checked == 4, checked
PY

# pre-checks
printf 'base_model: m1\nexperts:\n  - source_model: m2\n    positive_prompts: ["a"]\n  - source_model: m3\n' > np.yml
expect_fail 1 "has no positive_prompts" mk-moe np.yml bad
printf 'base_model: m1\nexperts:\n  - source_model: m2\n    positive_prompts: ["a"]\n  - source_model: m3\n    positive_prompts: ["a"]\n' > same.yml
expect_fail 1 "prompts are the same for every expert" mk-moe same.yml bad
printf 'base_model: m1\nexperts:\n  - source_model: m2\n    positive_prompts: ["a"]\n  - source_model: m2\n    positive_prompts: ["b"]\n' > allsame.yml
expect_fail 1 "every expert is the same model" mk-moe allsame.yml bad
printf 'base_model: m1\nexperts_per_token: 3\ngate_mode: random\nexperts:\n  - source_model: m2\n  - source_model: m3\n' > ept.yml
expect_fail 1 "give at least as many experts" mk-moe ept.yml bad
printf 'base_model: m1\ngate_mode: bogus\nexperts:\n  - source_model: m2\n' > gm.yml
expect_fail 1 "gate_mode: 'bogus' is not one of" mk-moe gm.yml bad
printf 'base_model: m1\ngate_mode: random\narchitecture: qwen3\nexperts:\n  - source_model: m2\n  - source_model: m3\n' > q3bad.yml
expect_fail 1 "Qwen3 MoE needs qwen3 models" mk-moe q3bad.yml bad
printf 'base_model: m1\ngate_mode: random\narchitecture: gpt\nexperts:\n  - source_model: m2\n  - source_model: m3\n' > arch.yml
expect_fail 1 "names no output architecture" mk-moe arch.yml bad
expect_fail 2 "expected CONFIG and OUT" mk-moe mixtral.yml
expect_fail 2 "Try 'mk-moe --help'" mk-moe --no-such-option mixtral.yml x
# the options mk-yaml has, to the same stages (one table, cmd/cli.c)
mk-moe --print-pipeline --strict -j 3 --out-shard-size 1M --max-memory 1G --force mixtral.yml po > po.txt
rm -rf "$(dirname "$(sed 's/.* -i \([^ ]*\).*/\1/' po.txt)")"
grep -q 'mk-fetch --max-memory [0-9]* -i ' po.txt || fail "--max-memory: not mk-fetch's"
grep -q 'mk-merge --strict -j 3 --max-memory [0-9]* |' po.txt || fail "--strict -j 3: not mk-merge's"
grep -q 'mk-pack --out-shard-size 1000000 --max-memory [0-9]* --force po$' po.txt || fail "mk-pack's options"
mk-moe -q --random-seed 7 --plugin nowhere.so --allow-crimes --lazy-unpickle --device cpu mixtral.yml r7c 2> notes.txt
[ ! -s notes.txt ] || fail "-q: notes said"
cmp r7/model.safetensors r7c/model.safetensors || fail "ignored options changed the output"
mk-moe --plugin nowhere.so --cuda --print-pipeline mixtral.yml x > px.txt 2> notes.txt
rm -rf "$(dirname "$(sed 's/.* -i \([^ ]*\).*/\1/' px.txt)")"
grep -q "note: --plugin means nothing to mk-moe" notes.txt || fail "--plugin: no note"
expect_fail 2 "num-threads: expected a positive integer" mk-moe -j 0 mixtral.yml x
mk-moe --help | grep -q '^Usage: mk-moe' || fail "--help"
mk-moe --version | grep -q 'mk-moe' || fail "--version"
no_out bad

# a signal to mk-moe alone while the hidden gates' forward pass runs (60
# layers, two prompts of 400 words: about 4.5 s in all on a 2-core Zen 5,
# the signal comes 0.5 s in; at 100 words the pass took 1 s, too near)
# stops it at the next layer, by that signal:
# no OUT, no OUT.mk-partial (the stages never started), no work directory
# left in TMPDIR.  Stopping within 3 s is far less than the pass's rest.
mk-gen-model --seed 1 --layers 60 --hidden 256 --inter 1024 --vocab 96 --dtype BF16 --arch mistral --bpe-tokenizer fw >/dev/null
words=$(i=0; while [ $i -lt 400 ]; do printf 'w%d ' $((i % 50)); i=$((i + 1)); done)
printf 'base_model: fw\ngate_mode: hidden\nexperts:\n  - source_model: fw\n    positive_prompts: ["%s"]\n  - source_model: fw\n    positive_prompts: ["%s"]\n' \
	"$words" "$(echo "$words" | rev)" > fw.yml
mkdir fwtmp
for sig in INT TERM; do
	# env gives mk-moe SIGINT back (sh ignores it in background jobs)
	TMPDIR=$PWD/fwtmp env --default-signal=INT mk-moe -v --i-understand-this-is-not-useful-without-training fw.yml fwout 2> fw.err &
	y=$!
	t=0
	while ! grep -q "running the base model" fw.err && [ -e /proc/$y ] && [ $t -lt 3000 ]; do
		sleep 0.01; t=$((t + 1))
	done
	sleep 0.5
	kill -$sig $y || { cat fw.err >&2; fail "SIG$sig: mk-moe ended before the signal"; }
	t0=$(date +%s%N)
	set +e; wait $y; rc=$?; set -e
	ms=$(( ($(date +%s%N) - t0) / 1000000 ))
	case $sig in INT) n=2 ;; TERM) n=15 ;; esac
	[ $rc -eq $((128 + n)) ] || { cat fw.err >&2; fail "SIG$sig: mk-moe exited $rc, not by the signal"; }
	grep -q "stopped by SIG$sig" fw.err || { cat fw.err >&2; fail "SIG$sig: no word of the stop"; }
	[ ! -e fwout ] && [ ! -e fwout.mk-partial ] || fail "SIG$sig: OUT or OUT.mk-partial left"
	[ -z "$(ls -A fwtmp)" ] || fail "SIG$sig: left in TMPDIR: $(ls -A fwtmp)"
	[ $ms -le 3000 ] || fail "SIG$sig: $ms ms to stop the forward pass"
	echo "SIG$sig during the forward pass: stopped in $ms ms, nothing left"
done

# and once the stages run (random gates: no forward pass; 120 MiB to copy):
# mk-moe dies by the signal, its stages with it, its work directory gone
sed 's/gate_mode: hidden/gate_mode: random/' fw.yml > fwr.yml
TMPDIR=$PWD/fwtmp mk-moe -q --i-understand-this-is-not-useful-without-training fwr.yml fwout 2> fw.err &
y=$!
t=0
while [ -z "$(ps -o pid= --ppid $y 2>/dev/null)" ] && [ -e /proc/$y ] && [ $t -lt 3000 ]; do
	sleep 0.01; t=$((t + 1))
done
if [ ! -e fwout ] && kill -TERM $y 2>/dev/null; then
	set +e; wait $y; rc=$?; set -e
	[ $rc -eq 143 ] || { cat fw.err >&2; fail "SIGTERM while the stages run: mk-moe exited $rc"; }
	[ ! -e fwout ] || fail "SIGTERM while the stages run: OUT appeared"
	[ -z "$(ls -A fwtmp)" ] || fail "SIGTERM while the stages run: left in TMPDIR: $(ls -A fwtmp)"
	echo "SIGTERM while the stages run: no OUT, no work directory"
else
	wait $y || { cat fw.err >&2; fail "mk-moe failed"; }
	echo "the stages finished before the kill; SIGTERM while they run not tested"
fi
rm -rf fwout fwout.mk-partial

# memory: expert tensors (3 layers x 3 x 2 experts x 8 MiB = 144 MiB) over
# an 80 MiB budget; mk-moe's planning (the base's forward pass for the
# hidden routers: one layer in float32, 54 MiB) and the three stages, their
# peaks summed as if they were all at once, stay within 80 MiB + 32 MiB
if [ "$MK_SAN" = 0 ]; then
	for s in 1 2 3; do
		mk-gen-model --seed $s --layers 3 --hidden 512 --inter 8192 --vocab 96 --dtype BF16 --arch mistral \
			--bpe-tokenizer big$s >/dev/null
	done
	printf 'base_model: big1\ngate_mode: hidden\nexperts:\n  - source_model: big2\n    positive_prompts: ["1+2=3"]\n  - source_model: big3\n    positive_prompts: ["(!?)"]\n' > big.yml
	mk-rss moe.rss mk-moe -q --max-memory 80M --print-pipeline big.yml bigout > pipe.txt
	pipe=$(cat pipe.txt)
	plan=$(printf '%s\n' "$pipe" | sed 's/.* -i \([^ ]*\).*/\1/')
	set -- $(printf '%s\n' "$pipe" | sed 's/ | /\n/g' | sed -n 1p)
	f="$*"
	set -- $(printf '%s\n' "$pipe" | sed 's/ | /\n/g' | sed -n 2p)
	m="$*"
	set -- $(printf '%s\n' "$pipe" | sed 's/ | /\n/g' | sed -n 3p)
	p="$*"
	mk-rss f.rss $f | mk-rss m.rss $m | mk-rss p.rss $p
	rm -rf "$(dirname "$plan")"
	total=$(( $(cat moe.rss) + $(cat f.rss) + $(cat m.rss) + $(cat p.rss) ))
	echo "mk-moe --max-memory 80M: planning $(cat moe.rss) KiB, mk-fetch $(cat f.rss), mk-merge $(cat m.rss), mk-pack $(cat p.rss); $total KiB in all"
	[ "$total" -le $(( (80 + 32) * 1024 )) ] || fail "peak RSS $total KiB over 80 MiB + 32 MiB"
	part 0 bigout 2 gate_proj 1 big3 || fail "big: expert 1 gate_proj differs"
fi
echo "moe: ok"
