# libmk's public API is what include/mk declares, and nothing else:
#  - at most 15 installed headers, each including only installed ones;
#  - libmk.so exports exactly the names declared MK_API there (both ways:
#    an export nobody declared is an internal leaking out, a declaration
#    with no export is a call a program cannot link);
#  - every exported call is named in a section-3 man page.
. "$MK_TOP/test/cli/lib.inc"
# the sanitized build has no libmk.so
[ "$MK_SAN" = 1 ] && exit 77
command -v nm >/dev/null 2>&1 || exit 77
command -v perl >/dev/null 2>&1 || exit 77
so=$MK_BUILD/libmk.so
[ -e "$so" ] || fail "$so missing (run make first)"
inc=$MK_TOP/include/mk

n=$(ls "$inc"/*.h | wc -l)
[ "$n" -le 15 ] || fail "$n headers in include/mk (at most 15 are installed)"
bad=$(grep -H '^#[ 	]*include[ 	]*"' "$inc"/*.h | grep -v '"mk/[a-z_0-9]*\.h"' || true)
[ -z "$bad" ] || fail "an installed header includes a non-installed one: $bad"
for h in $(grep -ho '^#[ 	]*include[ 	]*"mk/[a-z_0-9]*\.h"' "$inc"/*.h | sed 's/.*"mk\///; s/"//' | sort -u); do
	[ -f "$inc/$h" ] || fail "an installed header includes mk/$h, which is not in include/mk"
done

# MK_API declarations: the name before the first '(' (a call) or before
# ';' / '[' (data) of each marked declaration
cat $(ls "$inc"/*.h | grep -v /api.h) | perl -0777 -pe 's{/\*.*?\*/}{ }gs' | tr '\n' ' ' | tr ';{}' '\n\n\n' |
	sed -n 's/.*\bMK_API\b[^(\[]*\b\(mk_[a-z0-9_]*\)[ 	]*[(\[].*/\1/p; s/.*\bMK_API\b.*\b\(mk_[a-z0-9_]*\)[ 	]*$/\1/p' |
	sort -u > declared.txt
# a call declared in an installed header without MK_API would be hidden:
# a program could not link it
unmarked=$(cat $(ls "$inc"/*.h | grep -v /api.h) | perl -0777 -pe 's{/\*.*?\*/}{ }gs; s{^#.*$}{}mg' |
	tr '\n' ' ' | tr ';{}' '\n\n\n' | grep -E '(^|[ *])mk_[a-z0-9_]+ *\(' |
	grep -v 'MK_API\|typedef\|static inline\|(\*' || true)
[ -z "$unmarked" ] || fail "declared in include/mk without MK_API (not exported): $unmarked"
nm -D --defined-only "$so" | awk '{ print $NF }' | sort -u > exported.txt
[ -s declared.txt ] || fail "no MK_API declaration found in $inc"
if ! cmp -s declared.txt exported.txt; then
	echo "exported, not declared MK_API:" >&2
	comm -13 declared.txt exported.txt >&2
	echo "declared MK_API, not exported:" >&2
	comm -23 declared.txt exported.txt >&2
	fail "libmk.so's exports differ from include/mk's MK_API declarations"
fi

# every public call has a section-3 page that names it
missing=""
for f in $(cat declared.txt); do
	grep -qw -- "$f" "$MK_TOP"/man/man3/*.3 || missing="$missing $f"
done
[ -z "$missing" ] || fail "public calls no section-3 man page names:$missing"
echo "api: $(wc -l < declared.txt) names exported, all declared in $n headers"
