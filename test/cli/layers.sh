# The layering rule of src/README holds: every #include under src/ names
# a folder of a lower layer, its own folder, or a public header of one
# (scripts/check-layers.sh).  A checker that passes everything would be
# worthless, so it is first run on a copy of src/ with an include against
# the rule added, and must refuse it.
. "$MK_TOP/test/cli/lib.inc"
# it reads sources only: once is enough, in the plain build's run
[ "$MK_SAN" = 1 ] && exit 77
sh "$MK_TOP/scripts/check-layers.sh" "$MK_TOP" || fail "an include breaks the layering of src/README (above)"

mkdir -p bad/scripts
cp -R "$MK_TOP/src" bad/src
cp "$MK_TOP/scripts/check-layers.sh" bad/scripts/
printf '#include "run/procs.h"\n' >> bad/src/core/budget.c
printf '#include "../stream/job.h"\n' >> bad/src/io/reader.c
printf '#include "mk/tensors.h"\n' >> bad/src/stream/stream.c
set +e
sh bad/scripts/check-layers.sh "$PWD/bad" > bad.txt 2>&1
rc=$?
set -e
[ $rc = 1 ] || { cat bad.txt; fail "check-layers.sh exited $rc on includes against the rule"; }
grep -q 'src/core/budget.c:[0-9]*: src/core (layer 0) includes "run/procs.h"' bad.txt || { cat bad.txt; fail "core -> run not refused"; }
grep -q 'src/io/reader.c:[0-9]*: "../stream/job.h" climbs out' bad.txt || { cat bad.txt; fail "a ../ include not refused"; }
grep -q 'src/stream/stream.c:[0-9]*: .*"mk/tensors.h" of tensors' bad.txt || { cat bad.txt; fail "a public header of a higher layer not refused"; }
[ "$(wc -l < bad.txt)" = 3 ] || { cat bad.txt; fail "more refused than the three includes added"; }
echo "layers: src/ follows src/README; the three includes added against it were refused"

# no two files under src/ share a basename (a name says which file)
dup=$(cd "$MK_TOP" && find src -type f \( -name '*.c' -o -name '*.h' -o -name '*.cu' -o -name '*.cc' \) | xargs -n1 basename | sort | uniq -d)
[ -z "$dup" ] || fail "basenames used twice under src/: $dup"
