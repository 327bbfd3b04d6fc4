#!/usr/bin/env python3
"""gpu-peer-torch.py — the PyTorch peer of tests/tools/gpu-bench.sh.

The plain PyTorch bf16 LLaDA forward that the reference modeling code
(modeling_llada.py's LLaDALlamaBlock with rms layer norms, rotary embeddings
in full precision, SiLU-gated MLP, no biases, untied output) amounts to,
written here from that description: no upstream code is copied or carried.
It loads the same safetensors folder our engine reads (um-make-model's
Hugging Face layout: model.transformer.blocks.N.*), computes in bf16 with
torch.nn.functional.scaled_dot_product_attention (a plain softmax(qkᵀ)v on a
torch without it, e.g. Debian's 1.13 for a CPU rehearsal), and times
forwards with CUDA synchronisation, warm-up excluded, the median of the
timed passes. On top of it, the reference generate.py loop (blocks, the
exact schedule, low-confidence remasking, temperature 0) generates from the
prompt ids our bench used and compares the ids.

Usage:
  gpu-peer-torch.py forward  --model DIR --canvas 96,256,1088 [--passes 5] [--device cuda]
  gpu-peer-torch.py generate --model DIR --ours BENCH.json [--device cuda]
  gpu-peer-torch.py logits   --model DIR --ids 1,2,3 [--dtype f32]   (to check this forward against ours)
  gpu-peer-torch.py bandwidth [--mib 1024]   (host to device copies, pinned and pageable)
  gpu-peer-torch.py offload  --model DIR --canvas 96 --max-memory-gib 2 [--passes 3]
      (what a user short of GPU memory does instead: the weights in host
      memory, as many layers on the GPU as --max-memory-gib holds, the rest
      moved to the GPU one layer at a time as the forward reaches them —
      the plain PyTorch equivalent of accelerate's device_map="auto" with
      max_memory; the JSON says which ran and the GPU peak torch saw)
Prints one JSON object.
"""
import argparse
import json
import math
import mmap
import os
import statistics
import struct
import sys
import time

import torch
import torch.nn.functional as F


def load_safetensors(folder, device):
    """name → tensor, from model.safetensors or its shards; through the
    safetensors package when it is there, else read here (the format: an
    8-byte header length, a JSON header, the raw tensors)."""
    index = os.path.join(folder, "model.safetensors.index.json")
    if os.path.exists(index):
        with open(index) as f:
            files = sorted(set(json.load(f)["weight_map"].values()))
    else:
        files = ["model.safetensors"]
    out = {}
    try:
        from safetensors.torch import load_file
        for name in files:
            out.update(load_file(os.path.join(folder, name), device=device))
        return out
    except ImportError:
        pass
    dtypes = {"BF16": torch.bfloat16, "F16": torch.float16, "F32": torch.float32}
    for name in files:
        with open(os.path.join(folder, name), "rb") as f:
            data = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        n = struct.unpack("<Q", data[:8])[0]
        header = json.loads(data[8:8 + n])
        for key, info in header.items():
            if key == "__metadata__":
                continue
            start, end = info["data_offsets"]
            raw = bytearray(data[8 + n + start:8 + n + end])
            t = torch.frombuffer(raw, dtype=torch.uint8)
            t = t.view(dtypes[info["dtype"]]).reshape(info["shape"])
            out[key] = t.to(device)
    return out


