# Hub models: a config naming org/name repositories that only a Hub has
# merges with no manual step, into the Hugging Face cache layout, and a
# second run asks for nothing; mk-plan moves only metadata; every fault
# the Hub can have (a dropped connection, 500, 429, a stall, wrong bytes,
# 401) is survived by a retry or reported clearly, and a wrong or partial
# blob never becomes a cache entry; a killed download resumes; streaming
# (--remote) reads shards by range requests within the memory bound and,
# with --no-cache, leaves no model bytes on disk.  The Hub is
# test/tools/mk-mock-hub.py on 127.0.0.1 (a free port), serving models
# mk-gen-model wrote.
. "$MK_TOP/test/cli/lib.inc"
. "$MK_TOP/test/cli/hub.inc"
export MK_HUB_RETRY_MS=50 MK_HUB_STALL_S=3
mkdir -p root/org
mk-gen-model --seed 1 --dtype BF16 --shards 2 root/org/a > /dev/null
mk-gen-model --seed 2 --dtype BF16 --shards 2 root/org/b > /dev/null
mk-gen-model --seed 3 --dtype BF16 root/org/gated > /dev/null
printf '{"token": "hf_sesame"}\n' > root/org/gated/.mock.json
python3 "$MK_TOP/test/tools/mk-gen-torchbin.py" root/org/a root/org/binonly
mk-gen-model --seed 6 --dtype BF16 root/org/c > /dev/null
python3 "$MK_TOP/test/tools/mk-gen-lora.py" root/org/c root/org/c-lora --r 4 --alpha 8 > /dev/null
mk-gen-model --seed 4 --dtype F32 --hidden 1024 --layers 1 --vocab 16384 root/org/big > /dev/null
mk-gen-model --seed 5 --dtype F32 --hidden 1024 --layers 1 --vocab 16384 root/org/big2 > /dev/null
hub_start root
cfg() { # cfg FILE A B
	printf 'merge_method: slerp\nbase_model: %s\nmodels:\n  - model: %s\n  - model: %s\nparameters: {t: 0.3}\ndtype: bfloat16\n' "$2" "$2" "$3" > "$1"
}
cfg hub.yml org/a org/b
cfg local.yml root/org/a root/org/b
mk-yaml local.yml want

# --- a merge of Hub models, no manual step; the second run asks nothing
export HF_HUB_CACHE=$PWD/cache
hub_reset
mk-yaml hub.yml out1
cmp want/model.safetensors out1/model.safetensors || fail "the merge of Hub models differs from the local one"
check_cache cache
[ -f cache/models--org--a/refs/main ] || fail "no refs/main"
hub_reset
mk-yaml hub.yml out2
[ "$(requests)" = 0 ] || fail "a second run asked the Hub $(requests) times: $(hub_log)"
cmp out1/model.safetensors out2/model.safetensors
echo "a merge of two Hub models; the second run made no request"

# --- offline with an empty cache: refused, no OUT
HF_HUB_CACHE=$PWD/empty HF_HUB_OFFLINE=1 expect_fail 1 "HF_HUB_OFFLINE=1 forbids downloading it" mk-yaml hub.yml off
no_out off
HF_HUB_CACHE=$PWD/empty HF_HUB_OFFLINE=1 expect_fail 1 "org/a" mk-plan hub.yml
# offline with the cache mk filled: works
HF_HUB_OFFLINE=1 mk-yaml hub.yml out3
cmp out1/model.safetensors out3/model.safetensors

# --- mk-plan moves metadata only: the shard bodies are never asked for
export HF_HUB_CACHE=$PWD/plancache
hub_reset
mk-plan hub.yml > hub.plan
python3 - "$HF_ENDPOINT" root/org/a root/org/b <<'PY' || fail "mk-plan read more than headers"
import json, os, struct, sys, urllib.request
log = json.load(urllib.request.urlopen(sys.argv[1] + "/_mock/log"))
heads = model = 0
for d in sys.argv[2:]:
    for f in os.listdir(d):
        if f.endswith(".safetensors"):
            n = struct.unpack("<Q", open(os.path.join(d, f), "rb").read(8))[0]
            heads += 8 + n
            model += os.path.getsize(os.path.join(d, f))
