# The bundled tiny models are what the generator makes (deterministic).
. "$MK_TOP/test/cli/lib.inc"
mk-gen-model --seed 1 a
mk-gen-model --seed 2 --shards 2 b
for f in "$MK_TOP"/testdata/models/tiny-a/*; do cmp "$f" "a/$(basename "$f")"; done
for f in "$MK_TOP"/testdata/models/tiny-b/*; do cmp "$f" "b/$(basename "$f")"; done
# and the README's first command works on them
mk-fetch --model "$MK_TOP/testdata/models/tiny-a" | mk-pack --out-shard-size 200K out
[ -f out/model.safetensors.index.json ] || fail "200K did not shard tiny-a"
mk-st-diff "$MK_TOP/testdata/models/tiny-a" out
# the conformance models too
mkdir -p c
for dt in F32 BF16; do
	l=$(echo $dt | tr A-Z a-z)
	for s in a b c; do
		seed=$(( $(printf '%d' "'$s") + 100 ))
		mk-gen-model --dtype $dt --layers 3 --hidden 16 --vocab 32 --seed $seed c/llama-$l-$s
		mk-gen-model --arch mistral --dtype $dt --layers 3 --hidden 16 --vocab 32 --seed $((seed + 50)) c/mistral-$l-$s
	done
done
mk-gen-model --dtype F32 --layers 3 --hidden 16 --vocab 40 --seed 170 c/llama-f32-v40
for s in a b; do
	mk-gen-model --dtype F32 --layers 3 --hidden 16 --vocab 32 --bpe-tokenizer --seed $(( $(printf '%d' "'$s") + 200 )) c/llama-f32-tok-$s
done
# vocabularies that differ: ChatML tokens added, regular tokens that
# overlap partly, a tokenizer longer than the vocab size, tied bfloat16
mk-gen-model --dtype F32 --layers 3 --hidden 16 --vocab 34 --seed 230 --bpe-tokenizer='<s>,</s>,<|im_start|>,<|im_end|>' c/llama-f32-tok-chat
mk-gen-model --dtype F32 --layers 3 --hidden 16 --vocab 32 --seed 231 --tok-skip 6 --bpe-tokenizer c/llama-f32-tok-skip
mk-gen-model --dtype F32 --layers 3 --hidden 16 --vocab 32 --seed 232 --tok-size 34 --bpe-tokenizer='<s>,</s>,<|x|>,<|y|>' c/llama-f32-tok-long
mk-gen-model --dtype BF16 --layers 3 --hidden 16 --vocab 32 --seed 233 --tied --tok-skip 3 --bpe-tokenizer c/llama-bf16-tok-tied-a
mk-gen-model --dtype BF16 --layers 3 --hidden 16 --vocab 33 --seed 234 --tied --bpe-tokenizer='<s>,</s>,<pad>' c/llama-bf16-tok-tied-b
# SentencePiece-style Unigram tokenizers that overlap partly
mk-gen-model --dtype F32 --layers 3 --hidden 16 --vocab 32 --seed 235 --unigram --bpe-tokenizer c/llama-f32-tok-uni-a
mk-gen-model --dtype F32 --layers 3 --hidden 16 --vocab 34 --seed 236 --unigram --tok-skip 4 --bpe-tokenizer='<s>,</s>,<|im_start|>,<|im_end|>' c/llama-f32-tok-uni-b
# a SentencePiece tokenizer.model alone (testdata/tokenizers/README)
mk-gen-model --dtype F32 --layers 3 --hidden 16 --vocab 48 --seed 237 --spm "$MK_TOP/testdata/tokenizers/spm-bpe-48.model" c/llama-f32-tok-spm-a
mk-gen-model --dtype F32 --layers 3 --hidden 16 --vocab 50 --seed 238 --spm "$MK_TOP/testdata/tokenizers/spm-bpe-48.model" --spm-added '<|im_start|>,<|im_end|>' c/llama-f32-tok-spm-b
# a state dict of two layers alone (mk-pytorch's cases: tensors the others lack)
mk-gen-model --dtype F32 --layers 2 --hidden 16 --vocab 32 --seed 241 c/llama-f32-l2 > /dev/null
# a slow GPT-2 tokenizer alone (vocab.json, merges.txt)
mk-gen-model --dtype F32 --layers 3 --hidden 16 --vocab 32 --seed 239 --slow --bpe-tokenizer='<s>,<|endoftext|>' c/llama-f32-tok-gpt2-a
mk-gen-model --dtype F32 --layers 3 --hidden 16 --vocab 34 --seed 240 --slow --tok-skip 2 --bpe-tokenizer='<s>,<|endoftext|>,<|im_start|>,<|im_end|>' c/llama-f32-tok-gpt2-b
for d in "$MK_TOP"/testdata/models/conf/*; do
	# the LoRA adapters are PEFT's own (scripts/conformance makes them in
	# its venv), not the generator's
	case $(basename "$d") in lora-*) continue ;; esac
	for f in "$d"/*; do cmp "$f" "c/$(basename "$d")/$(basename "$f")"; done
done