class Llada:
    """The LLaDA forward in plain PyTorch, weights as loaded, in @dtype."""

    def __init__(self, folder, device, dtype=torch.bfloat16):
        with open(os.path.join(folder, "config.json")) as f:
            cfg = json.load(f)
        self.cfg = cfg
        self.n_layers = cfg["n_layers"]
        self.d = cfg["d_model"]
        self.h = cfg["n_heads"]
        self.hkv = cfg.get("n_kv_heads") or self.h
        self.hd = self.d // self.h
        self.eps = cfg.get("rms_norm_eps", 1e-5)
        self.theta = cfg.get("rope_theta", 10000.0)
        self.mask_id = cfg.get("mask_token_id", 126336)
        self.device = device
        self.dtype = dtype
        w = load_safetensors(folder, device)
        self.w = {k: v.to(dtype) for k, v in w.items()}
        self.sdpa = hasattr(F, "scaled_dot_product_attention")

    def rms(self, x, w):
        # As the reference: the statistics in float32, the result back in
        # the model's type, then the weight.
        xf = x.float()
        xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return xf.to(x.dtype) * w

    def rope(self, x, pos):
        # Rotary embeddings in full precision, halves rotated (i, i + hd/2).
        half = self.hd // 2
        inv = 1.0 / (self.theta ** (torch.arange(0, self.hd, 2, device=x.device, dtype=torch.float32) / self.hd))
        freqs = pos.float()[:, None] * inv[None, :]
        cos, sin = freqs.cos(), freqs.sin()
        xf = x.float()
        x1, x2 = xf[..., :half], xf[..., half:]
        out = torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)
        return out.to(x.dtype)

    def attention(self, q, k, v):
        if self.hkv != self.h:
            rep = self.h // self.hkv
            k = k.repeat_interleave(rep, dim=1)
            v = v.repeat_interleave(rep, dim=1)
        if self.sdpa:
            return F.scaled_dot_product_attention(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False)
        s = torch.matmul(q.float(), k.float().transpose(-1, -2)) / math.sqrt(self.hd)
        return torch.matmul(torch.softmax(s, dim=-1), v.float()).to(q.dtype)

    @torch.no_grad()
    def forward(self, ids):
        """ids [B, L] → logits [B, L, V] (bf16)."""
        w = self.w
        B, L = ids.shape
        pos = torch.arange(L, device=ids.device)
        x = F.embedding(ids, w["model.transformer.wte.weight"])
        for l in range(self.n_layers):
            x = self.layer(x, l, w, pos)
        x = self.rms(x, w["model.transformer.ln_f.weight"])
        return F.linear(x, w["model.transformer.ff_out.weight"])

    def layer(self, x, l, w, pos):
        B, L = x.shape[0], x.shape[1]
        if True:
            p = "model.transformer.blocks.%d." % l
            xn = self.rms(x, w[p + "attn_norm.weight"])
            q = F.linear(xn, w[p + "q_proj.weight"]).view(B, L, self.h, self.hd)
            k = F.linear(xn, w[p + "k_proj.weight"]).view(B, L, self.hkv, self.hd)
            v = F.linear(xn, w[p + "v_proj.weight"]).view(B, L, self.hkv, self.hd)
            q = self.rope(q, pos[:, None]).transpose(1, 2)
            k = self.rope(k, pos[:, None]).transpose(1, 2)
            v = v.transpose(1, 2)
            a = self.attention(q, k, v).transpose(1, 2).reshape(B, L, self.h * self.hd)
            x = x + F.linear(a, w[p + "attn_out.weight"])
            xn = self.rms(x, w[p + "ff_norm.weight"])
            g = F.linear(xn, w[p + "ff_proj.weight"])
            u = F.linear(xn, w[p + "up_proj.weight"])
            x = x + F.linear(F.silu(g) * u, w[p + "ff_out.weight"])
        return x


class Offloaded(Llada):
    """The same forward with the weights in host memory (pinned on a GPU):
    the token table stays there (rows looked up on the host and moved), the
    final norm and head and as many whole layers as the budget holds after
    them (less room for one streamed layer and the activations) go to the
    GPU once, and every other layer's weights are moved to the GPU when the
    forward reaches it and dropped after, as accelerate's hooks do for
    modules its device map puts on the CPU (no prefetch)."""

    def __init__(self, folder, device, budget_bytes):
        super().__init__(folder, "cpu", torch.bfloat16)
        self.device = device
        cuda = device.startswith("cuda")
        w = self.w
        layer_bytes = [sum(v.numel() * v.element_size() for k, v in w.items()
                           if k.startswith("model.transformer.blocks.%d." % l)) for l in range(self.n_layers)]
        head = [k for k in w if k.startswith("model.transformer.ln_f") or k == "model.transformer.ff_out.weight"]
        used = sum(w[k].numel() * w[k].element_size() for k in head)
        # Room kept for one layer in flight and the activations of a canvas of 1088 rows.
        reserve = max(layer_bytes) + 1088 * (self.d * 16 + w["model.transformer.ff_out.weight"].shape[0] * 2)
        self.resident = []
        for l in range(self.n_layers):
            if used + layer_bytes[l] + reserve <= budget_bytes:
                self.resident.append(l)
                used += layer_bytes[l]
        self.dev = {}
        for k, v in w.items():
            on_gpu = k in head or any(k.startswith("model.transformer.blocks.%d." % l) for l in self.resident)
            if on_gpu:
                self.dev[k] = v.to(device)
            elif cuda and k != "model.transformer.wte.weight":
                self.dev[k] = v.pin_memory()
            else:
                self.dev[k] = v
        self.w = None
        self.layer_bytes = layer_bytes
        self.moved_bytes = 0

    @torch.no_grad()
    def forward(self, ids):
        B, L = ids.shape
        pos = torch.arange(L, device=self.device)
        x = F.embedding(ids.cpu(), self.dev["model.transformer.wte.weight"]).to(self.device)
        for l in range(self.n_layers):
            if l in self.resident:
                x = self.layer(x, l, self.dev, pos)
                continue
            p = "model.transformer.blocks.%d." % l
            w = {k: v.to(self.device, non_blocking=True) for k, v in self.dev.items() if k.startswith(p)}
            self.moved_bytes += self.layer_bytes[l]
            x = self.layer(x, l, w, pos)
            del w
        x = self.rms(x, self.dev["model.transformer.ln_f.weight"])
        return F.linear(x, self.dev["model.transformer.ff_out.weight"])


