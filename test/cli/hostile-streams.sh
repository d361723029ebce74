# Hostile streams and runs: every tool holds bounded memory on any stream
# (FILE and ancillary frames read in pieces, other frames under a memory
# bound, a HEAD parsed an entry at a time); two runs into one OUT; plugins
# from writable places; quantized checkpoints refused at plan time.
. "$MK_TOP/test/cli/lib.inc"
KiB=1024

# -- mk-cat on frames larger than memory should allow --------------------
# a 256 MiB file in a zstd FILE frame of a few KiB, and in a note
mk-forge zstd-file=268435456 > zf.mks
mk-forge big-note=268435456 > note.mks
[ "$(stat -c %s zf.mks)" -lt 65536 ] || fail "zstd-file stream not small"
for s in zf note; do
	mk-rss cat.rss mk-cat $s.mks > cat.txt
	rss_under cat.rss $((48 * KiB)) "mk-cat, 256 MiB $s frame"
	mk-rss cat.rss mk-cat -v $s.mks > /dev/null
	rss_under cat.rss $((48 * KiB)) "mk-cat -v, 256 MiB $s frame"
	mk-rss verify.rss mk-cat --verify $s.mks > /dev/null
	rss_under verify.rss $((48 * KiB)) "mk-cat --verify, 256 MiB $s frame"
	mk-rss pack.rss mk-pack out-$s < $s.mks
	rss_under pack.rss $((48 * KiB)) "mk-pack, 256 MiB $s frame"
done
mk-cat zf.mks | grep -q "name=big.bin mode=0644 size=268435456" || fail "mk-cat: FILE frame's name or size"
mk-cat note.mks | grep -q '^#[0-9]* note ancillary len=[0-9]* zstd raw=268435456' || fail "mk-cat: the note frame"
[ "$(stat -c %s out-zf/big.bin)" = 268435456 ] || fail "mk-pack: big.bin not written whole"
# uncompressed: 96 MiB of FILE through a pipe
mk-forge file=100663296 | mk-rss cat.rss mk-cat > /dev/null
rss_under cat.rss $((48 * KiB)) "mk-cat, a 96 MiB FILE frame"
mk-forge file=100663296 | mk-rss verify.rss mk-cat --verify > /dev/null
rss_under verify.rss $((48 * KiB)) "mk-cat --verify, a 96 MiB FILE frame"
# a damaged FILE frame read in pieces is still found
mk-forge zstd-file=1048576 > small.mks
n=$(stat -c %s small.mks)
head -c $((n - 150)) small.mks > cut.mks
expect_fail 1 "truncated" mk-cat cut.mks
expect_fail 1 "truncated" mk-cat --verify cut.mks

# frames held whole: over --max-memory (256 MiB by default) refused before
# they are read, in every mode
mk-forge big-chunk=33554432 > chunk.mks
for v in "" --verify; do
	expect_fail 1 "frame #1 (DATA): holding its 33554480 bytes needs more than the memory budget of 16777216 bytes" \
		mk-cat $v --max-memory 16MiB chunk.mks
	mk-cat $v chunk.mks > /dev/null || fail "mk-cat $v: a 32 MiB DATA frame under the default bound"
	mk-forge data-bomb=1073741824 > bomb.mks
	expect_fail 1 "frame #1 (DATA)" mk-cat $v bomb.mks
done
expect_fail 2 "--max-memory" mk-cat --max-memory 0 chunk.mks
expect_fail 1 "more than --max-memory" mk-pack --max-memory 16MiB cout < chunk.mks
no_out cout

# -- a large HEAD: parsed an entry at a time -------------------------------
# 150000 tensors, 13 MiB of JSON: a few times that, not 12-17 times
mk-forge big-head=150000 > head.mks
mk-rss cat.rss mk-cat head.mks > /dev/null
rss_under cat.rss $((64 * KiB)) "mk-cat, a 13 MiB HEAD"
mk-rss cat.rss mk-cat -v head.mks > cat.txt
rss_under cat.rss $((64 * KiB)) "mk-cat -v, a 13 MiB HEAD"
[ "$(grep -c '^  tensor ' cat.txt)" = 150000 ] || fail "mk-cat -v: not every tensor listed"
# (the stream has no DATA: --verify reads the whole HEAD, then says so)
expect_fail 1 "tensor 'model.layers.0.self_attn.q_proj.weight.00000000' incomplete" mk-rss verify.rss mk-cat --verify head.mks
rss_under verify.rss $((64 * KiB)) "mk-cat --verify, a 13 MiB HEAD"
set +e
mk-rss pack.rss mk-pack hout < head.mks 2> err.txt
rc=$?
set -e
[ $rc = 1 ] || fail "mk-pack: a stream of no DATA accepted ($rc)"
err_has "incomplete" "mk-pack: the missing DATA not named"
no_out hout
rss_under pack.rss $((120 * KiB)) "mk-pack, a 13 MiB HEAD"

