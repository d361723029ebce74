# OpenBLAS's kernels: a DYNAMIC_ARCH OpenBLAS that does not recognize the
# CPU (a virtual machine's CPUID model) falls back to its SSE3 Prescott
# kernels; mk's programs then start again with OPENBLAS_CORETYPE naming
# the AVX-512 (SkylakeX) or AVX2 (Haswell) kernels the CPU has.  --version
# says which are in use.  Checked against the CPU's flags; an explicit
# OPENBLAS_CORETYPE is left alone.
. "$MK_TOP/test/cli/lib.inc"
mk-yaml --version > v.txt
grep -q '^mk-yaml ' v.txt || fail "--version lacks the program's name"
core=$(sed -n 's/^OpenBLAS kernels: //p' v.txt)
[ -n "$core" ] || { echo "not linked with OpenBLAS: nothing to check"; exit 77; }
flags=$(grep -m1 '^flags' /proc/cpuinfo)
has() { for f; do case " $flags " in *" $f "*) ;; *) return 1 ;; esac; done; }
if [ "$core" = Prescott ]; then
	if has avx2 fma; then fail "the CPU has AVX2 and FMA, and mk-yaml runs OpenBLAS's Prescott kernels"; fi
fi
if has avx512f avx512bw avx512dq avx512vl avx512cd; then
	case $core in Prescott|Core2|Nehalem) fail "an AVX-512 CPU runs OpenBLAS's $core kernels" ;; esac
fi
echo "kernels: $core"
# the user's choice stands, in every program and in the stages it starts
OPENBLAS_CORETYPE=Prescott mk-merge --version | grep -q '^OpenBLAS kernels: Prescott$' ||
	fail "OPENBLAS_CORETYPE=Prescott was not kept"
# (arguments survive the new start: a plan made with them)
printf 'merge_method: linear\nmodels:\n  - model: %s\n    parameters: {weight: 1}\n' "$MK_TOP/testdata/models/tiny-a" > l.yml
mk-plan --name "two words" l.yml > p.mks || fail "mk-plan with arguments"
grep -aq "# two words" p.mks || fail "an argument with a space lost in the new start"
echo "blas-kernels: ok"
