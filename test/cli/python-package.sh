# The Python package installs with pip: into a venv (Debian's python3,
# --system-site-packages for numpy, no network, no build isolation) and as
# a wheel; installed, it reports libmk's version (mk.__version__, the
# distribution's, mk.libmk_version(): the Makefile's VERSION), finds
# libmk.so.0 by $MK_LIB or beside it in PREFIX/lib, and merges.  Skipped
# where venv, pip or setuptools are missing (make deps installs them).
. "$MK_TOP/test/cli/lib.inc"
[ "$MK_SAN" = 1 ] && exit 77
PY=/usr/bin/python3
$PY -c 'import setuptools, venv, ensurepip' 2>/dev/null || exit 77
$PY -m pip --version >/dev/null 2>&1 || exit 77
W=$PWD
version=$(sed -n 's/^VERSION *:= *//p' "$MK_TOP/Makefile")
[ -n "$version" ] || fail "no VERSION in the Makefile"
# a copy: pip builds in the source tree
cp -r "$MK_TOP/src/python" src
rm -rf src/build src/*.egg-info
export PIP_NO_INDEX=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PYTHONDONTWRITEBYTECODE=1
# the venv is the PREFIX: its lib/ holds libmk.so.0, as `make install` puts it
$PY -m venv --system-site-packages prefix > venv.log 2>&1 || { cat venv.log >&2; fail "python3 -m venv failed"; }
prefix/bin/pip install -q --no-deps --no-build-isolation ./src > pip.log 2>&1 ||
	{ cat pip.log >&2; fail "pip install ./src/python failed"; }
cp "$MK_BUILD/libmk.so.0" prefix/lib/
cd /
got=$(env -u MK_LIB W="$W" "$W/prefix/bin/python" -c '
import importlib.metadata as m, os, mk, mk.architecture, mk.card, mk.options, mk.merge, mk.merge_methods, mk.sparsify
from mk import _lib
assert _lib._load()._name == os.path.join(os.environ["W"], "prefix/lib/libmk.so.0"), _lib._load()._name
assert mk.__file__.startswith(os.environ["W"] + "/prefix/lib/"), mk.__file__
print(mk.__version__, m.version("mk"), mk.libmk_version())' 2>&1) || fail "the installed package: $got"
[ "$got" = "$version $version $version" ] || fail "versions '$got', expected $version thrice"
echo "python-package: installed into a venv, mk $got (the Makefile's $version), libmk.so.0 found in PREFIX/lib"
# $MK_LIB first
got=$(MK_LIB="$MK_BUILD/libmk.so.0" "$W/prefix/bin/python" -c 'import mk; from mk import _lib; print(_lib._load()._name)')
[ "$got" = "$MK_BUILD/libmk.so.0" ] || fail "MK_LIB not used: $got"
cd "$W"
# a merge by the installed package writes what mk-yaml writes
slerp_config c.yml "$MK_TOP/testdata/models/tiny-a" "$MK_TOP/testdata/models/tiny-b"
mk-yaml --quiet c.yml yaml/out
prefix/bin/python -c '
import mk
mk.run_merge(mk.MergeConfiguration.from_yaml(open("c.yml").read()), "py/out",
             options=mk.MergeOptions(quiet=True, lazy_unpickle=True, out_shard_size="5B"))' ||
	fail "run_merge by the installed package failed"
diff -r -x mergekit_config.yml yaml/out py/out || fail "the installed package's merge differs from mk-yaml's"
# a wheel
$PY -m pip wheel -q --no-deps --no-build-isolation -w dist ./src > wheel.log 2>&1 ||
	{ cat wheel.log >&2; fail "pip wheel failed"; }
whl=dist/mk-$version-py3-none-any.whl
[ -f "$whl" ] || { ls dist >&2; fail "no $whl"; }
$PY -c '
import sys, zipfile
names = set(zipfile.ZipFile(sys.argv[1]).namelist())
need = ["mk/__init__.py", "mk/_version.py", "mk/options.py", "mk/architecture/__init__.py", "mk/card.py",
        "mk/sparsify.py", "mk/merge_methods/__init__.py", "mk/merge_methods/_bridge.py", "mk/config.py",
        "mk/common.py"]
missing = [n for n in need if n not in names]
assert not missing, missing' "$whl" || fail "the wheel lacks modules"
# an sdist, and a wheel built from it (what pip does with an sdist)
(cd src && $PY -c 'from setuptools import build_meta; build_meta.build_sdist("../sdist")') > sdist.log 2>&1 ||
	{ cat sdist.log >&2; fail "building the sdist failed"; }
sd=sdist/mk-$version.tar.gz
[ -f "$sd" ] || { ls sdist >&2; fail "no $sd"; }
$PY -m pip wheel -q --no-deps --no-build-isolation -w dist2 "$sd" > wheel2.log 2>&1 ||
	{ cat wheel2.log >&2; fail "pip wheel of the sdist failed"; }
[ -f dist2/mk-$version-py3-none-any.whl ] || fail "the sdist built no wheel"
$PY -c '
import sys, zipfile
a = sorted(n for n in zipfile.ZipFile(sys.argv[1]).namelist() if n.endswith(".py"))
b = sorted(n for n in zipfile.ZipFile(sys.argv[2]).namelist() if n.endswith(".py"))
assert a == b and "mk/merge_methods/_bridge.py" in a, (a, b)' "$whl" dist2/mk-$version-py3-none-any.whl ||
	fail "the sdist's wheel holds other modules"
echo "python-package: $whl and $sd hold the package; its merge is mk-yaml's"
