# Conformance with mergekit-multi 0.1.5, offline: every
# test/conformance-multi/*.yml recipe run by mk-multi, each merge's
# tensors against the golden ones scripts/conformance stored from
# mergekit-multi (testdata/golden/multi/CASE/STEP), with the tolerance
# the case's first line states; config.json with mergekit's values; and
# the final merge run with --no-intermediates, the same bytes.
. "$MK_TOP/test/cli/lib.inc"
conformance_scratch conf-multi
n=0
for cfg in test/conformance-multi/*.yml; do
	case=$(basename "$cfg" .yml)
	args=$(conformance_tol_args "$cfg")
	mk-multi --quiet "$cfg" -I "$out/$case" --out-path "$out/$case/final"
	for step in $(sed -n 's/^name: //p' "$cfg") final; do
		g=testdata/golden/multi/$case/$step
		[ -d "$g" ] || fail "no golden files for $case/$step (run scripts/conformance --refresh $case)"
		mk-st-compare $args "$out/$case/$step" "$g" > "$out/$case-$step.txt" ||
			{ cat "$out/$case-$step.txt"; fail "$case/$step: tensors differ from mergekit-multi's"; }
		python3 - "$out/$case/$step/config.json" "$g/config.json" <<'PY' || fail "$case/$step: config.json differs"
import json, sys
mk, ref = (json.load(open(p)) for p in sys.argv[1:])
bad = [k for k in mk if k not in ("torch_dtype", "dtype") and mk[k] != ref.get(k)]
sys.exit(f"keys differing from mergekit's: {bad}" if bad else 0)
PY
		n=$((n + 1))
	done
	# streamed where it can be (--no-intermediates): the final merge's
	# bytes are those above, so mergekit-multi's too
	mk-multi --quiet --no-intermediates "$cfg" -I "$out/$case-s" --out-path "$out/$case-s/final"
	for f in "$out/$case/final"/*.safetensors "$out/$case/final/config.json"; do
		cmp "$f" "$out/$case-s/final/${f##*/}" || fail "$case: --no-intermediates: ${f##*/} differs"
	done
	# a chain whose every merge is read once: nothing written but OUT
	case $case in
	*-chain-*) [ "$(ls "$out/$case-s")" = final ] || { ls "$out/$case-s"; fail "$case: --no-intermediates wrote an intermediate"; } ;;
	esac
done
[ $n -ge 6 ] || fail "only $n merges"
echo "conformance-multi: $n merges agree with mergekit-multi"
