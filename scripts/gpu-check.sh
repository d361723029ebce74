#!/bin/sh
# gpu-check.sh - mk's GPU check, for a machine with an NVIDIA GPU and nvcc
# but none of mk's libraries, no package registry and no network.
#
#   scripts/gpu-check.sh --pack [DIR]
#       HERE (Debian 12 with mk's build dependencies, `make deps`, and nvcc):
#       collect what the GPU machine needs into DIR (default
#       build-gpu-carry/, ignored by git; about 15 MiB):
#         include/   the headers of libyaml, zstd, liburing, jansson,
#                    cblas (OpenBLAS), cmocka
#         lib/       libyaml.a libzstd.a liburing.a libjansson.a,
#                    libopenblas.a.gz (only the members libmk needs, debug
#                    info stripped), libcmocka.so.0 (no static cmocka)
#         prebuilt.tar.xz  test_cuda and the mk programs linked here with
#                    everything static but glibc, cmocka and the CUDA driver
#                    (cudart_static): the fallback if the build there fails
#         MANIFEST   what was packed, from which sources, sizes
#
#   scripts/gpu-check.sh [DIR]
#       THERE, from the repository root, DIR (default build-gpu-carry/)
#       carried along: builds mk with that machine's nvcc against the carried
#       libraries (BUILD=build-gpucheck; falls back to the carried prebuilt
#       binaries if the build fails, and says so), checks the kernel's PTX
#       for fused multiply-adds, runs test/unit/test_cuda (GPU against CPU,
#       bit for bit, every method with a kernel; the timings: device copy
#       rate, linear kernel rate and its ratio, ties and dare_ties rates),
#       mk-merge --cuda against the CPU end to end on generated models, and
#       the forward pass's --cuda (mk-forward-bench --cuda --compare: the
#       hidden states of a generated llama-like model, the layers' matrix
#       products on the GPU, against OpenBLAS's; max abs difference and
#       both times) and test_forward (the hidden states against
#       transformers', on the device too), mk-extract-lora's randomized
#       SVD on the GPU (test_lowrank, a timing, an end-to-end run), then
#       prints a summary.  Each step
#       has a timeout; all of it finishes in under 5 minutes.  Exit 0: all passed; 1: a failure; 77: no GPU
#       (the emulated half of test_cuda still ran).
#
# With the device tool: run --pack here, then
#   run(command="sh scripts/gpu-check.sh", carry=["build-gpu-carry"], timeout_s=330)
# (the build and test logs come back under $OUT).
set -u
LC_ALL=C
export LC_ALL
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top" || exit 1

# ------------------------------------------------------------------- pack

