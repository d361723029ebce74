# The Python package (src/python/mk) through Debian's python3 and pytest
# (`make deps` installs python3-pytest): test/python/test_mk.py, run in the
# repository's root against this build's libmk.so.  The sanitized build
# has no libmk.so: skipped there.
. "$MK_TOP/test/cli/lib.inc"
[ "$MK_SAN" = 1 ] && exit 77
[ -f "$MK_BUILD/libmk.so.0" ] || fail "no $MK_BUILD/libmk.so.0"
/usr/bin/python3 -c 'import pytest' 2>/dev/null || fail "python3-pytest is missing (make deps installs it)"
W=$PWD
cd "$MK_TOP"
PYTHONPATH=$MK_TOP/src/python PYTHONDONTWRITEBYTECODE=1 MK_LIB=$MK_BUILD/libmk.so.0 MK_BIN=$MK_BIN \
	/usr/bin/python3 -m pytest -q -p no:cacheprovider --basetemp="$W/pytest" test/python > "$W/pytest.log" 2>&1 ||
	{ cat "$W/pytest.log"; fail "pytest failed"; }
tail -n 1 "$W/pytest.log"
