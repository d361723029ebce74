"""mk.options.MergeOptions against mergekit 0.1.5's: every field with its
default and rules (testdata/golden/python-api/options.json, made with
mergekit's MergeOptions(**kw).model_dump()), frozen, the fields that mean
nothing to mk accepted without a warning, typos warned about, verbosity
setting the mk logger's level."""
import json
import logging
import os
import warnings

import pytest

import mk

from mk.merge import MergeOptions as MergeOptionsFromMerge
from mk.options import IGNORED_FIELDS, MK_FIELDS, MergeOptions, parse_kmb

GOLDEN = os.path.join(os.getcwd(), "testdata/golden/python-api/options.json")


def cases():
    return json.load(open(GOLDEN))


@pytest.mark.parametrize("case", cases(), ids=lambda c: json.dumps(c["kw"], sort_keys=True))
def test_dump_as_mergekit(case):
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no mergekit field warns
        o = MergeOptions(**case["kw"])
    dump = o.model_dump()
    mine = {k: v for k, v in dump.items() if k not in MK_FIELDS}
    assert mine == case["dump"]
    assert list(mine) == list(case["dump"])  # mergekit's field order


def test_every_mergekit_field_and_mk_fields():
    names = set(cases()[0]["dump"])
    assert names | set(MK_FIELDS) == set(MergeOptions.model_fields)
    assert set(IGNORED_FIELDS) <= names


def test_same_class_in_merge():
    assert MergeOptionsFromMerge is MergeOptions


def test_frozen_and_copy():
    o = MergeOptions(cuda=True, out_shard_size=100)
    with pytest.raises(ValueError):
        o.cuda = False
    c = o.model_copy(update={"cuda": False})
    assert (c.cuda, c.device, c.out_shard_size) == (False, "cpu", 100)
    assert (o.cuda, o.device) == (True, "cuda")
    assert o == MergeOptions(cuda=True, out_shard_size=100) and hash(o) == hash(MergeOptions(cuda=True,
                                                                                          out_shard_size=100))
    assert dict(o)["out_shard_size"] == 100
    assert MergeOptions.model_validate({"quiet": True}).quiet is True
    assert o.model_fields_set == {"cuda", "out_shard_size"}


def test_sizes_and_types():
    assert MergeOptions(out_shard_size="5B").out_shard_size == 5 * 10 ** 9
    assert MergeOptions(out_shard_size="300M").out_shard_size == 300 * 10 ** 6
    assert MergeOptions(out_shard_size="7k").out_shard_size == 7000
    assert MergeOptions(out_shard_size="64MiB").out_shard_size == 64 << 20
    assert parse_kmb(12) == 12
    with pytest.raises(ValueError):
        MergeOptions(out_shard_size="lots")
    with pytest.raises(ValueError):
        MergeOptions(cuda="maybe")
    with pytest.raises(ValueError):
        MergeOptions(num_threads="x")
    assert MergeOptions(num_threads="4").num_threads == 4
    assert MergeOptions(random_seed=None).random_seed is None


def test_ignored_quiet_typos_warn(caplog):
    kw = {k: (True if MergeOptions.model_fields[k].annotation is bool else "x" if k in ("device", "lora_merge_cache")
              else 2) for k in IGNORED_FIELDS}
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        with caplog.at_level(logging.DEBUG, logger="mk"):
            MergeOptions(**kw)
        assert not w
        assert any("means nothing to mk" in r.getMessage() and r.levelno == logging.DEBUG for r in caplog.records)
        MergeOptions(alow_crimes=True)
        assert len(w) == 1 and "alow_crimes" in str(w[0].message)


def test_device():
    assert MergeOptions().device == "cpu"
    assert MergeOptions(cuda=True).device == "cuda"
    assert MergeOptions(gpu_rich=True).device == "cuda"
    assert MergeOptions(device="cuda:1").device == "cuda:1"
    assert MergeOptions(device="auto").device in ("cpu", "cuda", "xpu")


def test_verbosity_sets_the_mk_logger():
    lg = logging.getLogger("mk")
    old = lg.level
    try:
        MergeOptions(verbosity=2)
        assert lg.level == logging.DEBUG
        MergeOptions(verbosity=1)
        assert lg.level == logging.INFO
        MergeOptions(verbosity=0)
        assert lg.level == logging.WARNING
        MergeOptions()  # not given: left as it is
        assert lg.level == logging.WARNING
    finally:
        lg.setLevel(old)


def test_unsafe_truncate_embeddings_reaches_the_merge(tmp_path):
    # models of vocabularies 16 and 12 (testdata/truncate/README): refused
    # without the option, cut to 12 rows with it, as mk-yaml's flag does
    import subprocess
    gen = os.path.join(os.environ["MK_BIN"], "..", "tools", "mk-gen-model")
    for name, seed, vocab in (("a", 1, 16), ("b", 2, 12)):
        subprocess.run([gen, "--seed", str(seed), "--layers", "1", "--hidden", "8", "--inter", "16", "--vocab",
                        str(vocab), "--dtype", "F32", "--bpe-tokenizer", str(tmp_path / name)], check=True)
    cfg = {"merge_method": "task_arithmetic", "base_model": str(tmp_path / "a"),
           "models": [{"model": str(tmp_path / "b"), "parameters": {"weight": 0.5}}], "dtype": "float32"}
    opts = dict(copy_tokenizer=False, write_model_card=False, quiet=True)
    with pytest.raises((mk.MergeError, mk.ConfigError), match="unsafe-truncate-embeddings"):
        mk.run_merge(cfg, str(tmp_path / "refused"), options=mk.MergeOptions(**opts))
    mk.run_merge(cfg, str(tmp_path / "py"), options=mk.MergeOptions(unsafe_truncate_embeddings=True, **opts))
    (tmp_path / "c.yml").write_text(json.dumps(cfg))
    subprocess.run([os.path.join(os.environ["MK_BIN"], "mk-yaml"), "--unsafe-truncate-embeddings",
                    "--no-copy-tokenizer", "--no-write-model-card", str(tmp_path / "c.yml"), str(tmp_path / "cli")],
                   check=True, stderr=subprocess.DEVNULL)
    for f in ("model.safetensors", "config.json"):
        assert (tmp_path / "py" / f).read_bytes() == (tmp_path / "cli" / f).read_bytes(), f
    raw = (tmp_path / "py" / "model.safetensors").read_bytes()
    head = json.loads(raw[8:8 + int.from_bytes(raw[:8], "little")])
    assert head["model.embed_tokens.weight"]["shape"] == [12, 8]
