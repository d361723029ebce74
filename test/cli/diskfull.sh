# A full disk is an error with no OUT left behind: refused up front when
# the manifest does not fit (free-space check), and ENOSPC during the
# writes when it cannot be foreseen.  Needs a small tmpfs (root).
. "$MK_TOP/test/cli/lib.inc"
mkdir small
mount -t tmpfs -o size=1m tmpfs small 2>/dev/null || exit 77
trap 'umount small' EXIT
mk-gen-model --layers 2 --hidden 128 --dtype F32 m   # about 2.6 MB of tensors
expect_fail 1 "only" sh -c 'mk-fetch --model m | mk-pack small/out'
grep -q "free on that file system" err.txt || fail "no free-space message"
no_out small/out
# a 2 MB file the manifest does not announce: refused at its frame
# header, before a byte of it is written (every byte mk-pack writes is
# announced, so the free-space check at the HEAD foresees it)
mk-forge big-file=2000000 > s.mks
expect_fail 1 "more than the 4104 bytes of the largest file the HEAD announces" mk-pack -i s.mks small/out
no_out small/out
[ -z "$(ls small)" ] || fail "files left on the full file system: $(ls small)"
# and the same stream fits once there is room
mk-forge ok | mk-pack small/ok
[ -f small/ok/model.safetensors ] || fail "small/ok not written"
# an output file system that cannot be written (read-only): exit 1, no OUT
mkdir ro
mount -t tmpfs -o size=1m,ro tmpfs ro
trap 'umount small; umount ro' EXIT
expect_fail 1 "ro/out" sh -c 'mk-forge ok | mk-pack ro/out'
grep -q "Read-only file system" err.txt || fail "no EROFS message"
no_out ro/out
