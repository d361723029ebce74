# A hostile or broken Hub ends every download in time, with exit 1 and a
# message saying what is wrong, leaves no OUT and fills no disk:
#  - files of one repository with the same bytes (one blob, several
#    names) are downloaded once and all linked, never locked twice by one
#    process; two processes downloading one repository both succeed;
#  - only http and https are spoken, on every request and redirect;
#  - a transfer slower than MK_HUB_MIN_SPEED for MK_HUB_STALL_S ends;
#  - listed sizes the cache's file system cannot hold are refused before
#    any byte is asked for, and a body longer than its listing stops at
#    the listed size and can be continued;
#  - a token with a control character is refused (no header is injected)
#    and surrounding white space is stripped;
#  - credentials and tokens in URLs are never printed.
# The Hub is test/tools/mk-mock-hub.py on 127.0.0.1 (hub.inc).
. "$MK_TOP/test/cli/lib.inc"
. "$MK_TOP/test/cli/hub.inc"
export MK_HUB_RETRY_MS=20 MK_HUB_STALL_S=3 MK_HUB_RETRIES=2
mkdir -p root/org
mk-gen-model --seed 1 --dtype BF16 root/org/twins > /dev/null
mk-gen-model --seed 2 --dtype BF16 root/org/local > /dev/null
# twins: two empty files (one git blob), two small equal files (one git
# blob), two equal files over 1 KiB (one LFS blob)
: > root/org/twins/e1.txt
: > root/org/twins/e2.txt
echo '{"a": 1}' > root/org/twins/x1.json
cp root/org/twins/x1.json root/org/twins/x2.json
head -c 3000 /dev/zero | tr '\0' 'x' > root/org/twins/big1.txt
cp root/org/twins/big1.txt root/org/twins/big2.txt
# shards: a two-shard model whose shards have the same bytes
mk-gen-model --seed 3 --dtype BF16 --shards 2 root/org/shards > /dev/null
cp root/org/shards/model-00001-of-00002.safetensors root/org/shards/model-00002-of-00002.safetensors
mk-gen-model --seed 4 --dtype BF16 root/org/gated > /dev/null
printf '{"token": "hf_sesame"}\n' > root/org/gated/.mock.json
# huge: the listing gives the weights 10^15 bytes; over: three files
# whose listed sizes add up past 2^64
mk-gen-model --seed 5 --dtype BF16 root/org/huge > /dev/null
printf '{"sizes": {"model.safetensors": 1000000000000000}}\n' > root/org/huge/.mock.json
mk-gen-model --seed 6 --dtype BF16 root/org/over > /dev/null
echo '{}' > root/org/over/extra.json
echo '{ }' > root/org/over/extra2.json
printf '{"sizes": {"config.json": 9000000000000000000, "extra.json": 9000000000000000000, "extra2.json": 9000000000000000000}}\n' > root/org/over/.mock.json
# short: the listing gives the weights 100 bytes fewer than they have
mk-gen-model --seed 7 --dtype BF16 root/org/short > /dev/null
wsize=$(stat -c %s root/org/short/model.safetensors)
printf '{"sizes": {"model.safetensors": %s}}\n' $((wsize - 100)) > root/org/short/.mock.json
hub_start root
port=$(cat port)
printf 'merge_method: linear\nmodels:\n  - model: %s\n    parameters: {weight: 0.5}\n  - model: %s\n    parameters: {weight: 0.5}\ndtype: bfloat16\n' \
	org/twins root/org/local > twins.yml

