#!/bin/sh
# Install what mk needs to build and test, and only what is missing:
# dpkg-query decides; apt-get runs only when something is absent, so a
# provisioned machine needs no network.
set -eu
need=""
for p in build-essential pkg-config libyaml-dev libzstd-dev liburing-dev \
         libopenblas-dev gfortran libjansson-dev libpcre2-dev libicu-dev libcurl4-openssl-dev libcmocka-dev libsentencepiece-dev clang libclang-rt-14-dev bc \
         netcat-openbsd python3-pytest python3-numpy python3-venv python3-pip python3-setuptools python3-wheel; do
	if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
		need="$need $p"
	fi
done
if [ -n "$need" ]; then
	echo "deps: installing:$need" >&2
	SUDO=""
	[ "$(id -u)" -eq 0 ] || SUDO=sudo
	$SUDO apt-get update -qq
	DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq $need >&2
fi
# The reference safetensors reader/writer, for the cross-check test
# (test/cli/python-read.sh skips without it).  Not fatal when offline.
if command -v python3 >/dev/null 2>&1 && ! python3 -c 'import safetensors' 2>/dev/null; then
	echo "deps: installing the Python safetensors package (cross-check tests)" >&2
	python3 -m pip install -q 'safetensors==0.8.0' >&2 || echo "deps: pip failed; the Python cross-check will be skipped" >&2
fi
