"""test/tools/mk-gguf-read.py, the tests' GGUF reader, on a file llama.cpp's
convert_hf_to_gguf.py wrote (testdata/gguf/tiny-llama-f16.gguf, see
testdata/gguf/README), and on damaged copies of it, which it must refuse."""
import importlib.util
import struct
import subprocess
import sys

import pytest

TOOL = "test/tools/mk-gguf-read.py"
REF = "testdata/gguf/tiny-llama-f16.gguf"


def reader():
    spec = importlib.util.spec_from_file_location("mk_gguf_read", TOOL)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_reference_file():
    data = open(REF, "rb").read()
    version, kvs, tensors, align, start = reader().parse(data)
    kv = {k: v for k, _, v in kvs}
    types = {k: vt for k, vt, _ in kvs}
    assert version == 3 and align == 32 and start == 3552
    assert kv["general.architecture"] == "llama"
    assert kv["llama.block_count"] == 2 and types["llama.block_count"] == 4
    assert kv["llama.embedding_length"] == 64
    assert kv["general.file_type"] == 1                  # MOSTLY_F16
    assert abs(kv["llama.rope.freq_base"] - 10000.0) == 0
    et, toks = kv["tokenizer.ggml.tokens"]
    assert et == 8 and len(toks) == 64 and toks[:3] == ["<unk>", "<s>", "</s>"]
    assert kv["tokenizer.ggml.token_type"][0] == 5       # i32
    by = {t[0]: t for t in tensors}
    assert len(tensors) == 21
    assert by["blk.0.ffn_down.weight"][1:3] == ("f16", [128, 64])
    assert by["blk.0.attn_norm.weight"][1:3] == ("f32", [64])
    last = max(tensors, key=lambda t: t[3])
    assert start + last[3] + (last[4] + 31) // 32 * 32 == len(data)


def test_cli_output():
    out = subprocess.run([sys.executable, TOOL, REF], capture_output=True,
                         text=True, check=True).stdout.splitlines()
    assert out[0] == "version 3"
    assert "kv llama.attention.head_count_kv u32 2" in out
    assert "tensor blk.1.attn_k.weight f16 [64,32] offset=140288 bytes=4096" in out
    assert out[-3:] == ["alignment 32", "data_start 3552", "file_size 168672"]
    assert any(x.startswith("kv tokenizer.ggml.tokens arr[str,64] ['<unk>'") for x in out)


def damaged(tmp_path, edit):
    data = bytearray(open(REF, "rb").read())
    edit(data)
    p = tmp_path / "bad.gguf"
    p.write_bytes(bytes(data))
    r = subprocess.run([sys.executable, TOOL, str(p)], capture_output=True, text=True)
    assert r.returncode == 1
    return r.stderr


def test_refuses_damage(tmp_path):
    assert "magic" in damaged(tmp_path, lambda d: d.__setitem__(0, ord("X")))
    assert "version" in damaged(tmp_path, lambda d: d.__setitem__(4, 2))
    assert "truncated" in damaged(tmp_path, lambda d: d.__delitem__(slice(200, None)))
    assert "past the end" in damaged(tmp_path, lambda d: d.__delitem__(slice(-100, None)))

    def shift_offset(d):
        # the last tensor info's offset (output_norm.weight): off by 32
        pos = bytes(d).rfind(struct.pack("<Q", 164864), 0, 3552)
        assert pos > 3400
        struct.pack_into("<Q", d, pos, 164864 + 32)
    assert "previous data ends" in damaged(tmp_path, shift_offset)


if __name__ == "__main__":
    sys.exit(pytest.main([__file__]))
