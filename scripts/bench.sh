#!/bin/sh
# bench.sh - merge synthetic llama-shaped models with mk, and with
# mergekit when its venv exists, and compare with the I/O floor.
# A benchmark, not a test: it reports, never asserts.
#
#   sh scripts/bench.sh          (after `make`; needs bc)
#
# The README's table (all twenty methods, mk-yaml against mergekit-yaml, on
# the embedding-heavy models):
#
#   SHAPES=emb:65536:1024 METHODS=all RUNS=5 MERGEKIT=1 RUNNERS=yaml \
#     JOBS=2 MEMS=default SPILL=0 sh scripts/bench.sh
#
# Other runs:
#   SHAPES="emb-tied:151936:896 llama:8 7b:2" METHODS="linear ties" RUNS=3 \
#     RUNNERS=yaml MERGEKIT=0 sh scripts/bench.sh      other shapes, mk only
#   RUNNERS="pipe yaml" JOBS="1 2" MEMS="default 256M" sh scripts/bench.sh
#                                  the four processes and mk-yaml, threads,
#                                  a memory budget, --spill (SPILL=1)
#   BASE_BUILD=/path/to/old/build RUNS=7 MERGEKIT=0 RUNNERS=yaml sh scripts/bench.sh
#                                  this build against another, run by run
#   MEMCG=2048 MERGEKIT=0 sh scripts/bench.sh   (as root) inputs read from
#                                  disk: the page cache cannot keep the models
#
# mergekit's columns need mergekit 0.1.5 in a venv: scripts/conformance
# makes it (at $MK_CONFORMANCE_VENV); without it they stay empty.  The
# script prints the machine, then one Markdown table row per setting.  It
# times mk beside a floor run every time, so read "x floor" (and mk/base)
# within one run of the script: the floor moves with the disk and with
# other work on the machine, and numbers from other machines or other runs
# do not compare.  A quiet machine helps; RUNS=7 or more narrows the spread.
#
# Environment:
#   BUILD      build directory (build)
#   SHAPES     model shapes, all BF16, each one of
#                llama:L          hidden 2048, vocab 32000, L layers (8: about
#                                 1 GB per model; 38: about 4 GB)
#                emb:V:H          embedding-heavy: vocab V, hidden H,
#                                 intermediate 2H, 2 layers (65536:1024 is
#                                 about 300 MB, shaped like Qwen2.5-0.5B,
#                                 Llama-3.2-1B, Gemma)
#                emb-tied:V:H     the same with lm_head tied to the embeddings
#                7b:L             a 7B-like layer (hidden 4096, intermediate
#                                 14336; the generator's 4 KV heads), L layers
#              default "emb:65536:1024 emb-tied:151936:896 llama:8"
#   SIZES      the old form, layer counts of llama:L ("8 38"); SHAPES wins
#   METHODS    "linear slerp ties dare_ties"; "all": the 20 methods, each
#              on a config of the kind users write (bench.sh's config())
#   RUNNERS    how mk runs: "pipe" (mk-plan | mk-fetch | mk-merge | mk-pack,
#              one process each, each stage's RSS) and/or "yaml" (mk-yaml,
#              one command; RSS of the whole) (pipe)
#   JOBS       mk-merge's -j settings, e.g. "1 2" ("default": mk's own)
#   MEMS       mk's --max-memory settings: "default 256M" (default: the
#              plan's quarter of RAM; a size: split as mk-yaml does, half
#              to the merge, a quarter each to mk-fetch and mk-pack)
#   SPILL      1: also ties and dare_ties with --spill at the smallest MEMS
#   RUNS       runs per mk setting, each beside a floor run; the median of
#              the per-run ratios is reported (5)
#   MERGEKIT   1: also mergekit-yaml once per size and method (1)
#   INPUT_CACHE  the models' pages in the page cache as "written" (as the
#              generator's writes left them: small folios) or "read" (dropped
#              after they are written and read back, as a read from disk
#              leaves them: 2 MiB folios where the file system has large
#              folios, which mk's mappings then map whole) (written)
#   MEMCG      a size in MiB: the script and every run in it in a memory
#              cgroup of that size, the page cache dropped before each run
#              (root; cgroup v1 or v2): a host whose page cache cannot keep
#              the models between a merge's passes, so what mk reads it reads
#              from disk; the floor's reads too, its writer's bytes from
#              /dev/zero; mergekit not run (it needs more memory than that)
#              (unset: none)
#   BASE_BUILD another build directory (the one before a change): each run
#              of mk is followed by the same run of that build's, and two
#              columns more give its median time and the median of the
#              per-run ratios mk / it (unset: none)
#   MK_CONFORMANCE_VENV  mergekit's venv (~/.cache/mk/mergekit-0.1.5-venv)
#   BENCH_DIR  where models and outputs go (${TMPDIR:-/tmp}); needs about
#              3 x the model size + 2 outputs free
#
# Per row: mk's wall time (mk-plan | mk-fetch | mk-merge | mk-pack, output
# fsynced), its throughput over the input bytes, each stage's peak RSS, and
# the I/O floor measured run by run beside it: the inputs read once (cat to
# /dev/null) plus the output's bytes written once from memory with mk-pack's
# durability (dd of a page-cached file of the output's size, conv=fsync),
# the faster of two ways of writing, both in every run (order alternating):
# through the page cache, and O_DIRECT (oflag=direct) as mk-pack writes;
# inputs in page cache for both.  "x floor" is the median of the per-run
# ratios mk / floor.  mergekit-yaml on the same config, output fsynced too.
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${BUILD:-$top/build}
SIZES=${SIZES:-}
SHAPES=${SHAPES:-}
if [ -z "$SHAPES" ]; then
	if [ -n "$SIZES" ]; then
		for L in $SIZES; do SHAPES="$SHAPES llama:$L"; done
	else
		SHAPES="emb:65536:1024 emb-tied:151936:896 llama:8"
	fi
