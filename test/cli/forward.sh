# The forward pass (mk_forward) reads every checkpoint layout mk reads:
# the same model as sharded safetensors and as PyTorch .bin shards whose
# tensors are views that are not contiguous (test/tools/mk-gen-torchbin.py
# --strided) gives bit-identical hidden states; a memory budget under what
# the batch needs is refused before any weight is read; --cuda through
# the emulated device (MK_CUDA_EMULATE=1) stays within 1e-5 of the CPU's
# hidden states (relative to max |h|: the products' summation order alone
# differs) and, without a device, fails saying why.  (The hidden states
# against transformers' are test/unit/test_forward.c's.)
. "$MK_TOP/test/cli/lib.inc"
command -v python3 >/dev/null 2>&1 || exit 77
mk-gen-model --arch qwen2 --dtype BF16 --hidden 64 --heads 4 --kv-heads 2 --inter 96 --vocab 64 --layers 2 \
	--weight-scale 8 --unit-norms --shards 3 st > /dev/null
python3 "$MK_TOP/test/tools/mk-gen-torchbin.py" st bin --shards 2 --strided
[ -f bin/pytorch_model.bin.index.json ] && [ ! -e bin/model.safetensors.index.json ] || fail "no .bin shards"
mk-forward-bench st 3 9 > st.out
mk-forward-bench bin 3 9 > bin.out
[ "$(grep -c '^hidden' st.out)" -eq 3 ] || fail "expected 3 hidden states: $(cat st.out)"
grep '^hidden' st.out > st.h
grep '^hidden' bin.out > bin.h
cmp st.h bin.h || fail "safetensors and strided .bin differ: $(paste st.h bin.h)"
# the budget: what the run needs passes, one byte less is refused
need=$(sed -n 's/.*need \([0-9]*\)$/\1/p' st.out)
[ -n "$need" ] || fail "no need in $(cat st.out)"
mk-forward-bench --max-memory "$need" st 3 9 > /dev/null
expect_fail 1 "over the memory budget" mk-forward-bench --max-memory $((need - 1)) st 3 9
grep -q '^hidden' out.txt && fail "a hidden state came before the budget was checked"
# --cuda: the emulated device against the CPU; the real one refused here
# unless there is one
MK_CUDA_EMULATE=1 mk-forward-bench --cuda --compare st 3 9 > emu.out || fail "emulated --cuda: $(cat emu.out)"
grep -q '^cuda vs cpu: within the tolerance 1e-05' emu.out || fail "no comparison: $(cat emu.out)"
grep -q '^compare 2: ' emu.out || fail "not every hidden state compared: $(cat emu.out)"
MK_CUDA_EMULATE=1 mk-forward-bench --cuda st 3 9 | grep '^hidden' > emu.h
cmp st.h emu.h > /dev/null && fail "the emulated device gave the CPU's bits (did it run?)"
if ! mk-forward-bench --cuda st 3 9 > dev.out 2> dev.err; then
	grep -q -- '--cuda: CUDA: ' dev.err || fail "--cuda without a device: $(cat dev.err)"
fi
:
