# Golden data for test/unit/test_surgeon.c, made by mergekit 0.1.5's own
# tokensurgeon functions (float32, CPU):
#   MERGEKIT_VENV/bin/python scripts/tokensurgeon-golden.py testdata/tokensurgeon
# (run by hand, outside `make check`: it needs mergekit and torch).
#
# Writes, little-endian and row-major:
#   sets.txt       SET MODEL_ROWS MODEL_WIDTH DONOR_ROWS DONOR_WIDTH TARGETS
#   SET-model.f32, SET-donor.f32   the two embeddings
#   SET-map.i32    per donor id, the model id of the same token, or -1
#   SET-targets.i32  the donor ids to approximate, in mergekit's order
#   cases.txt      NAME METHOD SET K OPTION, one case a line
#   NAME.out.f32   mergekit's rows for the targets (TARGETS x MODEL_WIDTH)
#   NAME.idx.i32   omp's picks (TARGETS x K), in shared-token positions
#   NAME.res.f32   omp: per target, |target - fit| in the donor's space,
#                  the batch's, then mergekit's with the target alone
#   NAME.z.f32     john_hewitt: the standard normals torch drew
#   NAME.ids.i32   subword: per target, a count then the model tokenizer's ids
#   match.txt      token matching on real tokenizers (see match_cases)
import json, os, shutil, sys
import numpy as np
import torch
import transformers

import mergekit.scripts.tokensurgeon as ts
from mergekit.common import ModelReference
from mergekit.tokensurgeon import (WeightingScheme, SubwordMethod, batch_omp, compute_token_basis,
                                   subword_approximate)
from mergekit.tokenizer.normalization import normalized_vocabulary, unnormalize_token

OUT = sys.argv[1]  # then --e2e: the end-to-end runs too
TOP = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ENC = os.path.join(TOP, "testdata/tokenizers/encode")
cases = open(os.path.join(OUT, "cases.txt"), "w")
sets = open(os.path.join(OUT, "sets.txt"), "w")


def save(name, a, dt):
    np.ascontiguousarray(np.asarray(a), dtype=dt).tofile(os.path.join(OUT, name))


def make_set(name, seed, dm, dd, rows=300, nshared=260, spread=False):
    """Two embeddings of related tokens: a latent row per token sent to
    each width by its own linear map, plus noise; ids shuffled.  spread:
    a latent of full width with scales 1 .. 0.3 and little noise, so that
    the principal axes are well apart (stb's basis well conditioned)."""
    g = np.random.default_rng(seed)
    ntok = 2 * rows - nshared
    nl, noise = (min(dm, dd), 0.001) if spread else (24, 0.05)
    sc = np.linspace(1.0, 0.3, nl) if spread else (np.arange(nl) + 1.0) ** -0.5
    lat = g.standard_normal((ntok, nl)) * sc
    mapm = np.linalg.qr(g.standard_normal((dm, nl)))[0].T if spread else g.standard_normal((nl, dm))
    mapd = np.linalg.qr(g.standard_normal((dd, nl)))[0].T if spread else g.standard_normal((nl, dd))
    em = lat @ mapm + noise * g.standard_normal((ntok, dm))
    ed = lat @ mapd + noise * g.standard_normal((ntok, dd))
    # the model has tokens 0..rows-1, the donor rows-nshared..ntok-1
    mtok = np.arange(rows)
    dtok = np.arange(rows - nshared, ntok)
    mid = g.permutation(rows)          # mid[i]: the model id of model token i
    did = g.permutation(rows)
    model = np.zeros((rows, dm), np.float32)
    donor = np.zeros((rows, dd), np.float32)
    model[mid] = em[mtok]
    donor[did] = ed[dtok]
    orig_vocab = {f"t{t}": int(mid[i]) for i, t in enumerate(mtok)}
    donor_vocab = {f"t{t}": int(did[i]) for i, t in enumerate(dtok)}
    mp = np.full(rows, -1, np.int32)
    for tok, i in donor_vocab.items():
        if tok in orig_vocab:
            mp[i] = orig_vocab[tok]
    # targets: the donor tokens the model lacks, in donor id order
    targets = sorted((i for tok, i in donor_vocab.items() if tok not in orig_vocab))
    save(f"{name}-model.f32", model, np.float32)
    save(f"{name}-donor.f32", donor, np.float32)
    save(f"{name}-map.i32", mp, np.int32)
    save(f"{name}-targets.i32", targets, np.int32)
    sets.write(f"{name} {rows} {dm} {rows} {dd} {len(targets)}\n")
    inv = {i: t for t, i in donor_vocab.items()}
    return dict(model=torch.tensor(model), donor=torch.tensor(donor), ov=orig_vocab, dv=donor_vocab,
                targets=[inv[i] for i in targets])


