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

# a merge within --max-memory 256M on tensors larger than that: every
# stage of the pipe mk-yaml runs (budget split: merge 128M, fetch 64M)
# stays under budget + 32 MiB
# (a 65536-token vocabulary: embed_tokens and lm_head of 256 MiB each)
limit=$(( (256000000 / 1024) + 32 * 1024 ))
# within_budget WHAT: each stage's peak RSS (p, f, m, k.rss) <= limit
within_budget() {
	for s in p f m k; do
		r=$(cat $s.rss)
		echo "$1: stage $s peak RSS $r KiB (limit $limit KiB)"
		[ "$r" -le "$limit" ] || fail "$1: stage $s peak RSS $r KiB over $limit KiB"
	done
}
mk-gen-model --dtype F32 --hidden 1024 --layers 1 --vocab 65536 --seed 1 v1
mk-gen-model --dtype F32 --hidden 1024 --layers 1 --vocab 65536 --seed 2 v2
for m in linear slerp; do
	case $m in
	linear) printf 'merge_method: linear\nmodels:\n  - model: v1\n    parameters: {weight: 1}\n  - model: v2\n    parameters: {weight: 1}\n' > mem.yml ;;
	slerp) printf 'merge_method: slerp\nbase_model: v1\nmodels:\n  - model: v1\n  - model: v2\nparameters: {t: 0.3}\n' > mem.yml ;;
	esac
	mk-yaml --print-pipeline --max-memory 256M mem.yml x > pipe.txt
	grep -q -- "mk-merge --max-memory 128000000" pipe.txt || fail "mk-yaml does not split the budget"
	grep -q -- "mk-pack --max-memory 64000000" pipe.txt || fail "mk-yaml gives mk-pack no budget"
	rm -rf memout
	mk-rss p.rss mk-plan --max-memory 128000000 mem.yml | mk-rss f.rss mk-fetch --max-memory 64000000 |
		mk-rss m.rss mk-merge --max-memory 128000000 | mk-rss k.rss mk-pack --max-memory 64000000 memout
	[ -f memout/model.safetensors ] || [ -f memout/model.safetensors.index.json ] || fail "$m: no output"
	grep -q lm_head memout/model.safetensors* 2>/dev/null || fail "$m: lm_head not merged"
	within_budget $m
done
# ties over the budget, spilled: read once, its three statistics passes
# replayed from mk-merge's file; every stage within the budget; the same
# bytes as the streamed plan
printf 'merge_method: ties\nbase_model: v1\nmodels:\n  - model: v2\n    parameters: {weight: 0.7, density: 0.4}\n' > ties.yml
mkdir -p spill
rm -rf memout
mk-rss p.rss mk-plan --spill --max-memory 128000000 ties.yml | mk-rss f.rss mk-fetch --max-memory 64000000 |
	mk-rss m.rss mk-merge --spill spill --max-memory 128000000 | mk-rss k.rss mk-pack --max-memory 64000000 memout
within_budget "ties, spilled"
mk-plan --max-memory 128000000 ties.yml | mk-fetch | mk-merge | mk-pack memstreamed
for f in memout/*.safetensors; do cmp "$f" "memstreamed/$(basename "$f")" || fail "ties: spilled and streamed differ"; done

# mk-merge refuses a held job larger than its own budget
mk-plan mem.yml > held.mks
mk-fetch < held.mks > heldin.mks
expect_fail 1 "more than --max-memory" mk-merge --max-memory 100M -i heldin.mks -o x.mks
grep -q "the plan holds jobs of up to" err.txt || fail "mk-merge did not refuse at the HEAD"
[ ! -e x.mks ] || fail "mk-merge left output"
# mk-pack refuses, at the HEAD, chunks that cannot fit its budget
mk-fetch --chunk-size 64MiB --model v1 > bigchunks.mks
expect_fail 1 "use a smaller --chunk-size upstream" mk-pack --max-memory 100M -i bigchunks.mks packout
no_out packout
