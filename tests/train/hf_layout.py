#!/usr/bin/python3
"""An HF GPT-2 folder against the same checkpoint's spmd export, read with
Python's standard library alone (no numpy, torch or safetensors package).

Usage: hf_layout.py HF_FOLDER SPMD_FILE

HF_FOLDER is what `spmd-train export --format hf` wrote, SPMD_FILE what
`spmd-train export` (the model's own names) wrote from the same checkpoint.
Checks config.json's keys against the tensors, that the folder holds exactly
GPT2LMHeadModel's names with their shapes (lm_head.weight only for an untied
head), and that every tensor holds the spmd parameter's values bit for bit:
transposed for the four Conv1D weights of a block ([in, out] there, [out, in]
in spmd), as they are for the rest. Exits 1 naming the first difference.
"""
import array
import json
import struct
import sys


def read_safetensors(path):
    """{name: (shape, array of f32)} and the metadata of a safetensors file."""
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    metadata = header.pop("__metadata__", {})
    tensors = {}
    for name, entry in header.items():
        assert entry["dtype"] == "F32", f"{name}: dtype {entry['dtype']}, not F32"
        begin, end = entry["data_offsets"]
        values = array.array("f")
        values.frombytes(data[8 + n + begin:8 + n + end])
        assert sys.byteorder == "little"
        tensors[name] = (entry["shape"], values)
    return tensors, metadata


def transposed(shape, values):
    """The [cols, rows] transpose of a row-major [rows, cols] matrix."""
    rows, cols = shape
    out = array.array("f", bytes(4 * rows * cols))
    for r in range(rows):
        out[r::rows] = values[r * cols:(r + 1) * cols]
    return [cols, rows], out


def expected_names(n_layer, tied):
    """GPT2LMHeadModel's parameter name -> (spmd name, stored transposed)."""
    names = {
        "transformer.wte.weight": ("tok_embeddings.weight", False),
        "transformer.wpe.weight": ("pos_embeddings.weight", False),
        "transformer.ln_f.weight": ("norm.weight", False),
        "transformer.ln_f.bias": ("norm.bias", False),
    }
    if not tied:
        names["lm_head.weight"] = ("output.weight", False)
    block = [("ln_1", "attn_norm", False), ("attn.c_attn", "attn.wqkv", True),
             ("attn.c_proj", "attn.wo", True), ("ln_2", "ffn_norm", False),
             ("mlp.c_fc", "mlp.w1", True), ("mlp.c_proj", "mlp.w2", True)]
    for i in range(n_layer):
        for hf, ours, conv1d in block:
            names[f"transformer.h.{i}.{hf}.weight"] = (f"layers.{i}.{ours}.weight", conv1d)
            names[f"transformer.h.{i}.{hf}.bias"] = (f"layers.{i}.{ours}.bias", False)
    return names


def main():
    folder, spmd_file = sys.argv[1], sys.argv[2]
    with open(f"{folder}/config.json") as f:
        config = json.load(f)
    hf, metadata = read_safetensors(f"{folder}/model.safetensors")
    ours, _ = read_safetensors(spmd_file)

    assert config["model_type"] == "gpt2", config["model_type"]
    assert config["architectures"] == ["GPT2LMHeadModel"], config["architectures"]
    assert config["activation_function"] == "gelu_new", config["activation_function"]
    assert config["layer_norm_epsilon"] == 1e-5, config["layer_norm_epsilon"]
    assert metadata.get("format") == "pt", metadata
    V, C = hf["transformer.wte.weight"][0]
    T = hf["transformer.wpe.weight"][0][0]
    for key, want in [("vocab_size", V), ("n_embd", C), ("n_positions", T), ("n_ctx", T)]:
        assert config[key] == want, f"config.json {key} {config[key]}, the tensors say {want}"

    names = expected_names(config["n_layer"], config["tie_word_embeddings"])
    assert set(hf) == set(names), (f"missing {sorted(set(names) - set(hf))}, "
                                   f"unexpected {sorted(set(hf) - set(names))}")
    assert len(ours) == len(names), f"{len(ours)} spmd tensors, {len(names)} HF names"
    for name, (spmd_name, conv1d) in sorted(names.items()):
        shape, values = ours[spmd_name]
        if conv1d:
            shape, values = transposed(shape, values)
        assert hf[name][0] == shape, f"{name}: {hf[name][0]}, expected {shape}"
        assert hf[name][1].tobytes() == values.tobytes(), f"{name} differs from {spmd_name}"

    # One Conv1D weight by hand: c_attn[i][j] (in i, out j) is wqkv[j][i].
    (cin, cout), c_attn = hf["transformer.h.0.attn.c_attn.weight"]
    (rows, cols), wqkv = ours["layers.0.attn.wqkv.weight"]
    assert (rows, cols) == (cout, cin) == (3 * C, C), ((rows, cols), (cin, cout))
    for i, j in [(0, 1), (1, 0), (C - 1, 3 * C - 1), (5, 2 * C + 3)]:
        assert c_attn[i * cout + j] == wqkv[j * cols + i], (i, j)
    print(f"OK: {len(names)} tensors, {config['n_layer']} layers, C {C}, V {V}, T {T}, "
          f"tied {config['tie_word_embeddings']}; every value equal, Conv1D weights transposed")


if __name__ == "__main__":
    main()
