#!/usr/bin/env python3
# check.py — the engine's logits on the exported demo model against the
# PyTorch model's on the same weights (read back from model.safetensors),
# before shipping:  python3 data/training/check.py data/demo-model build/app/unmask-cli
import json
import os
import struct
import subprocess
import sys
import types

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import train  # noqa: E402


def read_safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, h in header.items():
        a, b = h["data_offsets"]
        raw = data[a:b]
        if h["dtype"] == "BF16":
            t = torch.frombuffer(bytearray(raw), dtype=torch.int16).to(torch.int32) << 16
            t = t.view(torch.float32)
        else:
            t = torch.frombuffer(bytearray(raw), dtype=torch.float32)
        out[name] = t.reshape(h["shape"]).clone()
    return out


def main():
    folder, cli = sys.argv[1], sys.argv[2]
    cfg = json.load(open(os.path.join(folder, "config.json")))
    a = types.SimpleNamespace(d_model=cfg["d_model"], layers=cfg["n_layers"], heads=cfg["n_heads"],
                              mlp=cfg["mlp_hidden_size"], rope_theta=cfg["rope_theta"])
    model = train.Model(a, cfg["vocab_size"])
    sd = read_safetensors(os.path.join(folder, "model.safetensors"))
    with torch.no_grad():
        model.wte.weight.copy_(sd["model.transformer.wte.weight"])
        for i, blk in enumerate(model.blocks):
            pre = "model.transformer.blocks.%d." % i
            for name in ("attn_norm", "ff_norm", "q_proj", "k_proj", "v_proj", "attn_out", "ff_proj",
                         "up_proj", "ff_out"):
                getattr(blk, name).weight.copy_(sd[pre + name + ".weight"])
        model.ln_f.weight.copy_(sd["model.transformer.ln_f.weight"])
        model.head.weight.copy_(sd["model.transformer.ff_out.weight"])
    torch.manual_seed(3)
    worst = 0.0
    for trial in range(3):
        ids = torch.randint(0, cfg["vocab_size"] - 6, (24,))
        ids[torch.rand(24) < 0.4] = cfg["mask_token_id"]
        with torch.no_grad():
            want = model(ids[None])[0].double()
        got = subprocess.run([cli, "logits", "--model", folder, "--ids", ",".join(map(str, ids.tolist())),
                              "--json"], capture_output=True, text=True, check=True).stdout
        got = torch.tensor(json.loads(got)["logits"], dtype=torch.float64)
        err = ((got - want).abs() / (1 + want.abs())).max().item()
        worst = max(worst, err)
    print("engine vs PyTorch: max relative logit difference %.2g" % worst)
    sys.exit(0 if worst < 1e-4 else 1)


if __name__ == "__main__":
    main()
