#!/usr/bin/env python3
"""Writes testdata/python/config/: mergekit 0.1.5's model_dump and
to_yaml of every configuration in testdata/configs/ and
test/conformance/ it accepts, and of configurations built from its data
classes.  test/python/test_config.py builds the same with mk.config and
compares.  Run by hand from the repository's root with mergekit's
Python (not part of make check):

    ~/.cache/mk/mergekit-0.1.5-venv/bin/python scripts/python-config-golden.py

For each NAME: NAME.json ({"source": ..., "model_dump": model_dump(
mode="json"), "model_dump_python": model_dump() with tuples as lists,
"exclude_none": model_dump(mode="json", exclude_none=True),
"model_dump_json": model_dump_json(), "referenced_models": sorted
str()s}) and NAME.yml (to_yaml(), exactly)."""
import glob
import json
import os
import sys

import yaml
from mergekit.config import MergeConfiguration

OUT = "testdata/python/config"


sys.path.insert(0, "testdata/python")
import config_cases  # noqa: E402

K = config_cases.namespace("mergekit")


def write(name, source, c):
    rec = {"source": source, "model_dump": c.model_dump(mode="json"), "model_dump_python": config_cases.plain(c.model_dump()),
           "exclude_none": c.model_dump(mode="json", exclude_none=True), "model_dump_json": c.model_dump_json(),
           "referenced_models": sorted(str(m) for m in c.referenced_models())}
    with open(os.path.join(OUT, name + ".json"), "w") as f:
        json.dump(rec, f, indent=1, sort_keys=True, allow_nan=False)
        f.write("\n")
    with open(os.path.join(OUT, name + ".yml"), "w") as f:
        f.write(c.to_yaml())


def main():
    os.makedirs(OUT, exist_ok=True)
    n = 0
    for path in sorted(glob.glob("testdata/configs/*.yml")) + sorted(glob.glob("test/conformance/*.yml")):
        try:
            c = MergeConfiguration.model_validate(yaml.safe_load(open(path)))
        except Exception as e:  # noqa: BLE001 - report and skip what mergekit refuses
            print("%s: refused by mergekit: %s" % (path, str(e).splitlines()[0]), file=sys.stderr)
            continue
        write(path.split("/")[-2] + "-" + os.path.basename(path)[:-4], path, c)
        n += 1
    for name, fn in (("objects", config_cases.build_objects),
                     ("objects-tokenizer-modules", config_cases.build_tokenizer_modules),
                     ("mutated", config_cases.build_mutated)):
        write(name, fn.__name__, fn(K))
        n += 1
    print("%d configurations written to %s" % (n, OUT))


if __name__ == "__main__":
    main()