weights = sum(e["sent"] for e in log if e["path"].startswith("/cdn/") and e["range"])
whole = [e for e in log if e["path"].startswith("/cdn/") and not e["range"] and e["sent"] > 4096]
total = sum(e["sent"] for e in log if not e["path"].startswith("/_mock"))
print("mk-plan: %d bytes from the Hub in all, %d of them shard headers (%d bytes of headers), models %d bytes"
      % (total, weights, heads, model))
assert weights <= heads and not whole, (weights, heads, whole)
assert total < model / 10
PY
ls plancache/models--org--a/snapshots/*/model-0000* 2>/dev/null && fail "mk-plan downloaded shards"
# the plan pins the commit; mk-fetch downloads what it lacks
for m in a b; do
	c=$(cat plancache/models--org--$m/refs/main)
	grep -aq "\"commit\":\"$c\"" hub.plan || fail "the plan does not pin org/$m to $c"
done
mk-fetch -i hub.plan | mk-merge | mk-pack out4
cmp out1/model.safetensors out4/model.safetensors
check_cache plancache

# --- faults: each survived by a retry, the result the same
for f in '{"kind": "drop", "match": "/cdn/", "after": 1000}' \
	 '{"kind": "500", "match": "/resolve/"}' \
	 '{"kind": "503", "match": "/api/models/", "retry_after": 1}' \
	 '{"kind": "429", "match": "/cdn/", "retry_after": 1}' \
	 '{"kind": "slow", "match": "/cdn/", "delay": 0.01}' \
	 '{"kind": "corrupt", "match": "/cdn/", "after": 5000}' \
	 '{"kind": "drop", "match": "/cdn/", "after": 0, "count": 3}'; do
	export HF_HUB_CACHE=$PWD/fcache
	rm -rf fcache fout
	hub_reset
	fault "[$f]"
	mk-yaml hub.yml fout 2> ferr.txt || { cat ferr.txt; fail "fault $f not survived"; }
	cmp out1/model.safetensors fout/model.safetensors || fail "fault $f: another result"
	check_cache fcache
	echo "survived: $f"
done
# wrong bytes every time: refused clearly, and no blob is made of them
rm -rf fcache fout
hub_reset
fault '[{"kind": "corrupt", "match": "/cdn/", "after": 100, "count": 100}]'
expect_fail 1 "nothing was kept" mk-yaml hub.yml fout
no_out fout
python3 - fcache <<'PY' || fail "a corrupt download became a blob"
import hashlib, os, sys
for r, _, fs in os.walk(sys.argv[1]):
    if r.endswith("blobs"):
        for f in fs:
            if not f.endswith(".incomplete"):
                d = open(os.path.join(r, f), "rb").read()
                assert f in (hashlib.sha256(d).hexdigest(), hashlib.sha1(b"blob %d\0" % len(d) + d).hexdigest()), f
PY
# a Hub that keeps failing: the retries end with a clear message
rm -rf fcache
hub_reset
fault '[{"kind": "500", "match": "/api/models/org/a", "count": 100}]'
MK_HUB_RETRIES=2 expect_fail 1 "HTTP 500, still after 2 retries" mk-plan hub.yml
# a Hub that is not there
HF_ENDPOINT=http://127.0.0.1:9 MK_HUB_RETRIES=1 expect_fail 1 "org/a" mk-plan hub.yml

# --- gated: 401 says what to do; HF_TOKEN and the token file work
cfg gated.yml org/gated root/org/a
export HF_HUB_CACHE=$PWD/gcache
hub_reset
expect_fail 1 "HF_TOKEN" mk-yaml gated.yml gout
grep -qF "gated or private" err.txt || fail "the 401 does not say the repository is gated"
no_out gout
HF_TOKEN=hf_wrong expect_fail 1 "the token mk sent was refused" mk-plan gated.yml
hub_reset
HF_TOKEN=hf_sesame mk-yaml gated.yml gout
# the token goes to the Hub, not to the CDN its redirects lead to
hub_log | python3 -c 'import json, sys
log = json.load(sys.stdin)
hub = [e for e in log if "/resolve/" in e["path"] or e["path"].startswith("/api/")]
cdn = [e for e in log if e["path"].startswith("/cdn/")]
assert hub and cdn and all(e["auth"] for e in hub) and not any(e["auth"] for e in cdn), log' ||
	fail "the token was not sent to the Hub only"
mkdir -p hfhome && printf 'hf_sesame\n' > hfhome/token
rm -rf gcache gout2
HF_HOME=$PWD/hfhome mk-yaml gated.yml gout2
cmp gout/model.safetensors gout2/model.safetensors
# a 404
cfg none.yml org/none root/org/a
expect_fail 1 "404" mk-plan none.yml

# --- a .bin-only repository
cfg bin.yml org/binonly org/b
cfg binlocal.yml root/org/binonly root/org/b
export HF_HUB_CACHE=$PWD/bcache
mk-yaml bin.yml bout
mk-yaml binlocal.yml blocal
cmp bout/model.safetensors blocal/model.safetensors

# --- mk-get: prints the snapshot, downloads nothing the second time
export HF_HUB_CACHE=$PWD/gets
d=$(mk-get org/a)
[ -f "$d/model.safetensors.index.json" ] && [ -f "$d/model-00001-of-00002.safetensors" ] || fail "mk-get: $d"
hub_reset
mk-get org/a > /dev/null
[ "$(sent)" -lt 4096 ] || fail "a second mk-get received $(sent) bytes"
expect_fail 2 "expected at least one REF" mk-get

# --- a LoRA adapter on the Hub (BASE+ADAPTER, both Hub repositories)
cfg lora.yml org/c+org/c-lora org/b
cfg loralocal.yml root/org/c+root/org/c-lora root/org/b
export HF_HUB_CACHE=$PWD/lcache
mk-yaml lora.yml lout
mk-yaml loralocal.yml llocal
cmp lout/model.safetensors llocal/model.safetensors || fail "BASE+ADAPTER from the Hub differs from the local one"
[ -f lcache/models--org--c-lora/snapshots/*/adapter_model.safetensors ] || fail "the adapter was not cached"
echo "a Hub BASE+ADAPTER merges as the local one"

