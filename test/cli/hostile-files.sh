# Hostile model files: a FIFO, a device or a directory where mk opens a
# file by name is refused at once (never waited on); a model file
# truncated while it is read (the mmap reader's maps, the zero-copy
# channels of mk-yaml) is reported by name, with no SIGBUS and no OUT;
# every reader mode reads every kind of model or says why not; and a
# safetensors header costs memory and time in proportion to its bytes.
. "$MK_TOP/test/cli/lib.inc"
command -v python3 >/dev/null 2>&1 || exit 77
mk-gen-model --shards 2 --layers 1 --seed 3 m > /dev/null
mk-gen-model --layers 1 --seed 4 m2 > /dev/null
python3 "$MK_TOP/test/tools/mk-gen-lora.py" m2 lo --r 4 --alpha 8 > /dev/null
lin_config() { # lin_config FILE A B: a linear merge of A and B
	printf 'merge_method: linear\nmodels:\n  - model: %s\n    parameters: {weight: 1}\n  - model: %s\n    parameters: {weight: 1}\n' \
		"$2" "$3" > "$1"
}
# refused FILE-KIND... MSG CMD...: within 60 s, exit 1 naming the problem
refused() {
	msg=$1
	shift
	expect_fail 1 "$msg" timeout 60 "$@"
}

# --- not a regular file ------------------------------------------------------
# each of a model's files as a FIFO (no writer: an open(2) of it would
# wait for ever), a directory, a device; mk-plan, mk-fetch and mk-yaml
have_dev=0
mknod probe c 1 3 2>/dev/null && have_dev=1 && rm -f probe
for f in config.json model.safetensors.index.json model-00001-of-00002.safetensors tokenizer.json \
	tokenizer_config.json generation_config.json; do
	for k in fifo dir dev; do
		[ $k = dev ] && [ $have_dev = 0 ] && continue
		rm -rf h && cp -r m h && rm h/$f
		case $k in fifo) mkfifo h/$f; what="a FIFO" ;; dir) mkdir h/$f; what="a directory" ;;
			dev) mknod h/$f c 1 3; what="a character device" ;; esac
		lin_config p.yml h m2
		case $f in model.safetensors.index.json) want="$f in h is $what, not a regular file" ;;
			*) want="h/$f: not a regular file ($what)" ;; esac
		refused "$want" mk-plan p.yml -o p.mks
		refused "$want" mk-yaml p.yml out
		no_out out
		refused "$want" mk-fetch --model h -o s.mks
	done
done
# a device linked in from outside the model: outside, so refused as such
rm -rf h && cp -r m h && rm h/config.json && ln -s /dev/zero h/config.json
lin_config p.yml h m2
refused "'config.json' leads outside the model's directory (to /dev/zero)" mk-plan p.yml -o p.mks
refused "h/config.json: not a regular file (a character device)" mk-fetch --model h -o s.mks
# the configuration itself
mkfifo fifo.yml
refused "fifo.yml: not a regular file (a FIFO)" mk-plan fifo.yml -o p.mks
refused "fifo.yml: not a regular file (a FIFO)" mk-yaml fifo.yml out
no_out out
refused "fifo.yml: not a regular file (a FIFO)" mk-card fifo.yml
ln -s /dev/zero zero.yml
refused "zero.yml: not a regular file (a character device)" mk-plan zero.yml -o p.mks
mkdir dir.yml
refused "dir.yml: not a regular file (a directory)" mk-yaml dir.yml out
no_out out
# ...but a pipe handed over by its descriptor is read, its writer gone or not
lin_config p.yml m m2
mk-plan p.yml -o want.mks
cat p.yml | timeout 60 mk-plan /dev/stdin -o got.mks && cmp -s want.mks got.mks || fail "mk-plan /dev/stdin"
timeout 60 mk-plan /dev/fd/3 -o got.mks 3< p.yml && cmp -s want.mks got.mks || fail "mk-plan /dev/fd/3"
# a LoRA adapter's files
for f in adapter_model.safetensors adapter_config.json; do
	rm -rf l && cp -r lo l && rm l/$f && mkfifo l/$f
	printf 'merge_method: passthrough\nmodels:\n  - model: m2+l\n' > l.yml
	case $f in adapter_config.json) want="l/$f: not a regular file (a FIFO)" ;;
		*) want="$f in l is a FIFO, not a regular file" ;; esac
	refused "$want" mk-plan l.yml -o p.mks