fi
RUNS=${RUNS:-5}
METHODS=${METHODS:-"linear slerp ties dare_ties"}
MEMS=${MEMS:-"default 256M"}
RUNNERS=${RUNNERS:-pipe}
JOBS=${JOBS:-default}
SPILL=${SPILL:-1}
MERGEKIT=${MERGEKIT:-1}
INPUT_CACHE=${INPUT_CACHE:-written}
venv=${MK_CONFORMANCE_VENV:-$HOME/.cache/mk/mergekit-0.1.5-venv}
BENCH_DIR=${BENCH_DIR:-${TMPDIR:-/tmp}}
T=$BUILD/tools
BASE_BUILD=${BASE_BUILD:-}
MEMCG=${MEMCG:-}
command -v bc >/dev/null || { echo "bench: needs bc" >&2; exit 1; }
work=$(mktemp -d "$BENCH_DIR/mk-bench.XXXXXX")
cg=""
cg_leave() {
	[ -n "$cg" ] || return 0
	echo $$ > "${cg%/*}/cgroup.procs" 2>/dev/null || true
	rmdir "$cg" 2>/dev/null || true
}
trap 'rm -rf "$work"; cg_leave' EXIT INT TERM
if [ -n "$MEMCG" ]; then
	MERGEKIT=0
	if [ -f /sys/fs/cgroup/cgroup.controllers ]; then
		cg=/sys/fs/cgroup/mk-bench-$$
		mkdir "$cg" && echo $((MEMCG * 1048576)) > "$cg/memory.max"
	else
		cg=/sys/fs/cgroup/memory/mk-bench-$$
		mkdir "$cg" && echo $((MEMCG * 1048576)) > "$cg/memory.limit_in_bytes"
	fi
	echo $$ > "$cg/cgroup.procs"
fi

