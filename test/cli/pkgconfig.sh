# The library links as installed: `make install` to a prefix writes mk.pc
# for that prefix, and a C program built with pkg-config links against
# libmk.so (pkg-config --libs) and, fully static, against libmk.a
# (pkg-config --static --libs); both print the merge they computed.  The
# build-tree mk-uninstalled.pc links against the build.  DESTDIR stages
# an install for another prefix.
. "$MK_TOP/test/cli/lib.inc"
# The sanitized build is not installable: it has no libmk.so, its libmk.a
# needs the sanitizer runtimes (which mk.pc does not name), and installing
# it without SAN=... would recompile it with the plain flags.
[ "$MK_SAN" = 1 ] && exit 77
cc=${CC:-cc}
command -v "$cc" >/dev/null 2>&1 || exit 77
command -v pkg-config >/dev/null 2>&1 || exit 77
command -v readelf >/dev/null 2>&1 || exit 77
# a make of its own, not a part of the make that runs the tests
unset MAKEFLAGS MFLAGS MAKELEVEL
b=${MK_BUILD#"$MK_TOP"/}
make -s -C "$MK_TOP" -q BUILD="$b" all ||
	fail "$MK_BUILD is not up to date (run make first): the install would compile"

prefix=$PWD/prefix
make -s -C "$MK_TOP" BUILD="$b" PREFIX="$prefix" install > install.log 2>&1 || { cat install.log; fail "make install failed"; }
grep -q '  \(CC\|LD\|AR\|NVCC\) ' install.log && { cat install.log; fail "make install compiled"; }
pc=$prefix/lib/pkgconfig/mk.pc
grep -qx "prefix=$prefix" "$pc" || { cat "$pc"; fail "mk.pc is not for PREFIX=$prefix"; }
[ -f "$prefix/lib/libmk.a" ] || fail "libmk.a not installed"
[ -f "$prefix/include/mk/tensors.h" ] || fail "headers not installed"
# libmk.so -> libmk.so.N (the soname) -> the file
[ -L "$prefix/lib/libmk.so" ] || fail "libmk.so is not a link"
soname=$(readlink "$prefix/lib/libmk.so")
case $soname in libmk.so.[0-9]*) ;; *) fail "libmk.so points to '$soname', not libmk.so.N" ;; esac
file=$(readlink "$prefix/lib/$soname")
[ -f "$prefix/lib/$file" ] && [ ! -L "$prefix/lib/$file" ] || fail "$soname does not point to the library file"
readelf -d "$prefix/lib/$file" | grep -q "SONAME.*\[$soname\]" || fail "$file's soname is not $soname"
# not unloaded by dlclose: the merge's worker threads stay parked in it
readelf -d "$prefix/lib/$file" | grep -q "FLAGS_1.*NODELETE" || fail "$file can be unloaded under its worker threads (no -z nodelete)"

cat > app.c <<'EOF'
#include <stdio.h>
#include <mk/dtype.h>
#include <mk/tensors.h>

/* (3a + b) / 4 with method "linear", out in BF16 */
int main(void)
{
	float a[] = { 1, 2, -4, 0.1f }, b[] = { 5, -2, 8, 0.1f };
	struct mk_tensor in[2] = {
		{ .desc = { MK_DT_F32, 1, { 4 } }, .data = a },
		{ .desc = { MK_DT_F32, 1, { 4 } }, .data = b },
	};
	struct mk_tensor out = { 0 };
	struct mk_err err = { 0 };
	struct mk_param_values *pv = mk_param_values_new();
	if (!pv || mk_param_values_set(pv, "weight", 0, mk_pval_float(3), &err) < 0 ||
	    mk_param_values_set(pv, "weight", 1, mk_pval_float(1), &err) < 0 ||
	    mk_param_values_set(pv, "normalize", -1, mk_pval_bool(1), &err) < 0 ||
	    mk_merge_tensors("linear", in, 2, -1, pv, MK_DT_BF16, "t", 0, &out, &err) < 0) {
		fprintf(stderr, "app: %s\n", err.msg);
		return 1;
	}
	const unsigned short *r = out.data;
	printf("%s", mk_dtype_name(out.desc.dtype));
	for (int i = 0; i < 4; i++)
		printf(" %04x=%g", r[i], mk_bf16_to_f32(r[i]));
	printf("\n");
	mk_tensor_release(&out);
	mk_param_values_free(pv);
	return 0;
}
EOF
want="BF16 4000=2 3f80=1 bf80=-1 3dcd=0.100098"
check_app() { # program what
	got=$("./$1") || fail "$2: the program failed"
	[ "$got" = "$want" ] || fail "$2: printed '$got', expected '$want'"
}

export PKG_CONFIG_PATH="$prefix/lib/pkgconfig"
PKG_CONFIG_DISABLE_UNINSTALLED=1
export PKG_CONFIG_DISABLE_UNINSTALLED
# shared: the program needs libmk.so.N, found through the installed link
"$cc" -o app-shared app.c $(pkg-config --cflags --libs mk) -Wl,-rpath,"$prefix/lib" ||
	fail "the program does not link with pkg-config --libs mk"
readelf -d app-shared | grep -q "NEEDED.*\[$soname\]" || fail "app-shared does not load $soname"
check_app app-shared "pkg-config --libs mk"
# static: libmk.a and everything it needs, from mk.pc alone
"$cc" -static -o app-static app.c $(pkg-config --static --cflags --libs mk) ||
	fail "the program does not link with pkg-config --static --libs mk (Libs.private or Requires.private lack a library)"
readelf -d app-static | grep -q NEEDED && fail "app-static loads shared libraries"
check_app app-static "pkg-config --static --libs mk"

# uninstalled: the build tree's libmk.so
unset PKG_CONFIG_DISABLE_UNINSTALLED
PKG_CONFIG_PATH=$MK_BUILD
pkg-config --libs mk | grep -q -- "-L$MK_BUILD " || fail "mk-uninstalled.pc does not point to $MK_BUILD"
"$cc" -o app-tree app.c $(pkg-config --cflags --libs mk) -Wl,-rpath,"$MK_BUILD" ||
	fail "the program does not link with mk-uninstalled.pc"
check_app app-tree "mk-uninstalled.pc"

# DESTDIR stages the files; mk.pc is for PREFIX
far=/nonexistent/mk-test-$$
make -s -C "$MK_TOP" BUILD="$b" PREFIX="$far" DESTDIR="$PWD/stage" install > stage.log 2>&1 || { cat stage.log; fail "make install DESTDIR= failed"; }
grep -qx "prefix=$far" "stage$far/lib/pkgconfig/mk.pc" || fail "the staged mk.pc is not for PREFIX=$far"
[ -f "stage$far/lib/$file" ] && [ "$(readlink "stage$far/lib/$soname")" = "$file" ] || fail "the staged $soname does not point to $file"
[ ! -e "$far" ] || fail "make install DESTDIR= wrote to $far"
