# mk-cat --verify accepts exactly the streams the stage that reads them
# accepts: tensors streams against mk-pack (mk-forge's odd streams and a
# real one), inputs streams against mk-merge, plans against mk-fetch.
. "$MK_TOP/test/cli/lib.inc"
n=0
agree() { # what verify_rc stage_rc
	v=$2 s=$3
	if [ "$v" = 0 ] && [ "$s" != 0 ] || [ "$v" != 0 ] && [ "$s" = 0 ]; then
		fail "$1: mk-cat --verify exit $v, the stage exit $s"
	fi
	n=$((n + 1))
}
i=0
for k in ok unknown-critical unknown-ancillary bad-file=../x bad-file=model.safetensors \
	 bad-file=model-00001-of-00002.safetensors bad-file=config.json file-twice file-folder plan out-of-order \
	 missing-data no-end bad-dtype data-pass big-file=100; do
	i=$((i + 1))
	mk-forge "$k" > s$i.mks
	v=0; mk-cat --verify s$i.mks > /dev/null 2>v$i.err || v=$?
	s=0; mk-pack -i s$i.mks out$i 2>p$i.err || s=$?
	agree "tensors stream '$k'" $v $s
done
# the good ones must pass, so the loop above cannot pass by refusing all
mk-forge ok > ok.mks
mk-cat --verify ok.mks | grep -q '^ok: tensors stream' || fail "a sound stream does not verify"
# a real plan, its inputs and tensors streams
(cd "$MK_TOP" && mk-plan testdata/configs/ties.yml) > plan.mks
mk-cat --verify plan.mks | grep -q '^ok: plan stream, .* 21 jobs' || fail "the plan does not verify"
(cd "$MK_TOP" && mk-fetch) < plan.mks > in.mks
mk-cat --verify in.mks | grep -q '^ok: inputs stream, .* 21 jobs, 42 chunks' || fail "the inputs do not verify"
mk-merge < in.mks > t.mks
mk-cat --verify t.mks | grep -q '^ok: tensors stream' || fail "the tensors do not verify"
# an inputs stream cut short inside a job: mk-merge and verify refuse it
head -c $(( $(wc -c < in.mks) / 2 )) in.mks > cut.mks
v=0; mk-cat --verify cut.mks > /dev/null 2>&1 || v=$?
s=0; mk-merge < cut.mks > /dev/null 2>&1 || s=$?
[ $v != 0 ] || fail "a cut inputs stream verifies"
agree "a cut inputs stream" $v $s
echo "$n verdicts agree"
# a job whose inputs must agree (not floats: compared, not merged) with
# its input 1 never sent: mk-merge and --verify both refuse it
mk-gen-model --dtype I32 --layers 1 int1 > /dev/null
mk-gen-model --dtype I32 --layers 1 int2 > /dev/null
printf 'merge_method: linear\nmodels:\n  - model: int1\n    parameters: {weight: 1}\n  - model: int2\n    parameters: {weight: 1}\n' > int.yml
mk-plan int.yml | mk-fetch > int.mks
mk-cat int.mks | grep -q '"id":0,.*"check_equal":true' || fail "job 0 of the int merge is not a check_equal job"
mk-merge -i int.mks -o /dev/null || fail "the int merge failed"
mk-forge drop-input=0/1 < int.mks > intcut.mks
expect_fail 1 "input 1 sent no data for elements [0, 16384) to compare with input 0" mk-merge -i intcut.mks -o x.mks
expect_fail 1 "input 1 sent no data for elements [0, 16384) to compare with input 0" mk-cat --verify intcut.mks
