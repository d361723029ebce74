#!/bin/sh
# fuzz-coverage.sh [HARNESS...] - line coverage of the parsers reached by
# each fuzz harness's corpus: the committed one (test/fuzz/corpus/NAME)
# and what `make fuzz` grew (build-fuzz/corpus-fuzz_NAME).  Builds each
# harness with gcc --coverage in build-cov/, replays the corpora, and
# prints, per harness, the lines run out of the lines of the source files
# it exists for.  Run from the top of the tree after `make` (the generated
# sources in build/gen) and, for the grown corpora, `make fuzz`.
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"
[ -d build/gen ] || { echo "fuzz-coverage: run make first (build/gen)" >&2; exit 1; }
cov=build-cov
mkdir -p $cov
# the source files each harness is for
files_for() {
	case $1 in
	config|config_gen) echo src/config/config.c src/config/schema.c src/config/scalar.c src/config/modelref.c src/config/normalize.c src/config/param.c ;;
	st_header) echo src/io/safetensors.c ;;
	st_index) echo src/io/st_index.c ;;
	stream) echo src/stream/stream.c ;;
	frames) echo src/stream/stream.c src/stream/manifest.c src/stream/job.c src/stream/check.c src/verify/verify.c ;;
	plugin_elf) echo src/plugin/elf.c ;;
	journal) echo src/pack/pack.c:journal_parse ;;   # FILE:FUNCTION: that function only
	jsondoc) echo src/core/jsondoc.c ;;
	vocab) echo src/tokenizer/vocab.c src/core/jsondoc.c ;;
	*) echo "" ;;
	esac
}
libs=$(pkg-config --libs yaml-0.1 libzstd liburing jansson 2>/dev/null || echo "-lyaml -lzstd -luring -ljansson")
harnesses=${*:-$(ls test/fuzz/fuzz_*.c | sed 's|test/fuzz/fuzz_||; s|\.c$||')}
# the library once (its counts are cleared before each harness runs)
lib=$cov/lib
mkdir -p $lib
objs=""
for src in $(ls src/*/*.c) build/gen/arch_data.c build/gen/template_data.c; do
	o=$lib/$(echo "$src" | tr / _ | sed 's/\.c$/.o/')
	[ "$o" -nt "$src" ] || gcc -std=gnu11 -O0 --coverage -Iinclude -D_GNU_SOURCE -DMK_VERSION='"cov"' -c -o "$o" "$src"
	objs="$objs $o"
done
for h in $harnesses; do
	d=$cov/$h
	mkdir -p "$d"
	rm -f $lib/*.gcda
	gcc -std=gnu11 -O0 -Iinclude -D_GNU_SOURCE -c -o "$d/harness.o" test/fuzz/fuzz_$h.c
	gcc -std=gnu11 -O0 -c -o "$d/replay.o" test/fuzz/replay.c
	gcc --coverage -o "$d/replay" "$d/harness.o" "$d/replay.o" $objs $libs -lopenblas -lpthread -ldl -lm
	n=0
	for c in test/fuzz/corpus/$h build-fuzz/corpus-fuzz_$h; do
		[ -d "$c" ] || continue
		"$d/replay" "$c" > /dev/null
		n=$((n + $(ls "$c" | wc -l)))
	done
	total=0 run=0 line=""
	for spec in $(files_for "$h"); do
		f=${spec%%:*} fn=
		[ "$f" = "$spec" ] || fn=${spec#*:}
		o=$(echo "$f" | tr / _ | sed 's/\.c$/.o/')
		if [ -n "$fn" ]; then
			r=$(cd "$lib" && gcov -n -f -o "$o" "$top/$f" 2>/dev/null |
				awk -v fn="$fn" '$0 == "Function \x27" fn "\x27" {getline; print; exit}')
		else
			r=$(cd "$lib" && gcov -n -o "$o" "$top/$f" 2>/dev/null |
				awk -v f="$f" 'index($0, "File ") == 1 && substr($0, length($0) - length(f)) == f "\x27" {getline; print; exit}')
		fi
		# "Lines executed:72.31% of 130"
		pct=$(echo "$r" | sed -n 's/Lines executed:\([0-9.]*\)% of \([0-9]*\)/\1 \2/p')
		[ -n "$pct" ] || continue
		set -- $pct
		l=$(awk -v p="$1" -v t="$2" 'BEGIN { printf "%d", p * t / 100 + 0.5 }')
		total=$((total + $2))
		run=$((run + l))
		line="$line $(basename "$f")${fn:+:$fn} $1%"
	done
	if [ "$total" -gt 0 ]; then
		echo "fuzz_$h: $n inputs; lines run $run of $total ($(awk -v r=$run -v t=$total 'BEGIN { printf "%.1f", 100 * r / t }')%):$line"
	else
		echo "fuzz_$h: $n inputs"
	fi
done