def options(method, **kw):
    return ts.TokenSurgeonOptions(model=ModelReference.model_validate("m"), donor=ModelReference.model_validate("d"),
                                  out_path="/nonexistent", method=method, **kw)


def new_embeddings(s, method, token_basis=None, **kw):
    return ts.compute_new_embeddings(s["model"], s["donor"], s["ov"], s["dv"], s["targets"], False, token_basis,
                                     None, options(method, **kw))


def case(name, method, setname, k, opt, out):
    cases.write(f"{name} {method} {setname} {k} {opt}\n")
    save(f"{name}.out.f32", out.detach().numpy(), np.float32)


A = ts.ApproximationMethod
sa = make_set("a", 1, 64, 64)
sb = make_set("b", 2, 64, 48)
sc = make_set("c", 3, 64, 64, spread=True)
sd = make_set("d", 4, 64, 48, spread=True)

# omp: mergekit's own picks recorded too (in shared-token positions)
for s, sn, ks in ((sa, "a", (8, 16, 48)), (sb, "b", (16,))):
    for k in ks:
        out = new_embeddings(s, A.ORTHOGONAL_MATCHING_PURSUIT, k=k)
        case(f"omp-{sn}-k{k}", "omp", sn, k, "-", out)
        shared = sorted(set(s["ov"]) & set(s["dv"]), key=lambda t: s["dv"][t])
        pts = s["donor"][torch.tensor([s["dv"][t] for t in shared])]
        tg = s["donor"][torch.tensor([s["dv"][t] for t in s["targets"]])]
        idx, coef = batch_omp(tg, pts, k)
        save(f"omp-{sn}-k{k}.idx.i32", idx.numpy(), np.int32)
        # the donor-space residual of each target, and how many picks
        # mergekit itself changes when given the targets one at a time
        def residual(i, c, t):
            return (t - torch.bmm(c.unsqueeze(1), pts[i]).squeeze(1)).norm(dim=1)
        ones = [batch_omp(tg[j:j + 1], pts, k) for j in range(tg.shape[0])]
        one = torch.cat([o[0] for o in ones])
        res1 = torch.cat([residual(o[0], o[1], tg[j:j + 1]) for j, o in enumerate(ones)])
        save(f"omp-{sn}-k{k}.res.f32", torch.stack([residual(idx, coef, tg), res1], dim=1).numpy(), np.float32)
        print(f"omp-{sn}-k{k}: mergekit's picks one target at a time differ in {int((one != idx).sum())} "
              f"of {idx.numel()}")

# omp past 256 picks (the QR re-orthogonalisation): batch_omp itself
g = np.random.default_rng(7)
pts = torch.tensor((g.standard_normal((300, 264))).astype(np.float32))
tg = torch.tensor((g.standard_normal((3, 264))).astype(np.float32))
idx, coef = batch_omp(tg, pts, 258)
save("r-points.f32", pts.numpy(), np.float32)
save("r-targets.f32", tg.numpy(), np.float32)
sets.write("r 300 264 0 0 3\n")
case("omp-r-k258", "ompraw", "r", 258, "-", torch.bmm(coef.unsqueeze(1), pts[idx]).squeeze(1))
save("omp-r-k258.idx.i32", idx.numpy(), np.int32)

# common_interpolation
W = WeightingScheme
for k, cos, w in ((8, False, W.DISTANCE_PROPORTIONAL), (8, True, W.DISTANCE_PROPORTIONAL),
                  (64, False, W.DISTANCE_PROPORTIONAL), (16, False, W.BARYCENTRIC), (16, True, W.BARYCENTRIC),
                  (96, False, W.BARYCENTRIC), (16, False, W.LEAST_SQUARES), (32, True, W.LEAST_SQUARES)):
    opt = ("cosine-" if cos else "euclid-") + w.value
    out = new_embeddings(sa, A.COMMON_INTERPOLATION, k=k, cosine_similarity=cos, weight_scheme=w)
    case(f"interp-a-k{k}-{opt}", "interp", "a", k, opt, out)
out = new_embeddings(sb, A.COMMON_INTERPOLATION, k=12, weight_scheme=W.LEAST_SQUARES)
case("interp-b-k12-euclid-least_squares", "interp", "b", 12, "euclid-least_squares", out)

# mean, zero
case("mean-a", "mean", "a", 0, "-", new_embeddings(sa, A.MEAN))
case("zero-a", "zero", "a", 0, "-", new_embeddings(sa, A.ZERO))