# a JOB's unknown keys (kept with each job a reader holds): 16 MB of them
# refused before they become a tree
mk-forge big-job=16000000 > job.mks
mk-gen-model --dtype F32 --hidden 64 --layers 1 a   # the plan's model
expect_fail 1 "frame #1: JOB: unknown key \"zzz\"" mk-rss verify.rss mk-cat --verify job.mks
rss_under verify.rss $((48 * KiB)) "mk-cat --verify, a JOB of 16 MB of unknown keys"
expect_fail 1 "unknown key \"zzz\"" mk-rss fetch.rss mk-fetch -i job.mks -o /dev/null
rss_under fetch.rss $((48 * KiB)) "mk-fetch, a JOB of 16 MB of unknown keys"

# -- two runs into one OUT: the second refused, touching nothing ------------
mk-gen-model --dtype F32 --hidden 64 --layers 2 ma
mk-gen-model --dtype F32 --hidden 64 --layers 2 --seed 9 mb
slerp_config two.yml ma mb
mk-fetch --model ma > ma.mks
hl=$(mk-cat ma.mks | sed -n 2p | sed 's/.* len=\([0-9]*\) .*/\1/')
mkfifo feed
mk-pack held < feed &
first=$!
exec 3> feed
# wait_for PATH: until it exists (the first run's state), or fail
wait_for() {
	t=0
	while [ ! -e "$1" ] && [ $t -lt 6000 ]; do sleep 0.01; t=$((t + 1)); done
	[ -e "$1" ] || fail "$1 never appeared"
}
# second_runs: each way of writing OUT refused, naming the first run;
# the partial as it was, no OUT
second_runs() {
	ls -A held.mk-partial > before.txt
	for c in "mk-pack held" "mk-pack --resume held" "mk-pack --force held" "mk-yaml two.yml held" \
		 "mk-yaml --resume two.yml held" "mk-yaml --processes two.yml held" \
		 "mk-yaml --processes --resume two.yml held" "mk-yaml --force two.yml held"; do
		expect_fail 1 "another mk run is writing held (pid $first)" $c < ma.mks
		ls -A held.mk-partial | cmp -s - before.txt || fail "$c changed held.mk-partial"
		[ ! -e held ] || fail "$c wrote held"
	done
}
wait_for held.mk-partial          # locked, before the HEAD
second_runs
head -c $((16 + 32 + hl)) ma.mks >&3
wait_for held.mk-partial/model.safetensors   # writing
second_runs
tail -c +$((16 + 32 + hl + 1)) ma.mks >&3
exec 3>&-
wait $first || fail "the first run failed"
mk-st-diff ma held
[ ! -e held.mk-partial ] || fail "held.mk-partial left beside held"
# a partial an earlier run left is still its to resume, and a run that
# fails before writing leaves none
mkdir left.mk-partial
expect_fail 1 "did not finish" mk-pack left < ma.mks
[ -d left.mk-partial ] && [ ! -e left ] || fail "an earlier run's partial touched"
rmdir left.mk-partial
printf 'merge_method: bogus\nmodels:\n  - model: ma\n' > bogus.yml
expect_fail 1 "unknown merge method" mk-yaml bogus.yml n1/n2/out
[ ! -e n1 ] || fail "a run that failed left OUT's parents it made"
mk-forge no-end | { set +e; mk-pack cut; echo $? > rc.txt; }
[ "$(cat rc.txt)" = 1 ] || fail "a truncated stream accepted"
no_out cut

