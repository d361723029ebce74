# mk-merge --cuda: the stream path through the GPU batching.  Without a
# GPU (here) MK_CUDA_EMULATE=1 runs the GPU kernels' element code on the
# host through the same packing and launches; on a GPU machine
# scripts/gpu-check.sh runs this comparison on the device.  Every method
# with a kernel, held and streamed, gives the CPU's bytes; a method
# without one falls back to the CPU; no GPU and no emulation: a note.
. "$MK_TOP/test/cli/lib.inc"
C=$MK_TOP/testdata/models/conf
for cfg in linear-f32 linear-bf16 slerp-bf16 slerp-gradient-f32 task-arithmetic-f32 ties-f32 breadcrumbs-ties-f32 \
	   dare_ties della_linear karcher-f32; do
	case $cfg in
	dare_ties|della_linear)
		sed -e "s|testdata/models/conf|$C|g" -e "s|^merge_method: ties|merge_method: $cfg|" \
			"$MK_TOP/test/conformance/ties-f32.yml" > $cfg.yml ;;
	*) sed "s|testdata/models/conf|$C|g" "$MK_TOP/test/conformance/$cfg.yml" > $cfg.yml ;;
	esac
	for mem in default 1; do
		if [ $mem = default ]; then mk-plan $cfg.yml > plan.mks; else mk-plan --max-memory $mem $cfg.yml > plan.mks; fi
		mk-fetch < plan.mks > in.mks
		mk-merge < in.mks > cpu.mks
		MK_CUDA_EMULATE=1 mk-merge --cuda -v -v < in.mks > gpu.mks 2> gpu.txt
		cmp cpu.mks gpu.mks || fail "$cfg ($mem): --cuda differs from the CPU"
		n=$(sed -n 's/.*--cuda: \([0-9]*\) of \([0-9]*\) jobs on the GPU.*/\1/p' gpu.txt)
		[ -n "$n" ] || { cat gpu.txt; fail "$cfg: no --cuda summary"; }
		case $cfg in
		karcher-f32) [ "$n" -eq 0 ] || fail "karcher has no GPU kernel, yet $n jobs ran there" ;;
		*) [ "$n" -gt 0 ] || { cat gpu.txt; fail "$cfg ($mem): no job ran on the (emulated) GPU"; } ;;
		esac
		echo "$cfg ($mem): $(grep -- '--cuda: [0-9]' gpu.txt)"
	done
done
# small jobs share launches (the queue), here all 30 of linear's in one
MK_CUDA_EMULATE=1 mk-plan linear-f32.yml | mk-fetch | MK_CUDA_EMULATE=1 mk-merge --cuda -v -v 2> q.txt > /dev/null
l=$(sed -n 's/.* chunks in \([0-9]*\) launches.*/\1/p' q.txt)
[ -n "$l" ] && [ "$l" -lt 30 ] || { cat q.txt; fail "30 small jobs took ${l:-?} launches"; }
# tensors larger than a launch (80 MiB float32 embeddings; launches of
# 64 MiB of staging) are cut into pieces, held and streamed
mk-gen-model --dtype F32 --hidden 1024 --layers 1 --vocab 20000 --seed 1 g1 > /dev/null
mk-gen-model --dtype F32 --hidden 1024 --layers 1 --vocab 20000 --seed 2 g2 > /dev/null
printf 'merge_method: ties\nbase_model: g1\nmodels:\n  - model: g2\n    parameters: {weight: 0.7, density: 0.4}\n' > big.yml
for mem in default 1; do
	if [ $mem = default ]; then mk-plan big.yml > plan.mks; else mk-plan --max-memory $mem big.yml > plan.mks; fi
	mk-fetch < plan.mks > in.mks
	mk-merge < in.mks > cpu.mks
	MK_CUDA_EMULATE=1 mk-merge --cuda -v -v < in.mks > gpu.mks 2> gpu.txt
	cmp cpu.mks gpu.mks || fail "big ties ($mem): --cuda differs from the CPU"
	echo "big ties ($mem): $(grep -- '--cuda: [0-9]' gpu.txt)"
done
# no device and no emulation: a note, the CPU's bytes
mk-merge --cuda < in.mks > nogpu.mks 2> note.txt
cmp cpu.mks nogpu.mks || fail "--cuda without a GPU differs"
grep -q "note: --cuda: .*merging on the CPU" note.txt || { cat note.txt; fail "no note without a GPU"; }