# landmark_pca: torch.pca_lowrank's axes carry the signs of its random
# draw; here they are the exact singular vectors signed as mk signs them
# (largest entry positive), so the rest of mergekit's sequence is tested.
real_pca = torch.pca_lowrank


def signed_pca(a, q=None, center=True, niter=2):
    u, s, vh = torch.linalg.svd(a, full_matrices=False)
    v = vh.mT[:, :q]
    at = v.abs().argmax(dim=0)
    sg = torch.sign(v[at, torch.arange(v.shape[1])])
    return u[:, :q] * sg, s[:q], v * sg


torch.pca_lowrank = signed_pca
case("pca-a", "pca", "a", 0, "-", new_embeddings(sa, A.LANDMARK_PCA))
torch.pca_lowrank = real_pca
# how much the real thing moves with torch's generator (printed)
runs = []
for seed in (1, 2, 3):
    torch.manual_seed(seed)
    runs.append(new_embeddings(sa, A.LANDMARK_PCA))
spread = max(float((r - runs[0]).norm() / runs[0].norm()) for r in runs)
print(f"landmark_pca with torch.pca_lowrank: relative spread over 3 generator states {spread:.3g}")

# stb: mergekit's compute_token_basis walks the shared tokens in set
# order, which PYTHONHASHSEED changes; on embeddings with close principal
# axes (sets a and b) its answer moves by more than its own size from one
# seed to the next.  So the golden is sparse_linear_basis (mergekit's own)
# over the shared tokens in donor id order, as mk takes them, with the
# rest of compute_token_basis as it is, on well-separated axes (c, d).
from mergekit.tokensurgeon.token_basis import sparse_linear_basis


def token_basis(s, k):
    shared = sorted(set(s["ov"]) & set(s["dv"]), key=lambda t: s["dv"][t])
    om = s["model"][torch.tensor([s["ov"][t] for t in shared])]
    dm_ = s["donor"][torch.tensor([s["dv"][t] for t in shared])]
    src = dm_ if s["donor"].shape[1] < s["model"].shape[1] else om
    idx, w = sparse_linear_basis(src, k=k, d=min(om.shape[1], dm_.shape[1]))
    return (torch.bmm(w.unsqueeze(1), dm_[idx]).squeeze(1), torch.bmm(w.unsqueeze(1), om[idx]).squeeze(1))


for s, sn, k in ((sc, "c", 16), (sd, "d", 16), (sc, "c", 48)):
    tb = token_basis(s, k)
    case(f"stb-{sn}-k{k}", "stb", sn, k, "-", new_embeddings(s, A.SPARSE_TOKEN_BASIS, token_basis=tb))
    print(f"stb-{sn}-k{k}: donor basis condition number {float(torch.linalg.cond(tb[0])):.3g}")
torch.pca_lowrank = signed_pca
case("pca-c", "pca", "c", 0, "-", new_embeddings(sc, A.LANDMARK_PCA))
torch.pca_lowrank = real_pca

# mp_rope: batch_mp_rope itself on the shared rows in donor id order (what
# compute_new_embeddings does, less the configurations it reads the heads
# and bases from); OPTION is HEADS_A-HEADS_B-BASE_A-BASE_B
from mergekit.tokensurgeon import batch_mp_rope

for s, sn, k, ha, hb, ba, bb in ((sa, "a", 8, 4, 4, 10000.0, 10000.0), (sb, "b", 8, 3, 4, 10000.0, 500000.0)):
    shared = sorted(set(s["ov"]) & set(s["dv"]), key=lambda t: s["dv"][t])
    pa = s["donor"][torch.tensor([s["dv"][t] for t in shared])]
    pb = s["model"][torch.tensor([s["ov"][t] for t in shared])]
    tg = s["donor"][torch.tensor([s["dv"][t] for t in s["targets"]])]
    _, _, out, _ = batch_mp_rope(tg, pa, pb, k=k, num_heads_a=ha, num_heads_b=hb, a_rope_base=ba, b_rope_base=bb)
    case(f"rope-{sn}-k{k}", "rope", sn, k, f"{ha}-{hb}-{int(ba)}-{int(bb)}", out)

# --magikarp: well_trained_tokens on a model of 300 rows whose last 20
# have no token (ids 280..299) and 8 more are "<|reserved_special_token_N|>"
# (like the unused ones: small and alike), and 3 under-trained rows;
# magikarp-tokens.txt: the token of each id (an empty line: none),
# magikarp-{head,nohead}.good.i32: 1 for each id mergekit keeps
from mergekit.tokensurgeon import well_trained_tokens

