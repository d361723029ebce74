# Each stage's peak RSS stays under its bound while moving a tensor much
# larger than that bound: 64 MiB per stage with the default chunk size
# (4 MiB) and queue depth (8), a 256 MiB tensor, every reader.
# Not under the sanitizers, whose shadow memory inflates RSS.
. "$MK_TOP/test/cli/lib.inc"
[ "$MK_SAN" = 1 ] && exit 77
bound=$((64 * 1024))   # KiB
mk-gen-model --dtype F32 --hidden 1024 --layers 1 --big-rows 65536 big
size=$(stat -c %s big/model.safetensors)
[ "$size" -gt $((256 * 1024 * 1024)) ] || fail "test model too small ($size)"
for io in uring mmap pread; do
	rm -rf out
	MK_IO=$io mk-rss fetch.rss mk-fetch --model big | mk-rss pack.rss mk-pack out
	mk-st-diff big out
	f=$(cat fetch.rss) p=$(cat pack.rss)
	echo "io=$io: mk-fetch peak RSS ${f} KiB, mk-pack ${p} KiB (bound ${bound} KiB, tensor $((size / 1024)) KiB)"
	[ "$f" -lt "$bound" ] || fail "mk-fetch ($io) peak RSS $f KiB >= $bound KiB"
	[ "$p" -lt "$bound" ] || fail "mk-pack ($io) peak RSS $p KiB >= $bound KiB"
done
# the mmap reader on a file not in the page cache reads it in ahead
# (MADV_POPULATE_READ, its pages mapped until the writer passes them):
# under the same bound (dropped with dd's nocache after a sync; where the
# file system keeps them anyway, this repeats the run above)
sync
dd if=big/model.safetensors iflag=nocache count=0 2>/dev/null
rm -rf out
MK_IO=mmap mk-rss fetch.rss mk-fetch --model big | mk-rss pack.rss mk-pack out
mk-st-diff big out
f=$(cat fetch.rss)
echo "io=mmap, read cold: mk-fetch peak RSS ${f} KiB (bound ${bound} KiB)"
[ "$f" -lt "$bound" ] || fail "mk-fetch (mmap, cold) peak RSS $f KiB >= $bound KiB"
# mk-cat reads frame by frame too
mk-fetch --model big | mk-rss cat.rss mk-cat --verify > /dev/null
c=$(cat cat.rss)
echo "mk-cat --verify peak RSS ${c} KiB"
[ "$c" -lt "$bound" ] || fail "mk-cat peak RSS $c KiB >= $bound KiB"

# hostile streams: a 300 MiB FILE frame is written in pieces as it
# arrives (raw and zstd), zstd bombs are refused before they inflate
mk-forge file=314572800 | mk-rss k.rss mk-pack --max-memory 64M fileout
k=$(cat k.rss)
echo "a 300 MiB FILE frame: mk-pack peak RSS $k KiB"
[ "$k" -lt "$bound" ] || fail "a 300 MiB FILE frame: mk-pack peak RSS $k KiB >= $bound KiB"
[ "$(stat -c %s fileout/big.bin)" = 314572800 ] || fail "big.bin not written whole"
cmp -n 314572800 fileout/big.bin /dev/zero || fail "big.bin has other bytes"
rm -rf fileout
mk-forge zstd-file=50000000 | mk-rss k.rss mk-pack --max-memory 64M zfileout
k=$(cat k.rss)
echo "a 50 MB zstd FILE frame: mk-pack peak RSS $k KiB"
[ "$k" -lt $((24 * 1024)) ] || fail "a zstd FILE frame: mk-pack peak RSS $k KiB"
[ "$(stat -c %s zfileout/big.bin)" = 50000000 ] || fail "the zstd big.bin not written whole"
rm -rf zfileout
# bombs: 1.5 GiB of zeros in about 50 KB
small=$((16 * 1024))
bomb() { # KIND MESSAGE
	mk-forge "$1" > bomb.mks
	[ "$(stat -c %s bomb.mks)" -lt 200000 ] || fail "$1: the forged bomb is not small"
	expect_fail 1 "$2" mk-rss b.rss mk-pack --max-memory 64M -i bomb.mks bombout
	no_out bombout
	b=$(cat b.rss)
	echo "$1: refused, mk-pack peak RSS $b KiB"
	[ "$b" -lt "$small" ] || fail "$1: mk-pack peak RSS $b KiB >= $small KiB"
}
bomb zstd-bomb=1610612736 "frame #1 (FILE): declares a payload of 1610612751 bytes, more than the 4107 bytes of the largest file the HEAD announces"
bomb zstd-liar=1610612736 "frame #1 (FILE): zstd payload inflates past the 1048591 bytes its header declares"
bomb data-bomb=1610612736 "frame #1 (DATA): declares a payload of 1610612784 bytes, more than the 16777264 bytes of a chunk"
# mk-cat --verify reads whole frames: the bombs are refused at the header
mk-forge zstd-bomb=1610612736 > bomb.mks
expect_fail 1 "more than the 4107 bytes" mk-rss b.rss mk-cat --verify bomb.mks
[ "$(cat b.rss)" -lt "$small" ] || fail "mk-cat --verify inflated the bomb"