# -- plugins: the very file checked is loaded, from trusted directories ----
cc=${CC:-cc}
if command -v "$cc" >/dev/null 2>&1; then
	cp "$MK_TOP/test/plugins/weighted_average.c" .
	"$cc" -O2 -fPIC -shared -I"$MK_TOP/include" -o wa.so weighted_average.c
	printf 'merge_method: weighted_average\nmodels:\n  - model: ma\n    parameters: {weight: 3}\n  - model: mb\n    parameters: {weight: 1}\n' > wa.yml
	mk-plan --plugin ./wa.so wa.yml > /dev/null || fail "a plugin in the test's own directory refused"
	# a directory others may write (the plugin root's or the user's, 0644)
	mkdir -m 0777 ww && cp wa.so ww/ && chmod 0777 ww
	expect_fail 1 "plugin ww/wa.so: its directory $PWD/ww is writable by group or others and not sticky" \
		mk-plan --plugin ww/wa.so wa.yml
	expect_fail 1 "writable by group or others and not sticky" env MK_PLUGIN_PATH="$PWD/ww" mk-plan wa.yml
	mkdir -p gw/sub && cp wa.so gw/sub/ && chmod 0775 gw
	expect_fail 1 "its directory $PWD/gw is writable by group or others" mk-plan --plugin gw/sub/wa.so wa.yml
	# sticky (as /tmp): others may add files, not replace these; accepted
	mkdir sticky && chmod 1777 sticky && cp wa.so sticky/
	mk-plan --plugin sticky/wa.so wa.yml > /dev/null || fail "a plugin in a sticky directory refused"
	# symbolic links: to the plugin refused; through a directory, the
	# directories the file is really in are checked
	ln -s wa.so link.so
	expect_fail 1 "plugin ./link.so: a symbolic link" mk-plan --plugin ./link.so wa.yml
	mkdir -p ww/real && cp wa.so ww/real/ && ln -s ww/real via
	expect_fail 1 "its directory $PWD/ww is writable" mk-plan --plugin via/wa.so wa.yml
	mkdir safe && cp wa.so safe/ && ln -s safe safe-link
	mk-plan --plugin safe-link/wa.so wa.yml > /dev/null || fail "a plugin through a link to a safe directory refused"
	# owned by another user: the file, or a directory above it
	if [ "$(id -u)" = 0 ]; then
		mkdir theirs && cp wa.so theirs/ && chown 4242 theirs/wa.so
		expect_fail 1 "plugin theirs/wa.so: owned by another user" mk-plan --plugin theirs/wa.so wa.yml
		mkdir -p theirdir/sub && cp wa.so theirdir/sub/ && chown 4242 theirdir
		expect_fail 1 "its directory $PWD/theirdir is owned by another user" mk-plan --plugin theirdir/sub/wa.so wa.yml
	fi
	# swapped between the check and dlopen: the file checked is loaded, not
	# what the path names by then (a preload renames a plugin whose
	# constructor leaves a mark over it as dlopen is called)
	sed 's/^#include "mk\/method.h"/&\n#include <fcntl.h>\n#include <unistd.h>\n__attribute__((constructor)) static void ran(void) { close(open("swapped-ran", O_CREAT | O_WRONLY, 0644)); }/' \
		weighted_average.c > evil.c
	grep -q swapped-ran evil.c || fail "evil.c not made"
	"$cc" -O2 -fPIC -shared -I"$MK_TOP/include" -o evil.so evil.c
	printf '#define _GNU_SOURCE\n#include <dlfcn.h>\n#include <stdio.h>\n#include <stdlib.h>\nvoid *dlopen(const char *f, int fl)\n{\n\tstatic void *(*real)(const char *, int);\n\tconst char *a = getenv("SWAP_FROM"), *b = getenv("SWAP_TO");\n\tif (!real)\n\t\t*(void **)&real = dlsym(RTLD_NEXT, "dlopen");\n\tif (a && b)\n\t\trename(a, b);\n\treturn real(f, fl);\n}\n' > swap.c
	"$cc" -fPIC -shared -o swap.so swap.c -ldl
	mkdir swapdir && cp wa.so swapdir/ && cp evil.so swapdir/
	[ "$MK_SAN" = 1 ] && export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}verify_asan_link_order=0"
	SWAP_FROM=swapdir/evil.so SWAP_TO=swapdir/wa.so LD_PRELOAD=$PWD/swap.so mk-plan --plugin swapdir/wa.so wa.yml > /dev/null
	[ ! -e swapdir/evil.so ] || fail "the swap did not happen"
	[ ! -e swapped-ran ] || fail "the file swapped in after the check was loaded"