g = np.random.default_rng(9)
emb = g.standard_normal((300, 64)).astype(np.float32)
head = g.standard_normal((300, 64)).astype(np.float32)
junk = g.standard_normal(64).astype(np.float32) * 0.01
for i in list(range(280, 300)) + list(range(40, 48)):
    emb[i] = junk + 0.001 * g.standard_normal(64)
    head[i] = junk + 0.001 * g.standard_normal(64)
emb[[5, 6, 7]] *= 1e-4
toks = [f"t{i}" for i in range(280)]
for j, i in enumerate(range(40, 48)):
    toks[i] = f"<|reserved_special_token_{j}|>"
vocab = {t: i for i, t in enumerate(toks)}
save("magikarp-model.f32", emb, np.float32)
save("magikarp-lm_head.f32", head, np.float32)
open(os.path.join(OUT, "magikarp-tokens.txt"), "w").write("\n".join(toks + [""] * 20) + "\n")
for nm, h in (("head", torch.tensor(head)), ("nohead", None)):
    good = set(well_trained_tokens(vocab, torch.tensor(emb), h))
    save(f"magikarp-{nm}.good.i32", [int(t in good) for t in toks], np.int32)
    print(f"magikarp {nm}: {len(good)} of {len(toks)} tokens kept")

# john_hewitt: MultivariateNormal.sample draws torch.randn-like normals;
# the same seed again gives them to mk
for s, sn in ((sa, "a"), (sc, "c")):
    torch.manual_seed(11)
    out = new_embeddings(s, A.JOHN_HEWITT)
    torch.manual_seed(11)
    z = torch.empty(len(s["targets"]), 64).normal_()
    save(f"jh-{sn}.z.f32", z.numpy(), np.float32)
    case(f"jh-{sn}", "jh", sn, 0, "-", out)

# subword: the model's tokenizer is a real one (llama2's test tokenizer,
# as transformers loads it); its embedding 1256 x 16
tok_m = transformers.AutoTokenizer.from_pretrained(os.path.join(ENC, "llama2"))
tok_d = transformers.AutoTokenizer.from_pretrained(os.path.join(ENC, "qwen2"))
vm, vd = normalized_vocabulary(tok_m), normalized_vocabulary(tok_d)
new = sorted((t for t in vd if t not in vm), key=lambda t: vd[t])[:40]
emb = torch.tensor(np.random.default_rng(5).standard_normal((len(tok_m.get_vocab()), 16)).astype(np.float32))
save("sw-model.f32", emb.numpy(), np.float32)
sets.write(f"sw {emb.shape[0]} 16 0 0 {len(new)}\n")
ids = []
for t in new:
    e = tok_m(unnormalize_token(t), add_special_tokens=False)["input_ids"]
    ids += [len(e)] + e
save("sw.ids.i32", ids, np.int32)
for m in SubwordMethod:
    for head in (False, True):
        out = subword_approximate(emb, new, head, tok_m, m)
        case(f"sw-{m.value}-{'head' if head else 'embed'}", "subword", "sw", 0, f"{m.value}-{int(head)}", out)

cases.close()
sets.close()


# ---- matching, on real tokenizers: build_embedding_matrix with a
# 1-wide embedding whose row i holds i + 1 and the zero method: each
# donor row then holds its model id + 1, or 0 (approximated or zeroed)
def match_cases():
    tmp = os.path.join(OUT, "tmp-tok")
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    # llama2's tokenizer as transformers loads a LlamaTokenizer class: the ▁ mark
    spm = os.path.join(tmp, "llama2-spm")
    shutil.copytree(os.path.join(ENC, "llama2"), spm)
    cfgp = os.path.join(spm, "tokenizer_config.json")
    cfg = json.load(open(cfgp))
    cfg["tokenizer_class"] = "LlamaTokenizerFast"
    json.dump(cfg, open(cfgp, "w"))
    pairs = [("llama2-spm", spm, "LlamaTokenizerFast", "qwen2"), ("qwen2", None, None, "llama2-spm"),
             ("gpt2", None, None, "llama3"), ("mistral", None, None, "misc-a")]
    f = open(os.path.join(OUT, "match.txt"), "w")
    f.write("# MODEL DONOR BYTE PREFIX, then per donor id the model id it copies, A (approximated) or Z (zero)\n")
    for mname, mpath, mcls, dname in pairs:
        mpath = mpath or os.path.join(ENC, mname)
        dpath = spm if dname == "llama2-spm" else os.path.join(ENC, dname)
        tm = transformers.AutoTokenizer.from_pretrained(mpath)
        td = transformers.AutoTokenizer.from_pretrained(dpath)
        ov, dv = normalized_vocabulary(tm), normalized_vocabulary(td)
        rows_m = max(ov.values()) + 1
        rows_d = max(dv.values()) + 1
        oe = (torch.arange(rows_m, dtype=torch.float32) + 1).unsqueeze(1)
        de = torch.zeros(rows_d, 1)
        for byte in (False, True):
            for prefix in (False, True):
                opts = ts.TokenSurgeonOptions(model=ModelReference.model_validate(mpath),
                                              donor=ModelReference.model_validate(dpath), out_path="/nonexistent",
                                              method=A.ZERO)
                res = ts.build_embedding_matrix(type("W", (), {"name": "x"})(), oe, de, ov, dv,
                                                [], prefix, byte, False, opts)
                ids = [int(v) - 1 if v > 0 else -1 for v in res[:, 0].tolist()]
                inv = {i: t for t, i in dv.items()}
                marks = []
                for i, v in enumerate(ids):
                    marks.append(str(v) if v >= 0 else ("A" if i in inv else "Z"))
                f.write(f"{mname} {dname} {int(byte)} {int(prefix)}\n{' '.join(marks)}\n")
        for nm, t in ((mname, tm), (dname, td)):
            f.write(f"# {nm}: {type(t).__name__} {json.dumps(t.special_tokens_map)}\n")
    f.close()
    shutil.rmtree(tmp)