pack() {
	dir=${1:-build-gpu-carry}
	case $dir in /*) ;; *) dir=$top/$dir ;; esac
	cc=${CC:-cc}
	pb=$top/build-gpu-packbuild
	tmp=$(mktemp -d "${TMPDIR:-/tmp}/mk-gpupack.XXXXXX") || exit 1
	trap 'rm -rf "$tmp"' EXIT
	rm -rf "$dir"
	mkdir -p "$dir/include/liburing" "$dir/lib" || exit 1

	lib() { # the file of a library the C compiler links
		f=$($cc -print-file-name="$1")
		[ -f "$f" ] || { echo "gpu-check --pack: $1 not found (make deps)" >&2; exit 1; }
		readlink -f "$f"
	}
	hdr() { # copy a header found by the C compiler's search path
		f=$(echo "#include <$1>" | $cc -E -M - 2>/dev/null | tr ' \\' '\n\n' | grep "/$1\$" | head -n 1)
		[ -n "$f" ] && [ -f "$f" ] || { echo "gpu-check --pack: header $1 not found (make deps)" >&2; exit 1; }
		mkdir -p "$dir/include/$(dirname "$1")"
		cp -L "$f" "$dir/include/$1"
	}
	for h in yaml.h zstd.h zstd_errors.h zdict.h liburing.h liburing/compat.h liburing/io_uring.h \
		liburing/barrier.h jansson.h jansson_config.h cblas.h openblas_config.h; do
		hdr $h
	done
	# cmocka.h needs the standard headers before it: copy it by path
	for d in /usr/include /usr/local/include; do
		[ -f $d/cmocka.h ] && cp -L $d/cmocka.h "$dir/include/" && break
	done
	[ -f "$dir/include/cmocka.h" ] || { echo "gpu-check --pack: cmocka.h not found" >&2; exit 1; }
	for l in yaml zstd uring jansson; do
		cp "$(lib lib$l.a)" "$dir/lib/lib$l.a" || exit 1
	done
	cp "$(lib libcmocka.so.0)" "$dir/lib/libcmocka.so.0" || exit 1

	# the library first (plain build), to know which BLAS symbols it needs
	echo "gpu-check --pack: building libmk (BUILD=$(basename "$pb"))"
	make -s -j2 BUILD="$(basename "$pb")" "$(basename "$pb")/libmk.a" >"$tmp/make1.log" 2>&1 ||
		{ tail -n 30 "$tmp/make1.log"; echo "gpu-check --pack: build failed" >&2; exit 1; }
	blas=$(lib libopenblas.a)
	nm -u "$pb/libmk.a" 2>/dev/null | awk '{print $2}' | sort -u >"$tmp/undef"
	nm --defined-only "$blas" 2>/dev/null | awk 'NF == 3 && $2 ~ /[TDBR]/ {print $3}' | sort -u >"$tmp/blasdef"
	syms=$(comm -12 "$tmp/undef" "$tmp/blasdef")
	[ -n "$syms" ] || { echo "gpu-check --pack: libmk needs no BLAS symbol?" >&2; exit 1; }
	ld -r -o "$tmp/blas.o" $(for s in $syms; do printf -- '-u %s ' "$s"; done) "$blas" &&
		strip --strip-debug "$tmp/blas.o" && rm -f "$tmp/libopenblas.a" &&
		ar rcs "$tmp/libopenblas.a" "$tmp/blas.o" ||
		{ echo "gpu-check --pack: cannot cut OpenBLAS" >&2; exit 1; }
	gzip -9 -c "$tmp/libopenblas.a" >"$dir/lib/libopenblas.a.gz"

	# the fallback binaries: linked against the carried libraries, statically
	# but for glibc, cmocka (LD_LIBRARY_PATH) and the CUDA driver
	mkdir -p "$tmp/lib" && cp "$dir/lib/"*.a "$tmp/libopenblas.a" "$tmp/lib/"
	cp "$dir/lib/libcmocka.so.0" "$tmp/lib/libcmocka.so"
	nvcc=$(command -v nvcc || true)
	cuda_home=${nvcc%/bin/nvcc}
	libs="$tmp/lib/libyaml.a $tmp/lib/libzstd.a $tmp/lib/liburing.a $tmp/lib/libjansson.a $tmp/lib/libopenblas.a"
	if [ -n "$nvcc" ]; then
		libs="$libs -L$cuda_home/lib64 -lcudart_static -lrt -Wl,-Bstatic -lstdc++ -Wl,-Bdynamic"
	fi
	libs="$libs -lpthread -ldl -lm -static-libgcc"
	pbb=$(basename "$pb")-static
	echo "gpu-check --pack: linking the fallback binaries (BUILD=$pbb)"
	progs="bin/mk-plan bin/mk-fetch bin/mk-merge bin/mk-pack bin/mk-cat tools/mk-gen-model tools/mk-st-compare tools/mk-forward-bench test/test_cuda"
	make -s -j2 BUILD="$pbb" PKG_CFLAGS="-I$dir/include" PKG_LIBS="" LIBS="$libs" LDFLAGS="-L$tmp/lib" \
		$(for p in $progs; do printf '%s/%s ' "$pbb" "$p"; done) >"$tmp/make2.log" 2>&1 ||
		{ tail -n 30 "$tmp/make2.log"; echo "gpu-check --pack: static build failed" >&2; exit 1; }
	mkdir -p "$tmp/pre/bin"
	for p in $progs; do
		cp "$pbb/$p" "$tmp/pre/bin/" && strip --strip-debug "$tmp/pre/bin/$(basename "$p")"
	done
	(cd "$tmp/pre" && tar cf - bin) | xz -9 -T2 >"$dir/prebuilt.tar.xz" ||
		{ echo "gpu-check --pack: xz failed" >&2; exit 1; }
	rm -rf "$pb" "$pbb"

	{
		echo "packed $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(uname -srm), $(ldd --version 2>/dev/null | head -n 1)"
		echo "sources: $(git rev-parse --short HEAD 2>/dev/null) + working tree diff sha1" \
			"$(git diff HEAD 2>/dev/null | sha1sum | cut -c1-12)"
		echo "nvcc: $([ -n "$nvcc" ] && "$nvcc" --version | tail -n 2 | head -n 1 || echo none: the prebuilt binaries have no CUDA)"
		echo "BLAS symbols kept: $(echo $syms)"
		echo "prebuilt (glibc >= $(ldd --version 2>/dev/null | head -n 1 | awk '{print $NF}') needed): $progs"
		echo "files:"
		(cd "$dir" && find . -type f ! -name MANIFEST | sort | while read -r f; do
			printf '  %10d  %s\n' "$(wc -c <"$f")" "${f#./}"
		done)
	} >"$dir/MANIFEST"
	cat "$dir/MANIFEST"
	echo "gpu-check --pack: $(du -sh "$dir" | cut -f1) in $dir; carry it: run(command=\"sh scripts/gpu-check.sh\", carry=[\"${dir#$top/}\"])"
}

# ------------------------------------------------------------------- check

T0=$(date +%s)
elapsed() { echo $(($(date +%s) - T0)); }
SUMMARY=""
note() { # a line for the summary, echoed now too
	echo "gpu-check: $*"
	SUMMARY="$SUMMARY
  $*"
}
# left SECONDS: what remains of the 290-second budget, at most SECONDS
left() {
	l=$((290 - $(elapsed)))
	[ "$l" -gt "$1" ] && l=$1
	[ "$l" -lt 5 ] && l=5
	echo "$l"
}

check() {
	carry=${1:-build-gpu-carry}
	case $carry in /*) ;; *) carry=$top/$carry ;; esac
	work=$(mktemp -d "${TMPDIR:-/tmp}/mk-gpucheck.XXXXXX") || exit 1
	trap 'rm -rf "$work"' EXIT
	fails=0
	src=$(git rev-parse --short HEAD 2>/dev/null || echo "no git")
	echo "gpu-check: $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(uname -srm), $(nproc) CPUs; sources: $src"
	[ -f "$carry/MANIFEST" ] && echo "gpu-check: carried: $(sed -n '1,2p' "$carry/MANIFEST" | tr '\n' ' ')"

	# the machine
	for d in /usr/local/cuda/bin /usr/local/cuda-*/bin /opt/cuda/bin; do
		[ -x "$d/nvcc" ] && ! command -v nvcc >/dev/null 2>&1 && PATH=$d:$PATH
	done
	export PATH
	gpu=none
	cap=""
	if command -v nvidia-smi >/dev/null 2>&1; then
		gpu=$(timeout 20 nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | head -n 1)
		cap=$(timeout 20 nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -n 1 | tr -d ' .')
	fi
	nvcc=$(command -v nvcc || true)
	note "GPU: ${gpu:-none (nvidia-smi found nothing)}; nvcc: ${nvcc:-none}$([ -n "$nvcc" ] && echo " ($("$nvcc" --version | grep -o 'release [0-9.]*'))")"
	cc=${CC:-}
	[ -z "$cc" ] && for c in cc gcc clang; do command -v $c >/dev/null 2>&1 && { cc=$c; break; }; done

	# the libraries: carried ones first
	lib=$work/lib
	mkdir -p "$lib"
	have_carry=0
	if [ -d "$carry/lib" ] && [ -f "$carry/lib/libopenblas.a.gz" ]; then
		cp "$carry/lib/"*.a "$lib/" 2>/dev/null
		gzip -dc "$carry/lib/libopenblas.a.gz" >"$lib/libopenblas.a"
		cp "$carry/lib/libcmocka.so.0" "$lib/libcmocka.so.0"
		cp "$carry/lib/libcmocka.so.0" "$lib/libcmocka.so"
		have_carry=1
	else
		note "no carried libraries in $carry (run scripts/gpu-check.sh --pack there first): trying the system's"
	fi
	LD_LIBRARY_PATH=$lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
	export LD_LIBRARY_PATH

	# build
	B=build-gpucheck
	bin="" test=""
	nvflags=""
	[ -n "$cap" ] && nvflags="-O2 -std=c++17 -gencode arch=compute_$cap,code=sm_$cap"
	if [ -z "$cc" ] || ! command -v make >/dev/null 2>&1; then
		note "build: skipped (no C compiler or no make)"
	else
		set -- BUILD=$B CC=$cc
		[ -n "$nvflags" ] && set -- "$@" NVCCFLAGS="$nvflags"
		[ "$have_carry" = 1 ] && set -- "$@" PKG_CFLAGS="-I$carry/include" PKG_LIBS="-L$lib -lyaml -lzstd -luring -ljansson" \
			LDFLAGS="-L$lib"
		# the Makefile does not track the headers of .cu files: always
		# compile device.cu again
		rm -f $B/src/cuda/device.o
		t=$(date +%s)
		if timeout "$(left 170)" make -j"$(nproc)" "$@" all $B/test/test_cuda $B/test/test_forward $B/test/test_lowrank >"$work/build.log" 2>&1; then
			bin=$top/$B/bin test=$top/$B/test/test_cuda
			note "build: ok in $(($(date +%s) - t)) s ($([ -n "$nvcc" ] && echo "with CUDA, ${nvflags:-the Makefile's NVCCFLAGS}" || echo "WITHOUT CUDA: no nvcc"); $([ "$have_carry" = 1 ] && echo "carried libraries" || echo "system libraries"))"
			grep -q "NVCC" "$work/build.log" || [ -z "$nvcc" ] || [ -f $B/src/cuda/device.o ] ||
				note "build: warning: device.cu was not compiled"
		else
			note "build: FAILED (rc $?); last lines:"
			tail -n 15 "$work/build.log" | sed 's/^/      | /'
			SUMMARY="$SUMMARY
$(tail -n 8 "$work/build.log" | sed 's/^/      | /')"
			# the machine's own libraries, if it has them
			if [ "$have_carry" = 1 ] && [ "$(left 200)" -gt 120 ] &&
				pkg-config --exists yaml-0.1 libzstd liburing jansson 2>/dev/null; then
				set -- BUILD=$B-sys CC=$cc
				[ -n "$nvflags" ] && set -- "$@" NVCCFLAGS="$nvflags"
				if timeout "$(left 120)" make -j"$(nproc)" "$@" all $B-sys/test/test_cuda \
					>"$work/build-sys.log" 2>&1; then
					bin=$top/$B-sys/bin test=$top/$B-sys/test/test_cuda
					note "build with the system's libraries: ok"
				else
					note "build with the system's libraries: FAILED too"
				fi
			fi
		fi
	fi
	if [ -z "$test" ] && [ -f "$carry/prebuilt.tar.xz" ]; then
		mkdir -p "$work/pre"
		if command -v xz >/dev/null 2>&1; then
			xz -dc "$carry/prebuilt.tar.xz" | (cd "$work/pre" && tar xf -)
		elif command -v python3 >/dev/null 2>&1; then
			python3 -c 'import lzma,sys; sys.stdout.buffer.write(lzma.open(sys.argv[1]).read())' \
				"$carry/prebuilt.tar.xz" | (cd "$work/pre" && tar xf -)
		fi
		if [ -x "$work/pre/bin/test_cuda" ]; then
			bin=$work/pre/bin test=$work/pre/bin/test_cuda
			note "using the PREBUILT binaries carried from the packing machine ($(sed -n 3p "$carry/MANIFEST" 2>/dev/null))"
		else
			note "prebuilt binaries: could not unpack (no xz, no python3?)"
		fi
	fi
	if [ -z "$test" ]; then
		note "RESULT: nothing to run"
		echo "gpu-check: summary after $(elapsed) s:$SUMMARY"
		exit 1
	fi

	# the kernel's arithmetic: every float32 add/sub/mul/div explicitly
	# rounded (.rn: never contracted by ptxas), no fma
	if [ -n "$nvcc" ]; then
		if timeout "$(left 60)" "$nvcc" -std=c++17 -O2 -arch=sm_${cap:-90} -Iinclude -DMK_HAVE_CUDA -ptx \
			-o "$work/device.ptx" src/cuda/device.cu >"$work/ptx.log" 2>&1; then
			awk '/\.entry/ { k = ($0 ~ /mkcu_kernel/) } k' "$work/device.ptx" >"$work/kernel.ptx"
			nfma=$(grep -c 'fma\.' "$work/kernel.ptx")
			nplain=$(grep -Ec '(add|sub|mul|div)\.f32' "$work/kernel.ptx")
			nrn=$(grep -Ec '(add|sub|mul|div)\.rn\.f32' "$work/kernel.ptx")
			if [ "$nfma" = 0 ] && [ "$nplain" = 0 ] && [ "$nrn" -gt 0 ]; then
				note "PTX: mkcu_kernel has $nrn explicitly rounded float ops, no fma, no contractible op: ok"
			else
				note "PTX: mkcu_kernel has $nfma fma and $nplain contractible float ops: FAILED"
				fails=$((fails + 1))
			fi
			# the forward pass's product: fma.rn only (the emulation's fmaf)
			awk '/\.entry/ { k = ($0 ~ /gemm_nt_kernel/) } k' "$work/device.ptx" >"$work/gemm.ptx"
			gfma=$(grep -c 'fma\.rn\.f32' "$work/gemm.ptx")
			gall=$(grep -c 'fma\.' "$work/gemm.ptx")
			gops=$(grep -Ec '(add|sub|mul|div)(\.r[nzmp])?\.f32' "$work/gemm.ptx")
			if [ "$gfma" -gt 0 ] && [ "$gfma" = "$gall" ] && [ "$gops" = 0 ]; then
				note "PTX: gemm_nt_kernel has $gfma fma.rn.f32 and no other float op: ok"
			else
				note "PTX: gemm_nt_kernel has $gfma fma.rn.f32 of $gall fma, $gops other float ops: FAILED"
				fails=$((fails + 1))
			fi
		else
			note "PTX check: nvcc -ptx failed"
		fi
	fi

	# the differential test and the timings
	t=$(date +%s)
	timeout "$(left 150)" "$test" >"$work/test.log" 2>&1
	rc=$?
	grep -Ev '^\[ *(RUN|OK|=+|PASSED) *\]' "$work/test.log" | sed 's/^/    /' | tail -n 30
	grep -E '^(test_cuda (emulated|device)|timing|device:|rate |test_cuda: part 2 .* skipped|mk_cuda_linear)' \
		"$work/test.log" >"$work/sum.txt"
	while IFS= read -r x; do SUMMARY="$SUMMARY
  $x"; done <"$work/sum.txt"
	case $rc in
	0) note "test_cuda: PASSED in $(($(date +%s) - t)) s (GPU = CPU bit for bit)" ;;
	77) note "test_cuda: emulated part passed, device part SKIPPED (no usable device)" ;;
	124 | 137) note "test_cuda: TIMED OUT"; fails=$((fails + 1)) ;;
	*) note "test_cuda: FAILED (rc $rc)"; fails=$((fails + 1))
	   grep -E "ERROR|FAIL|error:" "$work/test.log" | head -n 8 | while IFS= read -r x; do echo "      | $x"; done ;;
	esac
	dev_rc=$rc

	# the forward pass's cases against transformers' hidden states: on the
	# CPU, through the emulated GPU, and on the device (a build here only:
	# the prebuilt binaries have no test_forward)
	tf=$(dirname "$test")/test_forward
	if [ -x "$tf" ] && [ "$(left 60)" -gt 30 ]; then
		t=$(date +%s)
		MK_TOP=$top timeout "$(left 60)" "$tf" >"$work/test_forward.log" 2>&1
		rc=$?
		grep -E '^(worst over|emulated cuda: worst|cuda device: (worst|none))' "$work/test_forward.log" |
			while IFS= read -r x; do echo "    $x"; done
		case $rc in
		0) note "test_forward: PASSED in $(($(date +%s) - t)) s: $(grep -E '^(cuda device: (worst|none))' "$work/test_forward.log" | head -n 1)" ;;
		124 | 137) note "test_forward: TIMED OUT"; fails=$((fails + 1)) ;;
		*) note "test_forward: FAILED (rc $rc)"; fails=$((fails + 1))
		   grep -E "ERROR|FAIL|error:" "$work/test_forward.log" | head -n 8 | while IFS= read -r x; do echo "      | $x"; done ;;
		esac
	elif [ ! -x "$tf" ]; then
		note "test_forward: not built (prebuilt binaries?): skipped"
	fi

	# mk-merge --cuda against the CPU, end to end
	# (MK_GPUCHECK_E2E=1: also without a device, to try this script)
	if { [ "$dev_rc" = 0 ] || [ "${MK_GPUCHECK_E2E:-0}" = 1 ]; } && [ -x "$bin/mk-merge" ]; then
		e2e "$bin"
	elif [ "$dev_rc" = 0 ]; then
		note "end to end: skipped (no mk-merge)"
	fi
	# the forward pass's --cuda against its CPU path (MK_GPUCHECK_E2E=1
	# without a device: the emulated device, on a small model)
	if [ "$dev_rc" = 0 ] || [ "${MK_GPUCHECK_E2E:-0}" = 1 ]; then
		fwd "$bin"
	fi
	# mk-extract-lora's randomized SVD on the GPU against the CPU's
	if [ "$dev_rc" = 0 ] || [ "${MK_GPUCHECK_E2E:-0}" = 1 ]; then
		lowrank "$bin"
	fi

	# the logs come back with the device tool ($OUT)
	if [ -n "${OUT:-}" ] && [ -d "$OUT" ]; then
		cp "$work"/*.log "$OUT/" 2>/dev/null
		echo "gpu-check: logs in \$OUT: $(cd "$work" && ls *.log | tr '\n' ' ')"
	fi
	echo
	echo "gpu-check: summary after $(elapsed) s:$SUMMARY"
	if [ "$fails" -gt 0 ]; then
		echo "gpu-check: FAILED ($fails)"
		exit 1
	fi
	[ "$dev_rc" = 77 ] && { echo "gpu-check: no device: only the emulated half ran"; exit 77; }
	echo "gpu-check: PASSED"
	exit 0
}

e2e() {
	b=$1
	tools=$(dirname "$b")/tools
	[ -x "$tools/mk-gen-model" ] || tools=$b
	if ! "$b/mk-merge" --help 2>&1 | grep -q -- '--cuda'; then
		note "end to end: mk-merge has no --cuda: skipped"
		return
	fi
	d=$work/e2e
	mkdir -p "$d" && cd "$d" || return
	for s in 1 2 3; do
		timeout "$(left 60)" "$tools/mk-gen-model" --seed $s --dtype F32 --hidden 768 --inter 2048 --layers 2 \
			--vocab 4096 m$s >/dev/null 2>&1 || { note "end to end: mk-gen-model failed"; cd "$top"; return; }
	done
	note "end to end: 3 generated models of $(du -sm m1 | cut -f1) MB (F32)"
	cat >linear.yml <<'EOF'
merge_method: linear
models:
  - model: m1
    parameters: {weight: 1.0}
  - model: m2
    parameters: {weight: 0.5}
  - model: m3
    parameters: {weight: 0.25}
EOF
	for m in ties dare_ties della_linear task_arithmetic; do
		extra=""
		case $m in della*) extra=", epsilon: 0.1" ;; esac
		cat >$m.yml <<EOF
merge_method: $m
base_model: m1
models:
  - model: m2
    parameters: {weight: 0.6, density: 0.5$extra}
  - model: m3
    parameters: {weight: 0.4, density: 0.3$extra}
parameters: {lambda: 0.9}
EOF
	done
	for c in linear ties dare_ties della_linear task_arithmetic; do
		[ "$(left 60)" -gt 20 ] || { note "end to end: $c and after: skipped (time)"; break; }
		if ! timeout "$(left 60)" sh -c "'$b/mk-plan' $c.yml | '$b/mk-fetch' > $c.mks" 2>"$c.plan.err"; then
			note "end to end $c: mk-plan | mk-fetch failed: $(tail -n 1 "$c.plan.err")"
			fails=$((fails + 1))
			continue
		fi
		t0=$(date +%s%N)
		timeout "$(left 60)" "$b/mk-merge" -i $c.mks -o cpu.out 2>cpu.err
		r1=$?
		t1=$(date +%s%N)
		timeout "$(left 60)" "$b/mk-merge" --cuda -i $c.mks -o gpu.out 2>gpu.err
		r2=$?
		t2=$(date +%s%N)
		msg=$(grep -iv '^$' gpu.err | head -n 1)
		if [ $r1 != 0 ] || [ $r2 != 0 ]; then
			note "end to end $c: mk-merge failed (cpu rc $r1, --cuda rc $r2): $(tail -n 1 gpu.err)"
			fails=$((fails + 1))
		elif cmp -s cpu.out gpu.out; then
			note "end to end $c: --cuda output = CPU output byte for byte ($(($(wc -c <cpu.out) >> 20)) MiB); cpu $(((t1 - t0) / 1000000)) ms, --cuda $(((t2 - t1) / 1000000)) ms${msg:+; stderr: $msg}"
		else
			note "end to end $c: --cuda output DIFFERS from the CPU's${msg:+ (stderr: $msg)}"
			fails=$((fails + 1))
		fi
		rm -f cpu.out gpu.out $c.mks
	done
	cd "$top" || return
}

# fwd BIN: mk-forward-bench --cuda --compare on a generated model: every
# hidden state within 2e-4 of max |h| of the CPU's (the products are summed
# in another order than OpenBLAS's, each within in * 2^-24 sum |x w| of the
# exact one (test_cuda checks it), grown through the layers: 3.5e-5 was
# measured through the emulation on this model, 2 x 8 tokens); prints the
# max abs difference and both times.  On a device, a small model's hidden
# states too, on the device and emulated: the same bits (their last-token
# norms printed to 9 digits).
fwd() {
	b=$1
	tools=$(dirname "$b")/tools
	[ -x "$tools/mk-forward-bench" ] || tools=$b
	if [ ! -x "$tools/mk-forward-bench" ] || [ ! -x "$tools/mk-gen-model" ]; then
		note "forward --cuda: skipped (no mk-forward-bench)"
		return
	fi
	if [ "$(left 120)" -lt 40 ]; then
		note "forward --cuda: skipped (time)"
		return
	fi
	d=$work/fwd
	mkdir -p "$d"
	if [ "$dev_rc" = 0 ]; then
		emu=0 model="--hidden 2048 --heads 32 --kv-heads 8 --inter 5632 --vocab 2048 --layers 4"
		shapes="4x32 16x128" desc="llama, 4 layers, hidden 2048, MLP 5632"
	else
		emu=1 model="--hidden 128 --heads 4 --kv-heads 2 --inter 256 --vocab 256 --layers 2"
		shapes="4x32" desc="llama, 2 layers, hidden 128 (EMULATED: no device)"
	fi
	# shellcheck disable=SC2086 # the options split on spaces
	if ! timeout "$(left 60)" "$tools/mk-gen-model" --arch llama --dtype BF16 $model --weight-scale 8 --unit-norms \
		"$d/m" >"$work/forward-gen.log" 2>&1; then
		note "forward --cuda: mk-gen-model failed: $(tail -n 1 "$work/forward-gen.log")"
		fails=$((fails + 1))
		return
	fi
	for bt in $shapes; do
		[ "$(left 120)" -gt 25 ] || { note "forward --cuda $bt and after: skipped (time)"; break; }
		log=$work/forward-$bt.log
		MK_CUDA_EMULATE=$emu timeout "$(left 120)" "$tools/mk-forward-bench" --cuda --compare --tolerance 2e-4 \
			"$d/m" "${bt%x*}" "${bt#*x}" >"$log" 2>&1
		rc=$?
		what="forward --cuda, $desc, $bt tokens"
		res=$(sed -n 's/^cuda vs cpu: max abs diff/max abs diff/p' "$log" | head -n 1)
		case $rc in
		0) note "$what: $res" ;;
		124 | 137) note "$what: TIMED OUT"; fails=$((fails + 1)) ;;
		*) note "$what: FAILED (rc $rc): ${res:-$(tail -n 1 "$log")}"; fails=$((fails + 1)) ;;
		esac
	done
	if [ "$emu" = 0 ] && [ "$(left 60)" -gt 20 ]; then
		if timeout "$(left 30)" "$tools/mk-gen-model" --arch qwen2 --dtype F32 --hidden 128 --heads 4 --kv-heads 2 \
			--inter 320 --vocab 256 --layers 3 --weight-scale 8 --unit-norms "$d/s" >/dev/null 2>&1 &&
			timeout "$(left 30)" "$tools/mk-forward-bench" --cuda "$d/s" 5 33 >"$work/forward-small-dev.log" 2>&1 &&
			MK_CUDA_EMULATE=1 timeout "$(left 30)" "$tools/mk-forward-bench" --cuda "$d/s" 5 33 \
				>"$work/forward-small-emu.log" 2>&1; then
			grep '^hidden' "$work/forward-small-dev.log" >"$d/dev.h"
			grep '^hidden' "$work/forward-small-emu.log" >"$d/emu.h"
			if [ -s "$d/dev.h" ] && cmp -s "$d/dev.h" "$d/emu.h"; then
				note "forward --cuda, qwen2 3 layers of 128, 5 x 33 tokens: device = emulation ($(wc -l <"$d/dev.h") states' norms to 9 digits)"
			else
				note "forward --cuda, qwen2 3 layers of 128: device and emulation DIFFER: $(paste -d '|' "$d/dev.h" "$d/emu.h" | head -n 2 | tr '\n' ' ')"
				fails=$((fails + 1))
			fi
		else
			note "forward --cuda, small model: FAILED: $(tail -n 1 "$work/forward-small-dev.log" 2>/dev/null)"
			fails=$((fails + 1))
		fi
	fi
	rm -rf "$d"
}

# lowrank BIN: test_lowrank (its test_cuda: the GPU's exact and
# randomized factors against the CPU's, B A within 1e-4 and 1e-3, the
# errors within 1e-4; without a device the MK_EUNSUPPORTED answer), then
# the randomized SVD at rank 128 of a planted 4096 x 14336 delta timed on
# the CPU and on the GPU (mk-lowrank-bench -g), and mk-extract-lora
# --cuda, randomized and exact, end to end against the CPU's runs.
lowrank() {
	b=$1
	root=$(dirname "$b")
	if [ ! -x "$root/test/test_lowrank" ] || [ "$(left 100)" -lt 30 ]; then
		note "lowrank: skipped ($([ -x "$root/test/test_lowrank" ] && echo time || echo "no test_lowrank"))"
		return
	fi
	t=$(date +%s)
	MK_TOP=$top timeout "$(left 60)" "$root/test/test_lowrank" >"$work/test_lowrank.log" 2>&1
	rc=$?
	case $rc in
	0) note "test_lowrank: PASSED in $(($(date +%s) - t)) s: $(grep -E 'GPU|no GPU' "$work/test_lowrank.log" | head -n 1)" ;;
	124 | 137) note "test_lowrank: TIMED OUT"; fails=$((fails + 1)) ;;
	*) note "test_lowrank: FAILED (rc $rc)"; fails=$((fails + 1))
	   grep -E "ERROR|FAIL|error:" "$work/test_lowrank.log" | head -n 6 | while IFS= read -r x; do echo "      | $x"; done ;;
	esac
	if [ "$dev_rc" = 0 ] && [ -x "$root/tools/mk-lowrank-bench" ] && [ "$(left 100)" -gt 40 ]; then
		timeout "$(left 60)" "$root/tools/mk-lowrank-bench" -m 4096 -n 14336 -r 128 -o 16 -q 2 -x -g \
			>"$work/lowrank-bench.log" 2>&1 &&
			note "lowrank 4096 x 14336, rank 128: $(grep -iE 'gpu|cpu' "$work/lowrank-bench.log" | tr '\n' ';' | cut -c1-300)" ||
			{ note "lowrank bench: FAILED: $(tail -n 1 "$work/lowrank-bench.log")"; fails=$((fails + 1)); }
	fi
	if [ -x "$b/mk-extract-lora" ] && [ "$(left 60)" -gt 20 ]; then
		d=$work/xl
		mkdir -p "$d"
		for s in 1 2; do
			"$root/tools/mk-gen-model" --dtype F32 --layers 1 --hidden 512 --inter 1024 --vocab 64 --seed $s "$d/m$s" >/dev/null
		done
		for mode in "--randomized" ""; do
			# shellcheck disable=SC2086 # mode is one word or none
			if timeout "$(left 30)" "$b/mk-extract-lora" -q --model "$d/m2" --base-model "$d/m1" --out-path "$d/cpu$mode" \
				$mode --max-rank 32 >"$work/extract-cpu.log" 2>&1 &&
				timeout "$(left 30)" "$b/mk-extract-lora" --model "$d/m2" --base-model "$d/m1" --out-path "$d/gpu$mode" \
				$mode --max-rank 32 --cuda >"$work/extract-gpu$mode.log" 2>&1; then
				e1=$(grep -o '"relative_error": [0-9.e-]*' "$d/cpu$mode/extraction_report.json" | head -n 1)
				e2=$(grep -o '"relative_error": [0-9.e-]*' "$d/gpu$mode/extraction_report.json" | head -n 1)
				note "mk-extract-lora ${mode:-exact} --cuda: first module CPU $e1, GPU $e2 ($(grep -c warning "$work/extract-gpu$mode.log") warnings)"
			else
				note "mk-extract-lora ${mode:-exact} --cuda: FAILED: $(tail -n 1 "$work/extract-gpu$mode.log" 2>/dev/null)"
				fails=$((fails + 1))
			fi
		done
		rm -rf "$d"
	fi
}

case ${1:-} in
--pack) shift; pack "$@" ;;
-h | --help) sed -n '2,37p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
*) check "$@" ;;
esac