# a 300 MiB FILE frame in a plan: mk-fetch holds it in a scratch file
# until its HEAD goes out, and it and mk-merge pass it on in pieces
mk-forge plan-file=314572800 > pf.mks
mk-rss f.rss mk-fetch --max-memory 16M -i pf.mks | mk-rss m.rss mk-merge > pm.mks
f=$(cat f.rss) m=$(cat m.rss)
echo "a 300 MiB FILE frame in a plan: mk-fetch peak RSS $f KiB, mk-merge $m KiB"
[ "$f" -lt "$bound" ] || fail "a plan's 300 MiB FILE frame: mk-fetch peak RSS $f KiB >= $bound KiB"
[ "$m" -lt "$bound" ] || fail "a 300 MiB FILE frame: mk-merge peak RSS $m KiB >= $bound KiB"
mk-cat pm.mks | grep -q "FILE critical len=314572815 .*name=big.bin mode=0644 size=314572800" ||
	fail "the FILE frame did not come through mk-fetch and mk-merge"
# held in memory or in the scratch file: the same bytes out
mk-fetch --max-memory 4G --chunk-size 1MiB -i pf.mks | mk-merge | cmp - pm.mks || fail "spooled and held differ"
rm -f pf.mks pm.mks
# a FILE frame with a bad checksum, spooled (5 MB over the 4 MB held at
# 16M) and held (1 MB): refused once it has all come, nothing passed on
# as whole
for n in 5000000 1000000; do
	mk-forge plan-file=$n > pf.mks
	printf 'X' | dd of=pf.mks bs=1 seek=$((n / 2)) conv=notrunc 2>/dev/null
	expect_fail 1 "(FILE) at offset" mk-fetch --max-memory 16M -i pf.mks -o pfout.mks
	grep -q "checksum mismatch" err.txt || fail "a bad FILE frame ($n bytes): $(cat err.txt)"
	mk-fetch -i pf.mks 2>/dev/null | mk-cat --verify > /dev/null 2>&1 && fail "a bad FILE frame went through whole"
	# cut inside the frame
	head -c $((n / 2)) pf.mks > cut.mks
	expect_fail 1 "truncated payload" mk-fetch --max-memory 16M -i cut.mks -o pfout.mks
done
rm -f pf.mks cut.mks pfout.mks

