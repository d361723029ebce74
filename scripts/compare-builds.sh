#!/bin/sh
# compare-builds.sh OLD_BIN NEW_BIN [WORK] - run a fixed set of merges and
# re-shards with two builds of mk and compare what they write.
#
# The set: every test/conformance/*.yml and testdata/configs/*.yml (each
# through mk-yaml and through the four stages by hand, with the streams
# saved), and re-shards of the bundled models at three shard sizes.  For
# every case the output directories must be identical file for file, byte
# for byte; the saved streams (plan, inputs, tensors) are compared too, and
# a stream that differs is reported with the frames that differ (from
# NEW_BIN's mk-cat), since a stream may change on purpose between
# versions (mk-stream(5) says which frames did).  Exit 0 when every output
# directory is identical, 1 otherwise; prints one line per case and a
# summary "compare: N identical, N differ; streams: N identical, N differ".
#
# Typical use: keep a copy of the previous build's programs, rebuild, then
#   scripts/compare-builds.sh /tmp/mk-old/bin build/bin
set -u
[ $# -ge 2 ] || { echo "usage: $0 OLD_BIN NEW_BIN [WORK]" >&2; exit 2; }
old=$(cd "$1" && pwd) new=$(cd "$2" && pwd)
top=$(cd "$(dirname "$0")/.." && pwd)
work=${3:-$(mktemp -d "${TMPDIR:-/tmp}/mk-compare.XXXXXX")}
mkdir -p "$work"
cd "$top"
same=0 differ=0 ssame=0 sdiffer=0

# run BIN DIR CFG: mk-yaml into DIR/yaml, the stages by hand into DIR/pipe
run_cfg() {
	rm -rf "$2" && mkdir -p "$2"
	"$1/mk-yaml" --quiet "$3" "$2/yaml" 2>"$2/yaml.err" || echo "mk-yaml failed: $(cat "$2/yaml.err")" >"$2/yaml.failed"
	"$1/mk-plan" "$3" -o "$2/plan.mks" 2>"$2/plan.err" &&
	"$1/mk-fetch" <"$2/plan.mks" >"$2/inputs.mks" 2>"$2/fetch.err" &&
	"$1/mk-merge" <"$2/inputs.mks" >"$2/tensors.mks" 2>"$2/merge.err" &&
	"$1/mk-pack" "$2/pipe" <"$2/tensors.mks" 2>"$2/pack.err" ||
		echo "pipeline failed" >"$2/pipe.failed"
}

# run_reshard BIN DIR MODEL SIZE
run_reshard() {
	rm -rf "$2" && mkdir -p "$2"
	"$1/mk-fetch" --model "$3" >"$2/tensors.mks" 2>"$2/fetch.err" &&
	"$1/mk-pack" --out-shard-size "$4" "$2/pipe" <"$2/tensors.mks" 2>"$2/pack.err" ||
		echo "re-shard failed" >"$2/pipe.failed"
}

# compare NAME: output trees byte for byte, then streams
compare() {
	a=$work/old/$1 b=$work/new/$1 why=""
	for d in yaml pipe; do
		[ -e "$a/$d.failed" ] || [ -e "$b/$d.failed" ] || [ -d "$a/$d" ] || continue
		if [ -e "$a/$d.failed" ] || [ -e "$b/$d.failed" ]; then
			# both refusing the same way counts as the same outcome
			if [ -e "$a/$d.failed" ] && [ -e "$b/$d.failed" ]; then continue; fi
			why="$why $d: one build failed"
			continue
		fi
		(cd "$a/$d" && find . -type f | sort) >"$work/la"
		(cd "$b/$d" && find . -type f | sort) >"$work/lb"
		cmp -s "$work/la" "$work/lb" || { why="$why $d: different files"; continue; }
		while read -r f; do
			cmp -s "$a/$d/$f" "$b/$d/$f" || why="$why $d/${f#./}"
		done <"$work/la"
	done
	if [ -z "$why" ]; then
		same=$((same + 1)); line="same   $1"
	else
		differ=$((differ + 1)); line="DIFFER $1:$why"
	fi
	sw=""
	for s in plan inputs tensors; do
		[ -f "$a/$s.mks" ] || continue
		if cmp -s "$a/$s.mks" "$b/$s.mks"; then continue; fi
		"$new/mk-cat" "$a/$s.mks" >"$work/ca" 2>&1
		"$new/mk-cat" "$b/$s.mks" >"$work/cb" 2>&1
		types=$(diff "$work/ca" "$work/cb" | sed -n 's/^[<>] *#[0-9]* *\([A-Za-z ]\{4\}\).*/\1/p' | sort -u | paste -sd, -)
		sw="$sw $s(${types:-bytes})"
	done
	if [ -z "$sw" ]; then ssame=$((ssame + 1)); else sdiffer=$((sdiffer + 1)); line="$line; streams differ:$sw"; fi
	echo "$line"
}

for cfg in test/conformance/*.yml testdata/configs/*.yml; do
	n=$(basename "$(dirname "$cfg")")-$(basename "$cfg" .yml)
	run_cfg "$old" "$work/old/$n" "$cfg"
	run_cfg "$new" "$work/new/$n" "$cfg"
	compare "$n"
done
for m in testdata/models/tiny-a testdata/models/tiny-b testdata/models/conf/*; do
	[ -d "$m" ] || continue
	for sz in 200K 1M 5G; do
		n=reshard-$(basename "$m")-$sz
		run_reshard "$old" "$work/old/$n" "$m" "$sz"
		run_reshard "$new" "$work/new/$n" "$m" "$sz"
		compare "$n"
	done
done
echo "compare: $same identical, $differ differ; streams: $ssame identical, $sdiffer differ (work: $work)"
[ "$differ" -eq 0 ]
