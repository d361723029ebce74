"""The package's version: the one place pyproject.toml reads it from
(setuptools' dynamic version), equal to libmk's (the Makefile's VERSION;
test/cli/python-package.sh holds the three equal)."""
__version__ = "0.1.0"