now() { date +%s.%N; }
median() { tr ' ' '\n' | grep . | sort -n | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
# the models a method reads: "a b c" (a base and two others), "a b", "a"
inputs_of() {
	case $1 in
	slerp|nuslerp|nearswap|arcee_fusion) echo "a b" ;;
	passthrough) echo "a" ;;
	*) echo "a b c" ;;
	esac
}
ALL_METHODS="linear slerp nuslerp multislerp karcher task_arithmetic ties dare_linear dare_ties breadcrumbs breadcrumbs_ties della della_linear sce model_stock nearswap arcee_fusion passthrough ram ramplus_tl"
[ "$METHODS" = all ] && METHODS=$ALL_METHODS
config() { # method dir
	d=$2
	case $1 in
	linear|multislerp) printf 'merge_method: %s\nmodels:\n  - model: %s/a\n    parameters: {weight: 0.5}\n  - model: %s/b\n    parameters: {weight: 0.3}\n  - model: %s/c\n    parameters: {weight: 0.2}\n' "$1" "$d" "$d" "$d" ;;
	karcher) printf 'merge_method: karcher\nmodels:\n  - model: %s/a\n  - model: %s/b\n  - model: %s/c\n' "$d" "$d" "$d" ;;
	slerp) printf 'merge_method: slerp\nbase_model: %s/a\nmodels:\n  - model: %s/a\n  - model: %s/b\nparameters:\n  t: 0.4\n' "$d" "$d" "$d" ;;
	nuslerp) printf 'merge_method: nuslerp\nmodels:\n  - model: %s/a\n    parameters: {weight: 0.6}\n  - model: %s/b\n    parameters: {weight: 0.4}\n' "$d" "$d" ;;
	sce|model_stock|ram|ramplus_tl) printf 'merge_method: %s\nbase_model: %s/a\nmodels:\n  - model: %s/b\n  - model: %s/c\n' "$1" "$d" "$d" "$d" ;;
	task_arithmetic) printf 'merge_method: %s\nbase_model: %s/a\nmodels:\n  - model: %s/b\n    parameters: {weight: 0.6}\n  - model: %s/c\n    parameters: {weight: 0.4}\n' "$1" "$d" "$d" "$d" ;;
	ties|dare_linear|dare_ties|breadcrumbs|breadcrumbs_ties|della|della_linear) printf 'merge_method: %s\nbase_model: %s/a\nmodels:\n  - model: %s/b\n    parameters: {weight: 0.6, density: 0.5}\n  - model: %s/c\n    parameters: {weight: 0.4, density: 0.5}\n' "$1" "$d" "$d" "$d" ;;
	nearswap) printf 'merge_method: nearswap\nbase_model: %s/a\nmodels:\n  - model: %s/b\nparameters:\n  t: 0.001\n' "$d" "$d" ;;
	arcee_fusion) printf 'merge_method: arcee_fusion\nbase_model: %s/a\nmodels:\n  - model: %s/b\n' "$d" "$d" ;;
	passthrough) printf 'merge_method: passthrough\nmodels:\n  - model: %s/a\n' "$d" ;;
	*) echo "bench: no configuration for method '$1'" >&2; exit 2 ;;
	esac
}
# size in bytes of `mk-yaml --max-memory` shares
share() { echo "$1" | awk -v d="$2" '{ v=$1; u=1; if (v ~ /[Gg]/) u=1024^3; else if (v ~ /[Mm]/) u=1024^2; sub(/[^0-9.]+$/, "", v); printf "%d", v*u/d }'; }

