"""Writes testdata/card-lora/: mergekit 0.1.5's LoRA adapter cards
(mergekit.card.generate_card_lora) for a few cases, CASE.json (the inputs)
and CASE.md (the card), for test/unit/test_card.c.  Run by hand from the
repository's root with the conformance venv's python (not part of make
check); HF_HUB_OFFLINE=1 keeps mergekit's hub check offline, as mk's is."""
import json
import os

os.environ["HF_HUB_OFFLINE"] = "1"
from mergekit.card import generate_card_lora  # noqa: E402
from mergekit.common import ModelReference  # noqa: E402

CASES = {
    "hub": ("org/base", "org/tuned", "mergekit-extract-lora --model org/tuned --base-model org/base --out-path out",
            "out", 32000, 32000),
    "local": ("/models/base", "testdata/models/tiny-b", "x --model testdata/models/tiny-b", "", None, None),
    "lora-extended": ("org/base", "org/tuned+org/adapter", "cmd 'quoted' \"args\"", "my-lora", 32000, 32002),
    "reduced": ("org/base+org/base-adapter", "local/dir/model", "cmd", "yes", 151936, 151665),
}
os.makedirs("testdata/card-lora", exist_ok=True)
for name, (base, model, inv, title, bv, fv) in CASES.items():
    card = generate_card_lora(ModelReference.parse(base), ModelReference.parse(model), inv, title,
                              base_vocab_size=bv, final_vocab_size=fv)
    with open("testdata/card-lora/%s.json" % name, "w") as f:
        json.dump({"base": base, "model": model, "invocation": inv, "name": title, "base_vocab": bv or 0,
                   "final_vocab": fv or 0}, f, indent=1)
        f.write("\n")
    with open("testdata/card-lora/%s.md" % name, "w") as f:
        f.write(card)
print(len(CASES), "cards written")