# A merge within --max-memory M on tensors larger than M: the four
# stages mk-yaml --processes runs, with the budgets it gives them, together peak
# under M (the sum of their peak RSS, which counts the shared libraries
# four times and adds peaks that need not coincide: an upper bound on
# what they held at any one time).  A 65536-token vocabulary:
# embed_tokens and lm_head of 256 MiB each.
mk-gen-model --dtype F32 --hidden 1024 --layers 1 --vocab 65536 --seed 1 v1
mk-gen-model --dtype F32 --hidden 1024 --layers 1 --vocab 65536 --seed 2 v2
printf 'merge_method: linear\nmodels:\n  - model: v1\n    parameters: {weight: 1}\n  - model: v2\n    parameters: {weight: 1}\n' > linear.yml
printf 'merge_method: slerp\nbase_model: v1\nmodels:\n  - model: v1\n  - model: v2\nparameters: {t: 0.3}\n' > slerp.yml
printf 'merge_method: ties\nbase_model: v1\nmodels:\n  - model: v2\n    parameters: {weight: 0.7, density: 0.4}\n' > ties.yml
# together M CONFIG [SPILL]: run mk-yaml's pipeline for CONFIG under
# --max-memory M stage by stage, each under mk-rss; check the sum
together() {
	mk-yaml --print-pipeline --max-memory "$1" "$2" memout > pipe.txt 2>/dev/null
	set -- "$1" "$2" "${3:-}" $(grep -o -- '--max-memory [0-9]*' pipe.txt | awk '{print $2}')
	[ $# = 7 ] || fail "$2: mk-yaml gave $(($# - 3)) stages a budget: $(cat pipe.txt)"
	[ "$4" = "$6" ] || fail "$2: mk-plan plans for $4 bytes, mk-merge is given $6"
	rm -rf memout spill
	if [ -n "$3" ]; then
		mkdir spill
		mk-rss p.rss mk-plan --spill --max-memory $4 "$2" | mk-rss f.rss mk-fetch --max-memory $5 |
			mk-rss m.rss mk-merge --spill spill --max-memory $6 | mk-rss k.rss mk-pack --max-memory $7 memout
	else
		mk-rss p.rss mk-plan --max-memory $4 "$2" | mk-rss f.rss mk-fetch --max-memory $5 |
			mk-rss m.rss mk-merge --max-memory $6 | mk-rss k.rss mk-pack --max-memory $7 memout
	fi
	grep -q lm_head memout/model.safetensors* 2>/dev/null || fail "$2: lm_head not merged"
	sum=$(( $(cat p.rss) + $(cat f.rss) + $(cat m.rss) + $(cat k.rss) ))
	echo "$2${3:+, spilled} --max-memory $1: mk-plan $(cat p.rss) + mk-fetch $(cat f.rss) + mk-merge $(cat m.rss) + mk-pack $(cat k.rss) = $sum KiB (limit $(($1 / 1024)) KiB)"
	[ $((sum * 1024)) -le "$1" ] || fail "$2 --max-memory $1: the stages peak at $sum KiB together"
	# mk-yaml in one process: the four stages, the three queues between
	# them and one process's base, under M as one peak RSS; the same bytes
	rm -rf one
	if [ -n "$3" ]; then
		rm -rf spill && mkdir spill
		mk-rss one.rss mk-yaml --quiet --max-memory "$1" --spill spill "$2" one
	else
		mk-rss one.rss mk-yaml --quiet --max-memory "$1" "$2" one
	fi
	echo "$2${3:+, spilled} --max-memory $1: mk-yaml in one process $(cat one.rss) KiB (limit $(($1 / 1024)) KiB)"
	[ $(($(cat one.rss) * 1024)) -le "$1" ] || fail "$2 --max-memory $1: mk-yaml in one process peaks at $(cat one.rss) KiB"
	for f in memout/*.safetensors; do cmp "$f" "one/$(basename "$f")" || fail "$2: one process and the pipeline differ"; done
	rm -rf one
}
# the cases: every one under make check-full (MK_TEST_FULL=1); under make
# check two of the first seven, drawn by the run's seed (sample_points,
# in lib.inc), and always the last, which the streamed run below matches
tcase() {
	case $1 in
	1) together 67108864 linear.yml ;;
	2) together 256000000 linear.yml ;;
	3) together 67108864 slerp.yml ;;
	4) together 256000000 slerp.yml ;;
	5) together 67108864 ties.yml ;;
	6) together 256000000 ties.yml ;;
	7) together 67108864 ties.yml spill ;;
	esac
}
for n in $(sample_points 7 2 together); do tcase "$n"; done
together 256000000 ties.yml spill
# spilled or streamed: the same bytes
mk-plan --max-memory 128000000 ties.yml | mk-fetch | mk-merge | mk-pack memstreamed
for f in memout/*.safetensors; do cmp "$f" "memstreamed/$(basename "$f")" || fail "ties: spilled and streamed differ"; done

# The same with a tokenizer source over three vocabularies that differ:
# 131072-token models (embeddings of 256 MiB), one whose tokens start
# 1000 further along, one with ChatML tokens added; the union (132074
# tokens, padded to 132096 rows) aligns every embedding row by row.
rm -rf memout memstreamed
for s in 1 2 3; do
	case $s in
	1) extra="--vocab 131072 --bpe-tokenizer" ;;
	2) extra="--vocab 131072 --tok-skip 1000 --bpe-tokenizer" ;;
	3) extra="--vocab 131074 --bpe-tokenizer=<s>,</s>,<|im_start|>,<|im_end|>" ;;
	esac
	mk-gen-model --dtype F32 --hidden 512 --inter 64 --layers 1 --seed $((10 + s)) $extra w$s > /dev/null
done
cat > vocab.yml <<YML
merge_method: linear
base_model: w1
models:
  - model: w1
    parameters: {weight: 0.5}
  - model: w2
    parameters: {weight: 0.3}
  - model: w3
    parameters: {weight: 0.2}
tokenizer:
  source: union
  pad_to_multiple_of: 64
  tokens:
    <|im_start|>: {source: w3, force: true}
YML
sed -e 's/merge_method: linear/merge_method: ties/' -e 's/{weight: \(0\.[0-9]\)}/{weight: \1, density: 0.5}/' vocab.yml > vocab-ties.yml
# both under make check-full, one under make check (drawn by the seed)
for n in $(sample_points 2 1 vocab); do
	case $n in
	1) together 256000000 vocab.yml ;;
	2) together 256000000 vocab-ties.yml spill ;;
	esac
	python3 -c 'import json,sys; assert json.load(open(sys.argv[1]))["vocab_size"] == 132096' memout/config.json ||
		fail "vocab: the padded vocabulary"
done
rm -rf w1 w2 w3 memout spill

# By default (no --max-memory) a job is held in memory only when its
# inputs come to at most 256 MiB: ties' embeddings here (two inputs of
# 256 MiB) are streamed once per pass, its layers held, and --explain says
# which and why; a budget given holds what fits it, however large.
mk-plan --explain ties.yml > explain.txt
job_sent() { grep -A1 "^$2 " "$1" | sed -n 2p; }
job_sent explain.txt model.embed_tokens.weight |
	grep -q "(inputs streamed once per pass: over the [0-9]* MiB a job is held in by default)" ||
	{ cat explain.txt; fail "by default, a 512 MiB job is not streamed for the reason documented"; }
job_sent explain.txt lm_head.weight | grep -q "over the [0-9]* MiB a job is held in by default" ||
	fail "by default, lm_head (512 MiB) is held"
job_sent explain.txt model.layers.0.mlp.up_proj.weight | grep -q "(held in memory)" ||
	fail "by default, a 32 MiB job is not held"
mk-plan --max-memory 1G --explain ties.yml > explain.txt
job_sent explain.txt model.embed_tokens.weight | grep -q "(held in memory)" ||
	fail "--max-memory 1G does not hold a 512 MiB job"
mk-plan --max-memory 100M --explain ties.yml > explain.txt
job_sent explain.txt model.embed_tokens.weight | grep -q "(inputs streamed once per pass), " ||
	fail "--max-memory 100M: a 512 MiB job is not streamed as over the budget given"
# ... so mk-yaml's one process peaks under what holding them would take
# (512 MiB), with the bytes of a merge that holds them
rm -rf one held
mk-rss one.rss mk-yaml --quiet ties.yml one
echo "ties, default budget: mk-yaml in one process $(cat one.rss) KiB (the embeddings streamed)"
[ "$(cat one.rss)" -lt $((256 * 1024)) ] || fail "ties by default: mk-yaml peaks at $(cat one.rss) KiB"
mk-yaml --quiet --max-memory 2G ties.yml held
for f in held/*.safetensors; do cmp "$f" "one/$(basename "$f")" || fail "ties: held and streamed by default differ"; done
rm -rf one held explain.txt

# mk-merge refuses a held job larger than its own budget
mk-plan --max-memory 1G slerp.yml > held.mks
mk-fetch < held.mks > heldin.mks
expect_fail 1 "more than --max-memory" mk-merge --max-memory 100M -i heldin.mks -o x.mks
grep -q "the plan holds jobs of up to" err.txt || fail "mk-merge did not refuse at the HEAD"
[ ! -e x.mks ] || fail "mk-merge left output"
# mk-pack refuses, at the HEAD, chunks that cannot fit its budget
mk-fetch --chunk-size 64MiB --model v1 > bigchunks.mks
expect_fail 1 "use a smaller --chunk-size upstream" mk-pack --max-memory 100M -i bigchunks.mks packout
no_out packout