cache="inputs in the page cache as $INPUT_CACHE"
[ -n "$MEMCG" ] && cache="in a memory cgroup of $MEMCG MiB, the page cache dropped before each run"
echo "machine: $(nproc) cores ($(awk -F': ' '/model name/ {print $2; exit}' /proc/cpuinfo)), $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo), Linux $(uname -r); $cache"
# one run of mk as the row says, of build directory $1, into $work/out
mk_run() {
	if [ "$runner" = pipe ]; then
		# shellcheck disable=SC2086
		$T/mk-rss "$work/p.rss" $1/bin/mk-plan $pa "$work/$m.yml" | $T/mk-rss "$work/f.rss" $1/bin/mk-fetch $fa |
			$T/mk-rss "$work/m.rss" $1/bin/mk-merge $ma $ja | $T/mk-rss "$work/k.rss" $1/bin/mk-pack $ka --no-progress "$work/out"
	else
		# shellcheck disable=SC2086
		$T/mk-rss "$work/m.rss" $1/bin/mk-yaml --quiet $ya $ja "$work/$m.yml" "$work/out"
		echo 0 > "$work/p.rss"; echo 0 > "$work/f.rss"; echo 0 > "$work/k.rss"
	fi
}
# mk_run of build directory $1 timed (its output removed first, the inputs
# warm): the seconds in run_s
timed_run() {
	rm -rf "$work/out"; sync; warm
	t0=$(now)
	mk_run "$1"
	t1=$(now)
	run_s=$(echo "$t1 - $t0" | bc)
}
head='| shape | size | method | mode | input GB | I/O floor s | mk s | x floor | mk MB/s | RSS plan/fetch/merge/pack MiB | mergekit s | mergekit RSS MiB | mergekit/mk |'
rule='|---|---|---|---|---|---|---|---|---|---|---|---|---|'
[ -n "$BASE_BUILD" ] && head="$head base s | mk/base |" rule="$rule---|---|"
printf '%s\n%s\n' "$head" "$rule"
for shape in $SHAPES; do
	rm -rf "$work/m"
	mkdir -p "$work/m"
	kind=${shape%%:*} rest=${shape#*:}
	p1=${rest%%:*} p2=${rest#*:}
	case $kind in
	llama) gen="--hidden 2048 --layers $p1 --vocab 32000 --shards 2" ;;
	emb) gen="--hidden $p2 --inter $((2 * p2)) --layers 2 --vocab $p1" ;;
	emb-tied) gen="--hidden $p2 --inter $((2 * p2)) --layers 2 --vocab $p1 --tied" ;;
	7b) gen="--hidden 4096 --inter 14336 --layers $p1 --vocab 32000 --shards 2" ;;
	*) echo "bench: unknown shape '$shape'" >&2; exit 2 ;;
	esac
	for s in a b c; do
		# shellcheck disable=SC2086
		$T/mk-gen-model --dtype BF16 $gen --seed "$(printf '%d' "'$s")" "$work/m/$s" > /dev/null
	done
	if [ "$INPUT_CACHE" = read ]; then
		# out of the page cache, to be read back by warm() below
		sync
		for f in "$work"/m/*/*; do dd if="$f" iflag=nocache count=0 2>/dev/null; done
	fi
	abytes=$(cat "$work"/m/a/*.safetensors | wc -c)
	gb=$(echo "$abytes" | awk '{printf "%.2f", $1/1e9}')
	if [ -n "$MEMCG" ]; then
		warm() { sync; echo 3 > /proc/sys/vm/drop_caches; }
	else
		warm() { cat "$work"/m/a/* "$work"/m/b/* "$work"/m/c/* > /dev/null; }
	fi
	for m in $METHODS; do
		config $m "$work/m" > "$work/$m.yml"
		files=$(for s in $(inputs_of $m); do echo "$work/m/$s"/*.safetensors; done)
		inb=$(cat $files | wc -c)
		# the floor's writer copies a page-cached file of the output's size
		# (with MEMCG, /dev/zero: the cgroup's page cache may not hold it)
		[ -n "$MEMCG" ] || cat "$work"/m/a/*.safetensors > "$work/outsrc"
		modes=""
		for mem in $MEMS; do modes="$modes $mem"; done
		if [ "$SPILL" = 1 ] && { [ $m = ties ] || [ $m = dare_ties ]; }; then
			small=$(for mem in $MEMS; do [ "$mem" != default ] && echo "$mem"; done | head -n 1)
			[ -n "$small" ] && modes="$modes spill:$small"
		fi
		all=""
		for mode in $modes; do for r in $RUNNERS; do for j in $JOBS; do all="$all $mode,$r,$j"; done; done; done
		first=1
		for mrj in $all; do
			mode=${mrj%%,*} rj=${mrj#*,}
			runner=${rj%%,*} jobs=${rj#*,}
			ja=""
			[ "$jobs" != default ] && ja="-j $jobs"
			mem=${mode#spill:}
			pa="" fa="" ma="" ka=""
			if [ "$mem" != default ]; then
				pa="--max-memory $(share "$mem" 2)" ma="$pa"
				fa="--max-memory $(share "$mem" 4)" ka="$fa"
			fi
			ya=""
			[ "$mem" != default ] && ya="--max-memory $mem"
			case $mode in spill:*) mkdir -p "$work/spill"; pa="$pa --spill" ma="$ma --spill $work/spill" ya="$ya --spill $work/spill" ;; esac
			ts="" fl="" ra="" tb="" rb="" rp=0 rf=0 rm=0 rk=0
			for i in $(seq "$RUNS"); do
				rm -rf "$work/out" "$work/floor"; sync; warm
				[ -n "$MEMCG" ] || cat "$work/outsrc" > /dev/null
				t0=$(now)
				cat $files > /dev/null
				t1=$(now)
				ways="direct buffered"
				[ $((i % 2)) = 1 ] && ways="buffered direct"
				w=""
				for way in $ways; do
					rm -f "$work/floor"; sync
					of=""
					[ $way = direct ] && of="oflag=direct"
					t2=$(now)
					# shellcheck disable=SC2086
					if [ -n "$MEMCG" ]; then
						dd if=/dev/zero of="$work/floor" bs=4M count="$abytes" iflag=count_bytes $of conv=fsync status=none
					else
						dd if="$work/outsrc" of="$work/floor" bs=4M $of conv=fsync status=none
					fi
					t3=$(now)
					w="$w $(echo "$t3 - $t2" | bc)"
				done
				f1=$(echo "$t1 - $t0 + $(echo $w | tr ' ' '\n' | sort -n | head -n 1)" | bc)
				fl="$fl $f1"
				rm -f "$work/floor"; sync
				# the baseline first in every other run (which of the two
				# ran first after the floor moved their ratio by up to 25%
				# through the pipes here)
				[ -n "$BASE_BUILD" ] && [ $((i % 2)) = 0 ] && { timed_run "$BASE_BUILD"; b1=$run_s; }
				timed_run "$BUILD"
				m1=$run_s
				ts="$ts $m1"
				ra="$ra $(echo "$m1 / $f1" | bc -l)"
				for k in p f m k; do
					v=$(cat "$work/$k.rss")
					eval "cur=\$r$k"
					[ "$v" -gt "$cur" ] && eval "r$k=$v"
				done
				[ -n "$BASE_BUILD" ] && [ $((i % 2)) = 1 ] && { timed_run "$BASE_BUILD"; b1=$run_s; }
				[ -n "$BASE_BUILD" ] && tb="$tb $b1" rb="$rb $(echo "$m1 / $b1" | bc -l)"
			done
			t=$(echo $ts | median) floor=$(echo $fl | median) ratio=$(echo $ra | median)
			mkres=" | | "
			if [ $first = 1 ] && [ "$MERGEKIT" = 1 ] && [ -x "$venv/bin/mergekit-yaml" ]; then
				rm -rf "$work/ref"; sync; warm
				/usr/bin/time -f "%e %M" -o "$work/time.txt" sh -c "'$venv/bin/mergekit-yaml' '$work/$m.yml' '$work/ref' >/dev/null 2>&1 && sync '$work/ref'/*" || true
				mkres=$(awk -v t="$t" '{printf "%.1f | %.0f | %.1fx", $1, $2/1024, $1/t}' "$work/time.txt")
				rm -rf "$work/ref"
			fi
			first=0
			label=$mode
			[ "$runner" = yaml ] && label="$label, mk-yaml"
			[ "$jobs" != default ] && label="$label, -j $jobs"
			if [ "$runner" = pipe ]; then
				rss=$(printf '%.0f / %.0f / %.0f / %.0f' "$(echo "$rp/1024" | bc -l)" "$(echo "$rf/1024" | bc -l)" \
					"$(echo "$rm/1024" | bc -l)" "$(echo "$rk/1024" | bc -l)")
			else
				rss=$(printf '%.0f (mk-yaml)' "$(echo "$rm/1024" | bc -l)")
			fi
			base=""
			[ -n "$BASE_BUILD" ] && base=$(printf ' %.2f | %.3f |' "$(echo $tb | median)" "$(echo $rb | median)")
			printf '| %s | %s GB | %s | %s | %.2f | %.2f | %.2f | %.2f | %.0f | %s | %s |%s\n' "$shape" "$gb" $m "$label" \
				"$(echo "$inb/1000000000" | bc -l)" "$floor" "$t" "$ratio" \
				"$(echo "$inb/$t/1000000" | bc -l)" "$rss" "$mkres" "$base"
		done
	done
done