done
# a state dict named as one file
mkfifo sd.safetensors
printf 'merge_method: linear\nmodels:\n  - model: sd.safetensors\n    parameters: {weight: 1}\n' > sd.yml
refused "sd.safetensors" mk-pytorch sd.yml out
no_out out
refused "sd.safetensors: not a regular file (a FIFO)" mk-fetch --model sd.safetensors -o s.mks

# --- every reader, every kind of model ---------------------------------------
# local shards, one file, a torch.save .bin, a LoRA through a plan: the
# same stream from each reader as from pread
python3 "$MK_TOP/test/tools/mk-gen-torchbin.py" m2 mbin > /dev/null
printf 'merge_method: passthrough\nmodels:\n  - model: m2+lo\n' > l.yml
mk-plan l.yml -o l.plan
for io in pread uring mmap http auto; do
	for ref in m m/model-00001-of-00002.safetensors mbin; do
		timeout 60 mk-fetch --io $io --model $ref -o $io.mks 2> err.txt || { cat err.txt >&2; fail "--io $io --model $ref"; }
		[ $io = pread ] && cp $io.mks want-$(echo $ref | tr / _).mks
		cmp -s $io.mks want-$(echo $ref | tr / _).mks || fail "--io $io --model $ref: another stream"
	done
	timeout 60 mk-fetch --io $io -i l.plan -o $io.mks 2> err.txt || { cat err.txt >&2; fail "--io $io, a LoRA plan"; }
	[ $io = pread ] && cp $io.mks want-l.mks
	cmp -s $io.mks want-l.mks || fail "--io $io, a LoRA plan: another stream"
done
# http needs no libcurl for local files
MK_CURL_LIB=/nonexistent timeout 60 mk-fetch --io http --model m -o nocurl.mks && cmp -s nocurl.mks want-m.mks ||
	fail "--io http of a local model without libcurl"
