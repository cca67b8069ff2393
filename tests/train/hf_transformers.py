#!/usr/bin/python3
"""An HF GPT-2 folder that spmd exported, loaded by transformers itself.

Usage: hf_transformers.py FOLDER

FOLDER is what `spmd-train export --format hf --with-logits` wrote:
config.json, model.safetensors, and logits.safetensors (spmd's logits for
fixed ids). GPT2LMHeadModel.from_pretrained loads the folder, reporting no
unexpected or mismatched tensor and none missing but the tied lm_head; its
logits for the same ids must equal spmd's within 1e-4. Exits 77 (ctest:
skipped) when torch or transformers cannot be imported: a skip, never a pass.
"""
import sys

try:
    import torch
    import transformers
    from safetensors.torch import load_file
except ImportError as e:
    print(f"SKIPPED: {e} (needs torch and transformers)")
    sys.exit(77)


def main():
    folder = sys.argv[1]
    try:  # the plain attention; older versions have no such argument
        model, info = transformers.GPT2LMHeadModel.from_pretrained(
            folder, output_loading_info=True, attn_implementation="eager")
    except TypeError:
        model, info = transformers.GPT2LMHeadModel.from_pretrained(folder, output_loading_info=True)
    assert not info.get("unexpected_keys"), info["unexpected_keys"]
    assert not info.get("mismatched_keys"), info["mismatched_keys"]  # absent before 4.x
    assert set(info.get("missing_keys", [])) <= {"lm_head.weight"}, info["missing_keys"]
    if model.config.tie_word_embeddings:
        assert model.lm_head.weight.data_ptr() == model.transformer.wte.weight.data_ptr()
    check = load_file(f"{folder}/logits.safetensors")
    model.eval()
    with torch.no_grad():
        logits = model(check["ids"].long()).logits
    want = check["logits"]
    assert logits.shape == want.shape, (logits.shape, want.shape)
    diff = (logits.float() - want).abs().max().item()
    print(f"transformers {transformers.__version__}: GPT2LMHeadModel's logits vs spmd's "
          f"{tuple(want.shape)}: max |difference| {diff:.2e}")
    assert diff < 1e-4, diff


if __name__ == "__main__":
    main()
