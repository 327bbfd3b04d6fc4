#!/usr/bin/python3
"""Random-weight GGUFs of a family's real layout (keys, tensor names, tokenizer from a tiny fixture
GGUF, vocabulary padded with [PAD] rows as llama.cpp's converter does), for side-by-side speed runs.
usage: make_bench_gguf.py ARCH OUT.gguf  (ARCH: dream | llada | llada-moe), F16 weights, norms/router F32."""
import os, sys, numpy as np
sys.path.insert(0, os.environ.get('LLAMACPP', '../peers/llama.cpp') + '/gguf-py')
import gguf

arch, out = sys.argv[1], sys.argv[2]
fixture = {'dream': 'tiny-dream-f32', 'llada': 'tiny-llada-f32', 'llada-moe': 'tiny-llada-moe-f32'}[arch]
r = gguf.GGUFReader(os.path.dirname(os.path.abspath(__file__)) + '/../data/%s.gguf' % fixture)
if arch == 'dream':
    S = dict(L=12, D=768, H=12, KV=2, HD=64, F=2048, V=32000)
elif arch == 'llada':
    S = dict(L=12, D=768, H=12, KV=12, HD=64, F=2048, V=32000)
else:
    S = dict(L=6, D=512, H=8, KV=8, HD=64, F=1024, E=32, K=4, EF=256, V=32000)
rng = np.random.default_rng(1)
w = gguf.GGUFWriter(out, arch)
def field(k):
    f = r.fields[k]
    return f
skip_prefix = (arch + '.', 'GGUF.', 'general.architecture', 'general.file_type')
for k, f in r.fields.items():
    if k.startswith(skip_prefix): continue
    t = f.types[0]
    if k == 'tokenizer.ggml.tokens':
        toks = [bytes(f.parts[i]).decode() for i in f.data]
        toks += ['[PAD%d]' % i for i in range(len(toks), S['V'])]
        w.add_token_list(toks); continue
    if k == 'tokenizer.ggml.token_type':
        tt = [int(f.parts[i][0]) for i in f.data]
        tt += [gguf.TokenType.UNUSED] * (S['V'] - len(tt))
        w.add_token_types(tt); continue
    if k == 'tokenizer.ggml.merges':
        w.add_token_merges([bytes(f.parts[i]).decode() for i in f.data]); continue
    if t == gguf.GGUFValueType.STRING:
        w.add_string(k, bytes(f.parts[f.data[0]]).decode())
    elif t == gguf.GGUFValueType.BOOL:
        w.add_bool(k, bool(f.parts[f.data[0]][0]))
    elif t == gguf.GGUFValueType.UINT32:
        w.add_uint32(k, int(f.parts[f.data[0]][0]))
    elif t == gguf.GGUFValueType.INT32:
        w.add_int32(k, int(f.parts[f.data[0]][0]))
w.add_block_count(S['L']); w.add_context_length(4096); w.add_embedding_length(S['D'])
w.add_feed_forward_length(S['F']); w.add_head_count(S['H']); w.add_head_count_kv(S['KV'])
w.add_causal_attention(False)
w.add_layer_norm_rms_eps(1e-6)
if arch == 'dream':
    w.add_rope_freq_base(1e6)
elif arch == 'llada':
    w.add_rope_freq_base(5e5)
else:
    w.add_rope_freq_base(5e4); w.add_expert_count(S['E']); w.add_expert_used_count(S['K'])
    w.add_expert_feed_forward_length(S['EF']); w.add_bool('diffusion.shift_logits', False)
w.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
def mat(name, *shape, f32=False, scale=None):
    # shape in HF order (rows, cols) or (E, rows, cols); GGUF reverses it
    a = rng.standard_normal(shape, dtype=np.float32) * (scale if scale else 1.0 / np.sqrt(shape[-1]))
    w.add_tensor(name, a if f32 else a.astype(np.float16))
def norm(name, n):
    w.add_tensor(name, (1.0 + 0.1 * rng.standard_normal(n)).astype(np.float32))
D, V, H, KV, HD = S['D'], S['V'], S['H'], S['KV'], S['HD']
mat('token_embd.weight', V, D, scale=1.0)
for l in range(S['L']):
    p = 'blk.%d.' % l
    norm(p + 'attn_norm.weight', D)
    mat(p + 'attn_q.weight', H * HD, D); mat(p + 'attn_k.weight', KV * HD, D); mat(p + 'attn_v.weight', KV * HD, D)
    if arch == 'dream':
        for n, m in (('q', H * HD), ('k', KV * HD), ('v', KV * HD)):
            w.add_tensor(p + 'attn_%s.bias' % n, (0.1 * rng.standard_normal(m)).astype(np.float32))
    elif arch == 'llada-moe':
        norm(p + 'attn_q_norm.weight', HD); norm(p + 'attn_k_norm.weight', HD)
    mat(p + 'attn_output.weight', D, H * HD)
    norm(p + 'ffn_norm.weight', D)
    if arch != 'llada-moe':
        mat(p + 'ffn_gate.weight', S['F'], D); mat(p + 'ffn_up.weight', S['F'], D); mat(p + 'ffn_down.weight', D, S['F'])
    else:
        E, EF = S['E'], S['EF']
        mat(p + 'ffn_gate_inp.weight', E, D, f32=True)
        mat(p + 'ffn_gate_exps.weight', E, EF, D); mat(p + 'ffn_up_exps.weight', E, EF, D)
        mat(p + 'ffn_down_exps.weight', E, D, EF)
norm('output_norm.weight', D)
mat('output.weight', V, D)
w.write_header_to_file(); w.write_kv_data_to_file(); w.write_tensors_to_file(); w.close()
print(out)