# a Hub model (the test suite's mock Hub), from the cache and remote
mkdir -p root/org && cp -r m root/org/a
. "$MK_TOP/test/cli/hub.inc"
hub_start root
hub_fetch() { # hub_fetch OFFLINE IO [OPTION]...: mk-fetch org/a, a stream as m's
	off=$1 io=$2
	shift 2
	env HF_HUB_OFFLINE=$off HF_HUB_CACHE=$PWD/cache \
		timeout 60 mk-fetch --io $io "$@" --model org/a -o hub.mks 2> err.txt ||
		{ cat err.txt >&2; fail "--io $io $* --model org/a"; }
	cmp -s hub.mks want-m.mks || fail "--io $io $* --model org/a: another stream"
}
for io in pread uring mmap http auto; do
	hub_fetch 0 $io --remote --no-cache   # by range requests, nothing kept
	! ls cache/models--org--a/snapshots/*/ | grep -q '\.safetensors$' ||
		fail "--io $io --remote --no-cache: shards were downloaded"
done
hub_fetch 0 pread                # downloaded into the cache, then read
for io in pread uring mmap http auto; do
	hub_fetch 1 $io                  # the cache's copy
done
kill $hub

# --- a file truncated while it is read ---------------------------------------
# faultio.so stops the program at a write (SIGSTOP); once it is stopped
# the model's file is cut, then it goes on: exit 1, the file named, no OUT
P=$MK_TOP/build/preload/faultio.so
[ -f "$P" ] || { [ "$MK_SAN" = 1 ] && exit 77; fail "no $P"; }
[ "$MK_SAN" = 1 ] && export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}verify_asan_link_order=0"
mk-gen-model --seed 7 --dtype F32 --hidden 256 --layers 2 --vocab 4096 tb > /dev/null
# cut_at SPEC PROG CMD...: run CMD, PROG stopping at SPEC; cut tc's
# weights there; CMD must exit 1 naming the file
cut_at() {
	spec=$1 prog=$2
	shift 2
	rm -rf tc out out.mk-partial cut.mks && cp -r tb tc
	MK_FAULT_IO=$spec MK_FAULT_IO_PROG=$prog LD_PRELOAD=$P "$@" 2> err.txt > out.txt &
	pid=$!
	n=0
	while [ "$(sed 's/.*) //' /proc/$pid/stat | cut -c1)" != T ]; do
		n=$((n + 1))
		[ $n -le 6000 ] || { kill -9 $pid; fail "$prog never stopped at $spec"; }
		sleep 0.01
	done
	truncate -s 4096 tc/model.safetensors
	kill -CONT $pid
	set +e
	wait $pid
	rc=$?
	set -e
	[ $rc -eq 1 ] || { cat err.txt >&2; fail "$prog, its input cut at $spec: exit $rc, not 1"; }
	err_has "tc/model.safetensors' was truncated while being read" "$prog, its input cut at $spec: no message"
}
lin_config t.yml tc tb
for io in mmap pread; do
	MK_IO=$io cut_at pwrite:6:stop mk-yaml mk-yaml t.yml out
	no_out out
done
# with --resume the cut run keeps OUT.mk-partial; resumed on the whole
# file again, it must rewrite every tensor written after the cut (none
# journalled with the zeros read in place of the lost pages)
MK_IO=mmap cut_at pwrite:6:stop mk-yaml mk-yaml --resume t.yml out
[ ! -e out ] || fail "--resume: OUT written although its input was cut"
[ -d out.mk-partial ] || fail "--resume: the cut run kept no OUT.mk-partial"
rm -rf tc && cp -r tb tc
mk-yaml --quiet --resume t.yml out
mk-yaml --quiet t.yml whole
cmp out/model.safetensors whole/model.safetensors || fail "--resume after a cut input: the output differs from a whole run's"
rm -rf out whole
for io in mmap pread uring; do
	cut_at writev:40:stop mk-fetch mk-fetch --io $io --model tc --chunk-size 64KiB -o cut.mks
done
mkfifo pipe
mk-pack -i pipe out 2> pack.err &
pk=$!
cut_at splice:40:stop mk-fetch mk-fetch --io mmap --model tc --chunk-size 64KiB -o pipe
set +e; wait $pk; rc=$?; set -e
[ $rc -eq 1 ] || fail "mk-pack after a cut mk-fetch: exit $rc"
no_out out

# --- what a safetensors header costs -----------------------------------------
# 24 MB of __metadata__ (800 000 entries), then 200 000 tensors (17 MB):
# read in a time and memory in proportion to the header (before, as a
# JSON tree: mk-st-diff of the first 2.3 times the bound below)
[ "$MK_SAN" = 1 ] && { entries=100000; tensors=20000; } || { entries=800000; tensors=200000; }
python3 - "$entries" "$tensors" <<'PY'
import json, os, struct, sys
def write(d, h, data):
    os.makedirs(d)
    b = json.dumps(h, separators=(",", ":")).encode()
    b += b" " * (-len(b) % 8)
    with open(d + "/model.safetensors", "wb") as f:
        f.write(struct.pack("<Q", len(b)) + b + data)
    with open(d + "/config.json", "w") as f:
        json.dump({"architectures": ["LlamaForCausalLM"], "model_type": "llama"}, f)
e, t = int(sys.argv[1]), int(sys.argv[2])
write("meta", {"__metadata__": {"k%07d" % i: "v" * 16 for i in range(e)},
               "w": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}}, bytes(16))
write("many", {"model.t%07d.weight" % i: {"dtype": "F32", "shape": [1], "data_offsets": [4 * i, 4 * i + 4]}
               for i in range(t)}, bytes(4 * t))
PY
# mk-st-diff D D holds two parses of the header at once
for d in meta many; do
	hdr=$(od -An -tu8 -N8 $d/model.safetensors | tr -d ' ')
	timeout 60 mk-rss $d.rss mk-st-diff $d $d > /dev/null || fail "mk-st-diff of the $d header"
	kib=$(cat $d.rss)
	# a parse: the header's bytes read, as many again for its strings, 24
	# bytes a metadata entry and 192 a tensor at the most; and the program
	case $d in meta) per=$((2 * hdr + 24 * entries)) ;; many) per=$((2 * hdr + 192 * tensors)) ;; esac
	bound=$(((2 * per) / 1024 + 20 * 1024))
	[ "$MK_SAN" = 1 ] || [ "$kib" -le "$bound" ] || fail "a $hdr-byte header ($d): peak RSS $kib KiB > $bound KiB"
done
