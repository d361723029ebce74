# mk-moe's routers against mergekit-moe 0.1.5's (testdata/golden/moe-CASE,
# stored by scripts/moe-conformance --refresh) for the deterministic gate
# modes of test/conformance/moe/*.yml, within the tolerance each case's first
# line states: cheap_embed sums the same float32 embeddings in another
# order (a few float32 ulps); hidden and hidden_avg come from mergekit's
# bfloat16 forward pass, mk's is float32.  The routers' values are at
# most 1 (unit rows), so the tolerance is absolute.
. "$MK_TOP/test/cli/lib.inc"
n=0
for g in "$MK_TOP"/testdata/golden/moe-*; do
	case=${g##*/golden/moe-}
	cfg=$MK_TOP/test/conformance/moe/$case.yml
	tol=$(sed -n '1s/^# mk-conformance: routers tol=\([^ ]*\).*/\1/p' "$cfg")
	[ -n "$tol" ] || fail "$cfg: no router tolerance"
	sed "s|testdata/|$MK_TOP/testdata/|g" "$cfg" > "$case.yml"
	mk-moe -q "$case.yml" "out-$case"
	mk-st-compare --tol "$tol" --only gate.weight "out-$case" "$g" > "$case.txt" ||
		{ cat "$case.txt"; fail "$case: routers differ from mergekit-moe's beyond $tol"; }
	echo "$case: $(grep -c . "$case.txt") routers within $tol"
	n=$((n + 1))
done
[ "$n" -ge 4 ] || fail "only $n golden MoE cases"
echo "moe-golden: $n cases ok"
