# Conformance with mergekit-pytorch 0.1.5, offline: every
# test/conformance-pytorch/*.yml (state dicts; its flags on a
# "# mk-pytorch:" line) merged by mk-pytorch against the golden tensors
# scripts/conformance stored from mergekit-pytorch
# (testdata/golden/pytorch/CASE), with the tolerance the case's first
# line states (see scripts/conformance); and OUT holds the tensors alone,
# as mergekit-pytorch's does.
. "$MK_TOP/test/cli/lib.inc"
conformance_scratch conf-pt
n=0
for cfg in test/conformance-pytorch/*.yml; do
	case=$(basename "$cfg" .yml)
	g=testdata/golden/pytorch/$case
	[ -d "$g" ] || fail "no golden files for $case (run scripts/conformance --refresh $case)"
	flags=$(sed -n 's/^# mk-pytorch: //p' "$cfg")
	mk-pytorch --quiet $flags "$cfg" "$out/$case" 2> "$out/$case.err" || { cat "$out/$case.err"; fail "$case: mk-pytorch failed"; }
	args=$(conformance_tol_args "$cfg")
	mk-st-compare $args "$out/$case" "$g" > "$out/$case.txt" || { cat "$out/$case.txt"; fail "$case: tensors differ from mergekit-pytorch's"; }
	ls "$out/$case" | grep -qv '^model.*safetensors' && fail "$case: OUT holds files besides the tensors"
	# the same tensor names (mk-st-compare looks up mk's in mergekit's)
	python3 - "$out/$case" "$g" <<'PY' || fail "$case: not the tensors mergekit-pytorch writes"
import glob, json, struct, sys
def names(d):
    s = set()
    for f in glob.glob(d + "/*.safetensors"):
        with open(f, "rb") as fh:
            s |= set(json.loads(fh.read(struct.unpack("<Q", fh.read(8))[0]))) - {"__metadata__"}
    return s
a, b = names(sys.argv[1]), names(sys.argv[2])
sys.exit(0 if a == b else "only mk: %s; only mergekit: %s" % (sorted(a - b), sorted(b - a)))
PY
	n=$((n + 1))
done
[ $n -ge 5 ] || fail "only $n cases"
echo "conformance-pytorch: $n cases agree with mergekit-pytorch"