# --- one blob, several names: each program ends, and links every name
twin_names="e1.txt e2.txt x1.json x2.json big1.txt big2.txt"
twins_linked() { # twins_linked CACHE: every twin is in the snapshot, with its bytes
	for f in $twin_names; do
		cmp root/org/twins/$f "$1"/models--org--twins/snapshots/*/$f || fail "$f is not linked in $1"
	done
	check_cache "$1"
}
export HF_HUB_CACHE=$PWD/c1
timeout 60 mk-get org/twins > /dev/null || fail "mk-get of a repository with equal files: exit $?"
twins_linked c1
export HF_HUB_CACHE=$PWD/c2
timeout 60 mk-plan twins.yml > twins.plan || fail "mk-plan of a repository with equal files: exit $?"
export HF_HUB_CACHE=$PWD/c3
timeout 60 mk-yaml twins.yml tout || fail "mk-yaml of a repository with equal files: exit $?"
[ -f tout/model.safetensors ] || fail "mk-yaml made no model"
twins_linked c3
export HF_HUB_CACHE=$PWD/c3r
timeout 60 mk-yaml --remote twins.yml rtout || fail "mk-yaml --remote of a repository with equal files: exit $?"
cmp tout/model.safetensors rtout/model.safetensors
twins_linked c3r
# two shards with the same bytes: downloaded once, both linked, then
# refused (the second lacks the tensors the index puts in it)
export HF_HUB_CACHE=$PWD/c4
set +e; timeout 60 mk-get org/shards > /dev/null 2> err.txt; rc=$?; set -e
[ $rc = 1 ] || { cat err.txt; fail "mk-get of equal shards: exit $rc"; }
for f in model-00001-of-00002.safetensors model-00002-of-00002.safetensors; do
	cmp root/org/shards/$f c4/models--org--shards/snapshots/*/$f || fail "$f is not linked"
done
# one of the names cached already, their blob half downloaded: resumed
# once, every name linked
rm -rf c1/models--org--twins/snapshots/*/e2.txt c1/models--org--twins/snapshots/*/big2.txt
b=$(sha256sum < root/org/twins/big1.txt | cut -d' ' -f1)
head -c 1000 "c1/models--org--twins/blobs/$b" > "c1/models--org--twins/blobs/$b.incomplete"
rm "c1/models--org--twins/blobs/$b" c1/models--org--twins/snapshots/*/big1.txt
export HF_HUB_CACHE=$PWD/c1
hub_reset
timeout 60 mk-get org/twins > /dev/null || fail "mk-get with a twin cached: exit $?"
twins_linked c1
hub_log | python3 -c 'import json, sys
r = [e for e in json.load(sys.stdin) if e["path"].startswith("/cdn/")]
assert len(r) == 1 and r[0]["range"] == "bytes=1000-2999", r' || fail "the half blob was not resumed once: $(hub_log)"
# two processes downloading one repository: one waits for the other's
# lock, both succeed
export HF_HUB_CACHE=$PWD/c5
hub_reset
fault '[{"kind": "slow", "match": "/cdn/", "delay": 0.02, "count": 100}]'
timeout 60 mk-get org/twins > get1.out 2> get1.err &
g1=$!
i=0
until [ -n "$(find c5 -name '*.incomplete' 2>/dev/null)" ] || ! kill -0 $g1 2>/dev/null; do
	i=$((i + 1)); [ $i -lt 600 ] || fail "the first download never began"
	sleep 0.05
done
timeout 60 mk-get org/twins > get2.out 2> get2.err || { cat get2.err; fail "the second mk-get failed"; }
wait $g1 || { cat get1.err; fail "the first mk-get failed"; }
cmp get1.out get2.out
twins_linked c5
echo "equal files: downloaded once, every name linked, two processes both succeed"

# --- only http and https, for the request and every redirect
export HF_HUB_CACHE=$PWD/c6
for to in "/api/models/ ftp://127.0.0.1:$port/x" "/resolve/ ftp://127.0.0.1:$port/x" "/cdn/ ftp://127.0.0.1:$port/x" \
	  "/cdn/ file:///etc/passwd" "/cdn/ gopher://127.0.0.1:$port/x" "/cdn/ dict://127.0.0.1:$port/x" \
	  "/resolve/ FTP://127.0.0.1:$port/x"; do
	where=${to%% *} to=${to#* }
	hub_reset
	fault "[{\"kind\": \"redirect\", \"match\": \"$where\", \"location\": \"$to\", \"count\": 100}]"
	expect_fail 1 "mk follows http and https only" timeout 60 mk-get org/local
	err_has "redirected to $(echo "$to" | tr A-Z a-z)" "the refused redirect ($where to $to) is not named"
done
hub_reset
fault "[{\"kind\": \"redirect\", \"match\": \"/cdn/\", \"location\": \"ftp://127.0.0.1:$port/x\", \"count\": 100}]"
expect_fail 1 "mk follows http and https only" timeout 60 mk-yaml twins.yml rout
no_out rout
for e in "ftp://127.0.0.1:$port" "file:///tmp" "http://127.0.0.1:$port/a b"; do
	HF_ENDPOINT=$e expect_fail 1 "HF_ENDPOINT" timeout 60 mk-get org/local
done
echo "redirects to ftp, file, gopher and dict refused"

# --- a trickle ends: slower than MK_HUB_MIN_SPEED for MK_HUB_STALL_S
export HF_HUB_CACHE=$PWD/c7
hub_reset
fault '[{"kind": "trickle", "match": "/cdn/", "rate": 2, "count": 100}]'
MK_HUB_STALL_S=1 MK_HUB_MIN_SPEED=1000 MK_HUB_RETRIES=0 \
	expect_fail 1 "slower than 1000 bytes/s for 1 s (MK_HUB_MIN_SPEED, MK_HUB_STALL_S)" timeout 60 mk-get org/local
err_has "downloading model.safetensors" "the trickle's message does not name the file"
# the default floor catches it too, in huggingface_hub's window variable
hub_reset
fault '[{"kind": "trickle", "match": "/cdn/", "rate": 2, "count": 100}]'
MK_HUB_STALL_S= HF_HUB_DOWNLOAD_TIMEOUT=0.5 MK_HUB_RETRIES=0 \
	expect_fail 1 "slower than 1024 bytes/s for 1 s" timeout 60 mk-get org/local
# a trickling range read (mk-plan reads the shards' headers)
hub_reset
rm -rf c7
fault '[{"kind": "trickle", "match": "/cdn/", "rate": 2, "count": 100}]'
MK_HUB_STALL_S=1 MK_HUB_RETRIES=0 expect_fail 1 "slower than" timeout 60 mk-plan twins.yml
echo "trickles end"

# --- the cache's disk: listed sizes it cannot hold are refused before
# any byte is asked for
for m in huge over; do
	export HF_HUB_CACHE=$PWD/c8
	hub_reset
	expect_fail 1 "free; free some space" timeout 60 mk-get org/$m
	err_has "model 'org/$m'" "the space message does not name the model"
	# (the metadata files are asked for first, on their own; a trickle
	# of the section above may still be logged as it ends)
	hub_log | python3 -c 'import hashlib, json, sys
big = ["/model.safetensors", hashlib.sha256(open(sys.argv[1] + "/model.safetensors", "rb").read()).hexdigest()]
if sys.argv[2] == "over":
    big = ["/org/over/resolve/"]
assert not [e for e in json.load(sys.stdin) if any(b in e["path"] for b in big)]' "root/org/$m" $m ||
		fail "org/$m: a file was asked for: $(hub_log)"
	[ -z "$(find c8 -name '*.incomplete')" ] || fail "org/$m: an .incomplete was made"
done
sed "s|org/twins|org/huge|" twins.yml > huge.yml
# (a merge reads the headers first: they and the listed size disagree)
expect_fail 1 "model 'org/huge'" timeout 60 mk-yaml huge.yml hout
no_out hout
# a body longer than its listing stops at the listed size and fails; the
# next run finds the .incomplete whole and right, and asks nothing more
export HF_HUB_CACHE=$PWD/c9
hub_reset
fault '[{"kind": "long", "match": "/cdn/", "extra": 100000, "count": 100}]'
expect_fail 1 "sent more than the" timeout 60 mk-get org/local
inc=$(find c9 -name '*.incomplete')
[ -n "$inc" ] && [ "$(stat -c %s "$inc")" -le "$(stat -c %s root/org/local/model.safetensors)" ] ||
	fail "a long body left $inc of $(stat -c %s "$inc" 2>/dev/null) bytes"
hub_reset
timeout 60 mk-get org/local > /dev/null || fail "the .incomplete of a long body was not continued"
[ "$(hub_log | python3 -c 'import json, sys; print(len([e for e in json.load(sys.stdin) if "/cdn/" in e["path"]]))')" = 0 ] ||
	fail "a whole .incomplete was downloaded again"
check_cache c9
# a listing shorter than the bytes: never more than the listed size on disk
export HF_HUB_CACHE=$PWD/c10
for i in 1 2; do
	hub_reset
	expect_fail 1 "sent more than the $((wsize - 100)) bytes" timeout 60 mk-get org/short
	inc=$(find c10 -name '*.incomplete')
	[ "$(stat -c %s "$inc")" -le $((wsize - 100)) ] || fail "run $i: $inc has more than the listed size"
done
# a short body fails, and is resumed by the next run
export HF_HUB_CACHE=$PWD/c11
hub_reset
fault '[{"kind": "drop", "match": "/cdn/", "after": 3000, "count": 100}]'
MK_HUB_RETRIES=1 expect_fail 1 "still after 1 retries" timeout 60 mk-get org/local
have=$(stat -c %s "$(find c11 -name '*.incomplete')")
hub_reset
timeout 60 mk-get org/local > /dev/null
hub_log | python3 -c 'import json, sys
r = [e["range"] for e in json.load(sys.stdin) if e["path"].startswith("/cdn/")]
assert len(r) == 1 and r[0] and r[0].startswith("bytes=%s-" % sys.argv[1]), r' "$have" ||
	fail "the short body was not resumed from $have: $(hub_log)"
check_cache c11
echo "sizes: refused before asking, a long body stopped at its listed size"

# --- the token: white space around it stripped; a control character
# inside refused before any request, and never shown
export HF_HUB_CACHE=$PWD/c12
no_injection() {
	hub_log | python3 -c 'import json, sys
log = json.load(sys.stdin)
assert not [e for e in log if any(h.lower().startswith("x-injected") for h in e["headers"])], log' ||
		fail "a header was injected: $(hub_log)"
}
nl='
'
cr=$(printf '\r')
hub_reset
for t in "hf_sesame${cr}${nl}X-Injected: 1" "hf_sesame${nl}X-Injected: 1" "hf_sesame${cr}X-Injected: 1" \
	 "hf_ses$(printf '\001')ame" "hf_sesame$(printf '\033')"; do
	HF_TOKEN=$t expect_fail 1 "control character" timeout 60 mk-get org/gated
	err_has "HF_TOKEN" "the message does not say which token"
	! grep -q sesame err.txt || fail "the token was shown: $(cat err.txt)"
	printf '%s\n' "$t" > tok
	HF_TOKEN_PATH=$PWD/tok expect_fail 1 "control character" timeout 60 mk-get org/gated
	err_has "$PWD/tok" "the message does not name the token file"
	! grep -q sesame err.txt || fail "the token was shown: $(cat err.txt)"
done
no_injection
HF_TOKEN="  hf_sesame ${cr}${nl}" timeout 60 mk-get org/gated > /dev/null || fail "a token with white space around was refused"
rm -rf c12
printf '\n hf_sesame\r\n\n' > tok
HF_TOKEN_PATH=$PWD/tok timeout 60 mk-get org/gated > /dev/null || fail "a token file with white space around was refused"
echo "tokens: white space stripped, control characters refused"

# --- secrets in URLs are never shown: userinfo of HF_ENDPOINT, query
# values of a redirect
export HF_HUB_CACHE=$PWD/c13
hub_reset
fault '[{"kind": "500", "match": "/api/models/", "count": 100}]'
HF_ENDPOINT=http://someone:s3cretpw@127.0.0.1:$port MK_HUB_RETRIES=1 expect_fail 1 "HTTP 500" timeout 60 mk-get org/local
! grep -q s3cretpw err.txt || fail "HF_ENDPOINT's password was shown: $(cat err.txt)"
err_has "http://***@127.0.0.1:$port/api/models/org/local/revision/main?blobs=true" "the address is not shown redacted"
hub_reset
fault "[{\"kind\": \"redirect\", \"match\": \"/cdn/\", \"location\": \"ftp://u:s3cretpw@127.0.0.1:$port/x?token=hf_qsecret&X-Amz-Signature=qsig&blobs=1#hf_frag\", \"count\": 100}]"
expect_fail 1 "mk follows http and https only" timeout 60 mk-get org/local
for secret in s3cretpw hf_qsecret qsig hf_frag; do
	! grep -q "$secret" err.txt || fail "a redirect's secret ($secret) was shown: $(cat err.txt)"
done
err_has "ftp://***@127.0.0.1:$port/x?token=***&X-Amz-Signature=***&blobs=1" "the redirect is not shown redacted"
HF_ENDPOINT="ftp://someone:s3cretpw@127.0.0.1:$port/?token=hf_qsecret" expect_fail 1 "HF_ENDPOINT" mk-get org/local
! grep -qE "s3cretpw|hf_qsecret" err.txt || fail "a bad HF_ENDPOINT's secrets were shown: $(cat err.txt)"
echo "secrets in addresses are not shown"