def sync(device):
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def time_forward(model, ids, passes, warmup, device):
    for _ in range(warmup):
        model.forward(ids)
    sync(device)
    times = []
    for _ in range(passes):
        if device.startswith("cuda"):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            model.forward(ids)
            b.record()
            torch.cuda.synchronize()
            times.append(a.elapsed_time(b) / 1e3)
        else:
            t0 = time.perf_counter()
            model.forward(ids)
            times.append(time.perf_counter() - t0)
    return times


def num_transfer_tokens(mask_count, steps):
    """The reference's split of a block's masks over its steps: the first
    (n % steps) steps one more."""
    base, rem = mask_count // steps, mask_count % steps
    return [base + (1 if i < rem else 0) for i in range(steps)]


@torch.no_grad()
def generate(model, prompt, gen_length, block_length, steps, device):
    """generate.py's loop at temperature 0 with low-confidence remasking."""
    mask = model.mask_id
    L = len(prompt) + gen_length
    x = torch.full((1, L), mask, dtype=torch.long, device=device)
    x[0, :len(prompt)] = torch.tensor(prompt, dtype=torch.long, device=device)
    n_blocks = gen_length // block_length
    per_block = steps // n_blocks
    P = len(prompt)
    for b in range(n_blocks):
        s, e = P + b * block_length, P + (b + 1) * block_length
        counts = num_transfer_tokens(int((x[0, s:e] == mask).sum()), per_block)
        for i in range(per_block):
            mask_index = x == mask
            logits = model.forward(x)
            x0 = torch.argmax(logits, dim=-1)
            p = F.softmax(logits.to(torch.float64), dim=-1)
            x0_p = torch.gather(p, -1, x0.unsqueeze(-1)).squeeze(-1)
            x0_p[:, e:] = -math.inf
            x0 = torch.where(mask_index, x0, x)
            conf = torch.where(mask_index, x0_p, torch.tensor(-math.inf, device=device, dtype=x0_p.dtype))
            if counts[i] > 0:
                _, idx = torch.topk(conf[0], k=counts[i])
                x[0, idx] = x0[0, idx]
    return x[0, P:].tolist()


def bandwidth(mib, device):
    """Host to device: large copies from pinned and from pageable memory,
    the median of 5 after one warm-up; GB/s of 10^9 bytes."""
    n = mib << 20
    out = {"bytes": n, "device": device}
    dst = torch.empty(n, dtype=torch.uint8, device=device)
    for kind in ("pinned", "pageable"):
        src = torch.empty(n, dtype=torch.uint8, pin_memory=(kind == "pinned" and device.startswith("cuda")))
        src.fill_(1)
        times = []
        for r in range(6):
            sync(device)
            t0 = time.perf_counter()
            dst.copy_(src, non_blocking=True)
            sync(device)
            if r > 0:
                times.append(time.perf_counter() - t0)
        out[kind + "_gb_per_s"] = n / statistics.median(times) / 1e9
    return out


