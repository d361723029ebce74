#!/bin/sh
# lowrank-gpu-check.sh [BUILD] - the longer GPU check of src/methods
# (lowrank*)'s SVDs (scripts/gpu-check.sh runs a short one), on a machine with a CUDA device, cuBLAS and cuSOLVER, after
#   make -j"$(nproc)" BUILD=BUILD all BUILD/test/test_lowrank
# (BUILD default build; with scripts/gpu-check.sh's carried libraries,
# its BUILD=build-gpucheck and flags).  Runs test_lowrank, whose test_cuda
# compares the GPU's exact and randomized factors with the CPU's (B A
# within 1e-4 and 1e-3, the same error within 1e-4), then times the randomized call at rank 128 on the
# CPU and on the GPU, and the exact one on the CPU, on planted 4096 x 4096
# and 4096 x 14336 deltas.  About three minutes on 16 cores.
set -u
top=$(cd "$(dirname "$0")/.." && pwd)
b=$top/${1:-build}
rc=0
"$b/test/test_lowrank" 2>&1 | grep -E 'GPU|no GPU|PASSED|FAILED|ERROR' || rc=1
for size in "-m 4096 -n 4096" "-m 4096 -n 14336"; do
	# shellcheck disable=SC2086
	"$b/tools/mk-lowrank-bench" $size -r 128 -o 16 -q 2 || rc=1
	# shellcheck disable=SC2086
	"$b/tools/mk-lowrank-bench" $size -r 16,128 -o 16 -q 2 -x -g || rc=1
done
exit $rc