match_cases()


# ---- end to end: mergekit-tokensurgeon itself on two tiny llama models
# (1 layer, hidden 32, bfloat16, untied lm_head) with the llama2 test
# tokenizer (as a LlamaTokenizerFast: the ▁ mark) and the qwen2 one;
# e2e/model, e2e/donor, and e2e/NAME: its output for each command line
# of E2E_RUNS, the program's golden.
E2E_RUNS = {
    "omp-k8": ["-k", "8"],
    # (the default weight scheme, distance_proportional, fails in mergekit
    # 0.1.5 on bfloat16 embeddings: its weights stay bfloat16 for a float32 bmm)
    "interp-k8-lsq-match": ["-a", "common_interpolation", "-k", "8", "-w", "least_squares", "--byte-match", "yes",
                            "--prefix-match", "yes"],
    "subword": ["-a", "subword"],
}


def tiny_llama(path, tokdir, seed, cls=None):
    import subprocess
    shutil.copytree(tokdir, path, ignore=shutil.ignore_patterns("golden.json"))
    if cls:
        p = os.path.join(path, "tokenizer_config.json")
        c = json.load(open(p))
        c["tokenizer_class"] = cls
        json.dump(c, open(p, "w"), indent=2)
    tok = transformers.AutoTokenizer.from_pretrained(path)
    torch.manual_seed(seed)
    cfg = transformers.LlamaConfig(vocab_size=len(tok.get_vocab()), hidden_size=32, intermediate_size=64,
                                   num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=2,
                                   max_position_embeddings=128, tie_word_embeddings=False,
                                   bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id)
    model = transformers.LlamaForCausalLM(cfg).to(torch.bfloat16)
    model.save_pretrained(path)


def e2e():
    import subprocess
    base = os.path.join(OUT, "e2e")
    shutil.rmtree(base, ignore_errors=True)
    os.makedirs(base)
    tiny_llama(os.path.join(base, "model"), os.path.join(ENC, "llama2"), 21, "LlamaTokenizerFast")
    tiny_llama(os.path.join(base, "donor"), os.path.join(ENC, "qwen2"), 22)
    exe = os.path.join(os.path.dirname(sys.executable), "mergekit-tokensurgeon")
    for name, args in E2E_RUNS.items():
        cmd = [exe, os.path.join(base, "model"), os.path.join(base, "donor"), os.path.join(base, name)] + args
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        print("e2e:", " ".join(["mergekit-tokensurgeon", "model", "donor", name] + args))
    # the subword run's encodings, as transformers' class for the model
    # (LlamaTokenizer) gives them: per token to approximate, in donor id
    # order, a count then the ids
    tm = transformers.AutoTokenizer.from_pretrained(os.path.join(base, "model"))
    td = transformers.AutoTokenizer.from_pretrained(os.path.join(base, "donor"))
    vm, vd = normalized_vocabulary(tm), normalized_vocabulary(td)
    ids = []
    for t in sorted((t for t in vd if t not in vm), key=lambda t: vd[t]):
        e = tm(unnormalize_token(t), add_special_tokens=False)["input_ids"]
        ids += [len(e)] + e
    save("e2e/subword-ids.i32", ids, np.int32)


if "--e2e" in sys.argv:
    e2e()