def offload(a):
    """Per forward with the weights offloaded to host memory, at a budget."""
    cuda = a.device.startswith("cuda")
    try:
        import accelerate  # noqa: F401
        have_accelerate = accelerate.__version__
    except ImportError:
        have_accelerate = None
    t0 = time.perf_counter()
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    model = Offloaded(a.model, a.device, int(a.max_memory_gib * (1 << 30)))
    sync(a.device)
    out = {
        "peer": "pytorch offload, plain layer by layer (accelerate's device_map=\"auto\" needs the model as "
                "nn.Module blocks, which this peer is not)",
        "accelerate_importable": have_accelerate,
        "torch": torch.__version__,
        "device": torch.cuda.get_device_name(0) if cuda else "cpu",
        "max_memory_bytes": int(a.max_memory_gib * (1 << 30)),
        "resident_layers": len(model.resident),
        "n_layers": model.n_layers,
        "load_seconds": time.perf_counter() - t0,
    }
    rows = []
    V = model.dev["model.transformer.ff_out.weight"].shape[0]
    for c in [int(v) for v in a.canvas.split(",") if v]:
        g = torch.Generator().manual_seed(c)
        ids = torch.randint(0, min(V, 100000), (1, c), generator=g)
        ids[0, c // 2:] = model.mask_id
        model.moved_bytes = 0
        times = time_forward(model, ids.to(a.device), a.passes, 1, a.device)
        rows.append({"canvas": c, "seconds_per_forward": statistics.median(times), "seconds_all": times,
                     "bytes_moved_per_forward": model.moved_bytes / (a.passes + 1)})
    out["forward"] = rows
    if cuda:
        out["device_peak_bytes"] = torch.cuda.max_memory_reserved()
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("what", choices=["forward", "generate", "logits", "bandwidth", "offload"])
    ap.add_argument("--max-memory-gib", type=float, default=2.0)
    ap.add_argument("--mib", type=int, default=1024)
    ap.add_argument("--dtype", choices=["bf16", "f32"], default="bf16")
    ap.add_argument("--ids", default="")
    ap.add_argument("--model")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--canvas", default="96,256,1088")
    ap.add_argument("--passes", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--ours", help="our bench JSON (generate mode): its prompt_ids, gen settings and ids")
    ap.add_argument("--gen-length", type=int, default=0)
    ap.add_argument("--block-length", type=int, default=0)
    ap.add_argument("--steps", type=int, default=0)
    a = ap.parse_args()

    if a.what == "bandwidth":
        json.dump(bandwidth(a.mib, a.device), sys.stdout, indent=1)
        print()
        return
    if a.what == "offload":
        json.dump(offload(a), sys.stdout, indent=1)
        print()
        return
    t0 = time.perf_counter()
    model = Llada(a.model, a.device, torch.bfloat16 if a.dtype == "bf16" else torch.float32)
    sync(a.device)
    out = {
        "peer": "pytorch",
        "torch": torch.__version__,
        "device": torch.cuda.get_device_name(0) if a.device.startswith("cuda") else "cpu",
        "dtype": a.dtype,
        "attention": "scaled_dot_product_attention" if model.sdpa else "softmax(q·kᵀ)·v (no SDPA in this torch)",
        "load_seconds": time.perf_counter() - t0,
        "n_layers": model.n_layers,
        "d_model": model.d,
    }
    if a.what == "logits":
        ids = torch.tensor([[int(v) for v in a.ids.split(",")]], device=a.device)
        out["logits"] = model.forward(ids)[0].float().cpu().tolist()
    elif a.what == "forward":
        rows = []
        V = model.w["model.transformer.ff_out.weight"].shape[0]
        for c in [int(v) for v in a.canvas.split(",") if v]:
            g = torch.Generator().manual_seed(c)
            ids = torch.randint(0, min(V, 100000), (1, c), generator=g)
            ids[0, c // 2:] = model.mask_id
            times = time_forward(model, ids.to(a.device), a.passes, a.warmup, a.device)
            rows.append({"canvas": c, "seconds_per_forward": statistics.median(times),
                         "seconds_all": times})
        out["forward"] = rows
    else:
        with open(a.ours) as f:
            ours = json.load(f)
        prompt = ours["prompt_ids"]
        gen = a.gen_length or ours["gen_length"]
        block = a.block_length or ours["block_length"]
        steps = a.steps or ours["steps"]
        generate(model, prompt, gen, block, steps, a.device)   # warm-up run
        sync(a.device)
        t0 = time.perf_counter()
        ids = generate(model, prompt, gen, block, steps, a.device)
        sync(a.device)
        secs = time.perf_counter() - t0
        theirs = ours.get("ids", [])
        same = sum(1 for x, y in zip(ids, theirs) if x == y)
        first = next((i for i, (x, y) in enumerate(zip(ids, theirs)) if x != y), None)
        out.update({"prompt_length": len(prompt), "gen_length": gen, "block_length": block, "steps": steps,
                    "generate_seconds": secs, "tokens_per_second": gen / secs if secs > 0 else 0,
                    "ids": ids, "ids_equal_to_ours": same, "ids_compared": min(len(ids), len(theirs)),
                    "first_difference": first})
    json.dump(out, sys.stdout, indent=1)
    print()


if __name__ == "__main__":
    main()