fi

# -- quantized checkpoints refused at plan time, by every program ----------
mk-gen-model --dtype BF16 --hidden 64 --layers 2 \
	--config-extra '"quantization_config": {"quant_method": "fp8", "fmt": "e4m3"}' qcfg
mk-gen-model --dtype BF16 --hidden 64 --layers 2 --quantized fp8-bare qfp8
mk-gen-model --dtype BF16 --hidden 64 --layers 2 --quantized mxfp4-bare qmx
for q in bitsandbytes gptq awq compressed-tensors hqq eetq; do
	mk-gen-model --dtype BF16 --hidden 64 --layers 2 \
		--config-extra "\"text_config\": {\"quantization_config\": {\"quant_method\": \"$q\"}}" q-$q
done
mk-gen-model --dtype BF16 --hidden 64 --layers 2 --seed 3 qplain
# quant MODEL: what names the format in the message
for m in qcfg:"quant_method 'fp8'" qfp8:"tensor 'model.layers.0.mlp.fp8_proj.weight' in F8_E4M3" \
	 qmx:"beside 'model.layers.0.mlp.experts.down_proj_scales'" q-gptq:"quant_method 'gptq'" \
	 q-bitsandbytes:"quant_method 'bitsandbytes'" q-awq:"quant_method 'awq'" \
	 q-compressed-tensors:"quant_method 'compressed-tensors'" q-hqq:"quant_method 'hqq'" q-eetq:"quant_method 'eetq'"; do
	q=${m%%:*} what=${m#*:}
	printf 'merge_method: linear\nmodels:\n  - model: qplain\n    parameters: {weight: 0.5}\n  - model: %s\n    parameters: {weight: 0.5}\n' $q > q.yml
	expect_fail 1 "model '$q'" mk-plan q.yml
	err_has "$what" "mk-plan: $q: the format not named"
	err_has "dequantize it to BF16 first" "mk-plan: $q: no word of what to do"
	expect_fail 1 "model '$q'" mk-yaml q.yml qout
	no_out qout
done
printf 'merge_method: linear\nmodels:\n  - model: qplain\n    parameters: {weight: 0.5}\n  - model: qcfg\n    parameters: {weight: 0.5}\n' > q.yml
expect_fail 1 "model 'qcfg' is quantized (quant_method 'fp8'" mk-yaml --processes q.yml qout
no_out qout
printf 'merge_method: linear\nmodels:\n  - model: qplain\n    parameters: {weight: 0.5}\n  - model: qfp8\n    parameters: {weight: 0.5}\n' > q.yml
expect_fail 1 "model 'qfp8' holds quantized weights" mk-yaml --processes q.yml qout
no_out qout
# as a base, with a slerp
printf 'merge_method: slerp\nbase_model: qcfg\nmodels:\n  - model: qcfg\n  - model: qplain\nparameters:\n  t: 0.5\n' > qs.yml
expect_fail 1 "model 'qcfg' is quantized" mk-yaml qs.yml qout
no_out qout
# a state dict (mk-pytorch: no config.json, its tensors tell)
cp qfp8/model.safetensors qsd.safetensors && cp qplain/model.safetensors plain.safetensors
printf 'merge_method: linear\nmodels:\n  - model: plain.safetensors\n    parameters: {weight: 0.5}\n  - model: qsd.safetensors\n    parameters: {weight: 0.5}\n' > qp.yml
expect_fail 1 "model 'qsd.safetensors' holds quantized weights" mk-pytorch qp.yml qout
no_out qout
# mk-multi, a step reading a quantized model
printf 'name: s1\nmerge_method: linear\nmodels:\n  - model: qplain\n    parameters: {weight: 0.5}\n  - model: qmx\n    parameters: {weight: 0.5}\n' > qm.yml
expect_fail 1 "model 'qmx' holds quantized weights" mk-multi qm.yml -I qinter --out-path qfinal
no_out qinter/s1
# mk-moe, an expert quantized
printf 'base_model: qplain\ngate_mode: random\nexperts:\n  - source_model: qplain\n  - source_model: qcfg\n' > qmoe.yml
expect_fail 1 "model 'qcfg' is quantized" mk-moe qmoe.yml qout
no_out qout
