"""A wrapper written for mergekit (testdata/python/mergekit_wrapper.py),
its imports changed from mergekit to mk and nothing else: no warning, the
output mk-yaml's byte for byte but for mergekit_config.yml, which is what
mergekit's run_merge writes there (testdata/python/run-merge-written.json,
made with mergekit 0.1.5), and the card, which quotes it."""
import filecmp
import json
import logging
import os
import subprocess
import types
import warnings

import pytest
import yaml

BIN = os.environ["MK_BIN"]
WRITTEN = json.load(open("testdata/python/run-merge-written.json"))


def wrapper():
    src = open("testdata/python/mergekit_wrapper.py").read()
    src = src.replace("from mergekit.", "from mk.")
    assert "mergekit." not in src.split('"""', 2)[2]
    mod = types.ModuleType("wrapper")
    exec(compile(src, "mergekit_wrapper.py", "exec"), mod.__dict__)
    return mod


@pytest.mark.parametrize("name", sorted(WRITTEN))
@pytest.mark.parametrize("form", ["dict", "yaml"])
def test_wrapper_output(name, form, tmp_path, caplog):
    rec = WRITTEN[name]
    w = wrapper()
    out = tmp_path / "py" / "merged"   # (the card's title is the directory's name)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with caplog.at_level(logging.WARNING, logger="mk"):
            if form == "dict":
                w.merge_from_dict(rec["config"], str(out))
            else:
                w.merge_from_yaml(yaml.safe_dump(rec["config"]), str(out))
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING], caplog.text
    cfg = tmp_path / "config.yml"
    cfg.write_text(yaml.safe_dump(rec["config"]))
    subprocess.run([os.path.join(BIN, "mk-yaml"), str(cfg), str(tmp_path / "cli" / "merged")], check=True,
                   stderr=subprocess.DEVNULL)
    files = sorted(os.listdir(out))
    cli = tmp_path / "cli" / "merged"
    assert files == sorted(os.listdir(cli))
    rest = [f for f in files if f not in ("mergekit_config.yml", "README.md")]
    assert "config.json" in rest and any(f.endswith(".safetensors") for f in rest)
    same, diff, errs = filecmp.cmpfiles(out, cli, rest, shallow=False)
    assert not diff and not errs, (diff, errs)
    assert (out / "mergekit_config.yml").read_text() == rec["written"]
    card = (out / "README.md").read_text()
    assert rec["written"] in card
    cli_card = (cli / "README.md").read_text()
    # the same card around the configuration block
    head, tail = card.split("```yaml\n", 1)[0], card.rsplit("```", 1)[1]
    assert head == cli_card.split("```yaml\n", 1)[0] and tail == cli_card.rsplit("```", 1)[1]
