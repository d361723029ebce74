"""MergeOptions.quantize: run_merge writes what mk-yaml --quantize writes
(gpt-oss MXFP4 models from mk-gen-model), and refuses a format that is
not one, or one the base model was not in.  Run by test/cli/python.sh."""
import os
import subprocess

import pytest

import mk

BIN = os.environ["MK_BIN"]
TOOLS = os.path.join(os.path.dirname(BIN), "tools")
GEN = ["--arch", "gpt_oss", "--quantized", "mxfp4", "--dtype", "BF16", "--hidden", "64", "--inter", "96",
       "--experts", "2", "--layers", "1", "--vocab", "16", "--heads", "4", "--kv-heads", "2"]


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    d = tmp_path_factory.mktemp("mx")
    out = []
    for s in (1, 2):
        p = str(d / ("m%d" % s))
        subprocess.run([os.path.join(TOOLS, "mk-gen-model"), *GEN, "--seed", str(s), p], check=True,
                       stdout=subprocess.DEVNULL)
        out.append(p)
    return out


def config(a, b):
    return {"merge_method": "linear", "dtype": "bfloat16",
            "models": [{"model": a, "parameters": {"weight": 0.4}}, {"model": b, "parameters": {"weight": 0.6}}]}


def test_run_merge_quantize_is_mk_yaml(models, tmp_path):
    cfg = config(*models)
    mk.run_merge(cfg, str(tmp_path / "py"), options=mk.MergeOptions(quantize="mxfp4", write_model_card=False))
    y = tmp_path / "c.yml"
    import yaml
    y.write_text(yaml.safe_dump(cfg))
    subprocess.run([os.path.join(BIN, "mk-yaml"), "--quiet", "--quantize", "mxfp4", "--no-write-model-card",
                    str(y), str(tmp_path / "cli")], check=True)
    py = open(tmp_path / "py" / "model.safetensors", "rb").read()
    assert py == open(tmp_path / "cli" / "model.safetensors", "rb").read()
    assert b"gate_up_proj_blocks" in py[:4096]


def test_quantize_refused(models, tmp_path):
    with pytest.raises(Exception, match='expected "fp8" or "mxfp4"'):
        mk.run_merge(config(*models), str(tmp_path / "x"), options=mk.MergeOptions(quantize="int4"))
    with pytest.raises(Exception, match="write them so with --quantize mxfp4"):
        mk.run_merge(config(*models), str(tmp_path / "y"), options=mk.MergeOptions(quantize="fp8"))
    assert not os.path.exists(tmp_path / "x") and not os.path.exists(tmp_path / "y")