# --- a killed download resumes from its .incomplete
export HF_HUB_CACHE=$PWD/kcache
hub_reset
fault '[{"kind": "slow", "match": "/cdn/", "delay": 0.05}]'
mk-get org/big > /dev/null 2>&1 &
g=$!
i=0
while :; do
	inc=$(find kcache -name '*.incomplete' -size +64k 2>/dev/null | head -1)
	[ -n "$inc" ] && break
	i=$((i + 1)); [ $i -lt 300 ] || fail "the slow download never began"
	sleep 0.1
done
kill -9 $g; wait $g 2>/dev/null || :
have=$(stat -c %s "$inc")
hub_reset
mk-get org/big > /dev/null
hub_log | python3 -c 'import json, sys
have = int(sys.argv[1])
r = [e["range"] for e in json.load(sys.stdin) if e["path"].startswith("/cdn/") and e["range"]]
assert any(x and int(x[6:].split("-")[0]) >= have for x in r), (have, r)' "$have" || fail "the download did not resume from $have bytes"
check_cache kcache
cmp kcache/models--org--big/snapshots/*/model.safetensors root/org/big/model.safetensors
echo "a download killed at $have bytes resumed from there"

# --- streaming: range requests, bounded memory, no model bytes on disk
cfg big.yml org/big org/big2
cfg biglocal.yml root/org/big root/org/big2
mk-yaml biglocal.yml bigwant
export HF_HUB_CACHE=$PWD/scache
mk-plan big.yml > big.plan
hub_reset
mk-rss f.rss mk-fetch --remote --no-cache --max-memory 16M -i big.plan | mk-merge | mk-pack sout
cmp bigwant/model.safetensors sout/model.safetensors || fail "streamed merge differs"
f=$(cat f.rss)
size=$(stat -c %s root/org/big/model.safetensors)
echo "streaming --max-memory 16M: mk-fetch peak RSS $f KiB, model $((size / 1024)) KiB"
[ "$MK_SAN" = 1 ] || [ "$f" -lt $(((16 + 32) * 1024)) ] || fail "mk-fetch --remote peak RSS $f KiB > 16 MiB + 32 MiB"
[ -z "$(find scache -size +64k)" ] || fail "--no-cache left model bytes on disk: $(find scache -size +64k)"
# with the cache (the default) the blobs it read are whole afterwards, and
# a second merge downloads nothing
rm -rf sout
mk-yaml --remote big.yml sout || { hub_log; fail "mk-yaml --remote"; }
check_cache scache
hub_reset
mk-yaml big.yml sout2
[ "$(sent)" -lt 4096 ] || fail "after a streamed merge with the cache, the next one received $(sent) bytes"
# a connection dropped mid-range is resumed where it broke off
export HF_HUB_CACHE=$PWD/scache2
hub_reset
fault '[{"kind": "drop", "match": "/cdn/", "after": 100000, "count": 2}, {"kind": "500", "match": "/cdn/", "count": 1}]'
mk-yaml --remote --no-cache big.yml sout3
cmp bigwant/model.safetensors sout3/model.safetensors || fail "streamed merge with faults differs"
echo "streaming survived dropped ranges"

# --- allocation failures on the way to the Hub: each of mk's allocations
# in mk-plan (metadata, headers by range) and mk-get (downloads) failed in
# turn (every one under make check-full, a seeded sample under make check:
# sweep_points, in lib.inc), a fresh cache each time: a clean error or
# the same plan, never a crash (test/cli/failalloc.sh does the rest)
P=$MK_BUILD/preload/failalloc.so
if [ "$MK_SAN" = 0 ] && [ -f "$P" ]; then
	export HF_HUB_CACHE=$PWD/facache
	rm -rf facache
	mk-plan hub.yml > fa-want.plan
	for what in plan get; do
		rm -rf facache
		if [ $what = plan ]; then set -- mk-plan hub.yml; else set -- mk-get org/a; fi
		c=$(MK_FAIL_ALLOC_COUNT=1 LD_PRELOAD=$P "$@" 2>&1 >/dev/null | sed -n 's/^failalloc: \([0-9]*\) allocations$/\1/p')
		[ -n "$c" ] && [ "$c" -gt 10 ] || fail "failalloc $what: no allocation counted ($c)"
		tried=0
		for n in $(sweep_points "$c" $what); do
			rm -rf facache
			rc=0
			MK_FAIL_ALLOC=$n LD_PRELOAD=$P "$@" > fa-got 2> fa-err || rc=$?
			case $rc in
			0) [ $what = get ] || cmp -s fa-got fa-want.plan || fail "failalloc $what: allocation $n failed, exit 0, another plan" ;;
			1) grep -q "error: " fa-err || { cat fa-err; fail "failalloc $what: allocation $n: exit 1 without a message"; } ;;
			*) cat fa-err; fail "failalloc $what: allocation $n failed: exit $rc" ;;
			esac
			tried=$((tried + 1))
		done
		[ "$tried" -gt 0 ] || fail "failalloc $what: no allocation tried"
		echo "failalloc $what: $c allocations, $tried of them failed in turn"
	done
fi
