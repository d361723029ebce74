# mk-moe --cuda: the hidden gates' forward pass with its matrix products
# on the GPU.  Without a usable device (or in a build without CUDA) a
# warning says why and the CPU computes the same bytes as without --cuda
# (as mk-merge --cuda falls back); through the emulated device
# (MK_CUDA_EMULATE=1: the GPU's summation order on the host) the routers
# equal the CPU's within 1e-5 (the products are summed in another order
# than OpenBLAS's: 1.8e-7 measured on these float32 routers of norm 1)
# but not bit for bit past layer 0 (so the device path did run; layer 0's
# router is the embeddings'), every other tensor bit for bit.
. "$MK_TOP/test/cli/lib.inc"

for s in 1 2 3; do
	mk-gen-model --seed $s --layers 2 --hidden 64 --inter 128 --vocab 96 --dtype F32 --arch mistral \
		--weight-scale 8 --unit-norms --bpe-tokenizer m$s >/dev/null
done
printf 'base_model: m1\ngate_mode: hidden\nexperts:\n  - source_model: m2\n    positive_prompts: ["1+2=3", "x"]\n  - source_model: m3\n    positive_prompts: ["(!?)"]\n    negative_prompts: ["ab"]\n' > h.yml
mk-moe -q h.yml cpu
mk-moe --cuda h.yml dev 2> dev.err || { cat dev.err >&2; fail "--cuda failed"; }
if grep -q 'warning: --cuda:' dev.err; then
	grep -q "runs on the CPU" dev.err || fail "the warning does not say the CPU runs it: $(cat dev.err)"
	mk-st-compare --tol 0 dev cpu >/dev/null || fail "--cuda without a device differs from the CPU"
else   # a GPU: the routers within the tolerance, the rest bit for bit
	mk-st-compare --tol 1e-5 --only ".gate." dev cpu >/dev/null || fail "--cuda routers differ from the CPU's"
fi
MK_CUDA_EMULATE=1 mk-moe -v --cuda h.yml emu 2> emu.err || { cat emu.err >&2; fail "emulated --cuda failed"; }
grep -q -- "--cuda: the base model's matrix products on host emulation" emu.err ||
	fail "no emulated context said: $(cat emu.err)"
mk-st-compare --tol 1e-5 --only ".gate." emu cpu >/dev/null || fail "emulated --cuda routers differ from the CPU's"
mk-st-compare --tol 0 --only "layers.1.mlp.gate." emu cpu >/dev/null && fail "emulated --cuda: layer 1's router is the CPU's bit for bit (no device path?)"
mk-st-compare --tol 0 --only "layers.0.mlp.gate." emu cpu >/dev/null || fail "emulated --cuda: layer 0's router (the embeddings) differs"
mk-st-compare --tol 0 --only "experts" emu cpu >/dev/null || fail "emulated --cuda: the experts differ"
mk-st-compare --tol 0 --only "self_attn" emu cpu >/dev/null || fail "emulated --cuda: attention differs"
# --no-cuda undoes it: no context, no warning
mk-moe --cuda --no-cuda h.yml off 2> off.err
grep -q -- '--cuda' off.err && fail "--no-cuda still tried the GPU: $(cat off.err)"
mk-st-compare --tol 0 off cpu >/dev/null || fail "--no-cuda differs from the CPU"
echo "moe-cuda: ok"
