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
