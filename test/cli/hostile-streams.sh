# Hostile streams and runs: every tool holds bounded memory on any stream
# (FILE and ancillary frames read in pieces, other frames under a memory
# bound, a HEAD parsed an entry at a time); two runs into one OUT; plugins
# from writable places; quantized checkpoints refused at plan time.
. "$MK_TOP/test/cli/lib.inc"
KiB=1024
# rss_under FILE BOUND_KIB WHAT: the peak RSS mk-rss wrote to FILE is
# under the bound (not under the sanitizers, whose shadow memory counts)
rss_under() {
	r=$(cat "$1")
	echo "$3: peak RSS $r KiB (bound $2 KiB)"
	[ "$MK_SAN" = 1 ] || [ "$r" -lt "$2" ] || fail "$3: peak RSS $r KiB >= $2 KiB"
}

# -- mk-cat on frames larger than memory should allow --------------------
# a 256 MiB file in a zstd FILE frame of a few KiB, and in a note
mk-forge zstd-file=268435456 > zf.mks
mk-forge big-note=268435456 > note.mks
[ "$(stat -c %s zf.mks)" -lt 65536 ] || fail "zstd-file stream not small"
for s in zf note; do
	mk-rss cat.rss mk-cat $s.mks > cat.txt
	rss_under cat.rss $((48 * KiB)) "mk-cat, 256 MiB $s frame"
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
mk-rss verify.rss mk-cat --verify head.mks > /dev/null 2>&1 || true
rss_under verify.rss $((64 * KiB)) "mk-cat --verify, a 13 MiB HEAD"
set +e
mk-rss pack.rss mk-pack hout < head.mks 2> err.txt
rc=$?
set -e
[ $rc = 1 ] || fail "mk-pack: a stream of no DATA accepted ($rc)"
err_has "incomplete" "mk-pack: the missing DATA not named"
no_out hout
rss_under pack.rss $((120 * KiB)) "mk-pack, a 13 MiB HEAD"
