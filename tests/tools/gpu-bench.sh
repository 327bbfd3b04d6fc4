#!/bin/bash
# gpu-bench.sh — the whole GPU measurement as one command, for the device
# machine (docs/gpu.md): our programs, built here and carried as one bundle
# (tests/tools/gpu-pack.sh), run under their own loader; the models made on
# the device; our forward and generation beside PyTorch's on the same GPU,
# same weights, same work; the fixtures' parity on the GPU; everything as
# JSON plus a table under the output folder. It stops itself within the
# time it is given and leaves the machine as it found it (its work folder
# removed, its samplers stopped).
#
#   bash tests/tools/gpu-bench.sh [--bundle FILE] [--out DIR] [--time-limit S] [--rehearse] [--python PY]
#
# --bundle FILE   default .gpu-run/bundle.tar.xz (.gpu-run/rehearse.tar.xz with --rehearse)
# --out DIR       default $OUT (the device tool's), else ./gpu-bench-out
# --time-limit S  seconds for the whole run, default 540 (the tool allows a
#                 call 600); steps that would not fit are skipped and say so
# --rehearse      here, without a GPU: the bundle of the CUDA emulation
#                 (gpu-pack.sh --emulation), tiny shapes, PyTorch on the CPU
#                 (Debian's python3-torch); the same steps, the same files
# --python PY     the Python with torch (default python3; /usr/bin/python3
#                 when rehearsing)
#
# Files written (the device tool brings back at most 8): results.json,
# table.txt, log.txt, smi.csv (the GPU's memory, load and clocks every
# 200 ms, from nvidia-smi), apps.csv (per-process GPU memory).
set -uo pipefail

tool=gpu-bench help_lines=2,27p reserve=20 step_log_tail=
. "$(dirname "$0")/gpu-run-lib.sh"

# ---- 1. the device, and its memory sampled while we run ----
if [ "$rehearse" = 0 ] && command -v nvidia-smi > /dev/null; then
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.max.mem,power.limit,pstate \
    --format=csv > "$work/gpu.csv" 2>> "$log"
  nvidia-smi --query-gpu=timestamp,memory.used,utilization.gpu,clocks.sm,clocks.mem,power.draw,temperature.gpu \
    --format=csv -lms 200 > "$out/smi.csv" 2>> "$log" &
  pids+=($!)
  ( while :; do nvidia-smi --query-compute-apps=timestamp,pid,process_name,used_memory --format=csv,noheader; \
      sleep 0.5; done ) > "$out/apps.csv" 2>> "$log" &
  pids+=($!)
else
  echo "name,driver_version,memory.total" > "$work/gpu.csv"
  echo "host emulation (rehearsal),none,0" >> "$work/gpu.csv"
fi
"$run" unmask-cli devices > "$work/devices.txt" 2>> "$log"

# ---- 2. the shapes of this run ----
if [ "$rehearse" = 1 ]; then
  big=(--shape tiny --family llada --layers 2)
  canvases=16,32,48
  gen=(--prompt-length 8 --gen-length 32 --block-length 8 --steps 32)
  small_dream=(--shape tiny --family dream)
  small_moe=(--shape tiny --family llada-moe)
  small_canvas=24
  passes=2
  quant=Q8_0,Q4_K_M
else
  big=(--shape llada-8b)
  canvases=96,256,1088
  gen=(--prompt-length 64 --gen-length 256 --block-length 32 --steps 256)
  small_dream=(--shape dream-100m)
  small_moe=(--shape llada-moe-100m)
  small_canvas=96
  passes=10
  quant=Q8_0,Q4_K_M
fi
# In order of what matters most if time runs short: the forward and the
# generation against PyTorch, then parity, then profiles and the rest.
models=$work/models
mkdir -p "$models"
export UM_TEST_DATA=$here/tests/data OMP_NUM_THREADS=$(nproc)
bench=(bench --device cuda --no-sgemm --head choose --passes "$passes")
gbench=(bench --device cuda --no-sgemm "${gen[@]}")
peer=(env PYTHONUNBUFFERED=1 "$py" "$here/tests/tools/gpu-peer-torch.py")
pdev=cuda
[ "$rehearse" = 1 ] && pdev=cpu

# ---- 3. the small models (the launch-bound goals), made here ----
step make_small 60 run um-make-model --out "$models/dream" "${small_dream[@]}" --gguf Q8_0 --gguf-only \
  && step ours_dream 40 run unmask-cli "${bench[@]}" --model "$models/dream-Q8_0.gguf" --canvas "$small_canvas" \
       --passes $((passes * 10))
step make_small_moe 60 run um-make-model --out "$models/moe" "${small_moe[@]}" --gguf Q8_0 --gguf-only \
  && step ours_moe 40 run unmask-cli "${bench[@]}" --model "$models/moe-Q8_0.gguf" --canvas "$small_canvas" \
       --passes $((passes * 10))

# ---- 4. the big shape (16 GB of bf16 does not travel): ours, then PyTorch
#         on the same GPU and folder, per forward and end to end ----
if step make_big 240 run um-make-model --out "$models/big" "${big[@]}" --dtype bf16; then
  step ours_forward 90 run unmask-cli "${bench[@]}" --model "$models/big" --canvas "$canvases"
  step torch_forward 90 "${peer[@]}" forward --model "$models/big" --device "$pdev" --canvas "$canvases" \
    --passes "$passes"
  step ours_generate 120 run unmask-cli "${gbench[@]}" --model "$models/big"
  [ -s "$work/ours_generate.json" ] && step torch_generate 120 "${peer[@]}" generate --model "$models/big" \
    --device "$pdev" --ours "$work/ours_generate.json"
  step ours_generate_dual 90 run unmask-cli "${gbench[@]}" --model "$models/big" --cache dual --threshold 0.9
fi

# ---- 5. parity on the GPU: the kernels, every op, every family ----
if [ "$rehearse" = 1 ]; then
  step selftest 5 run cuda-emu-kernels
  step engine_tests 60 run test-gpu-engine-emu
else
  step selftest 20 run um-cuda-selftest
  step backend_ops 60 run test-backend-ops
  step family_gpu_cpu 60 run test-family-gpu-cpu
  export UM_TEST_BACKEND=cuda
  step family_forward 60 run test-family-forward-gpu
  unset UM_TEST_BACKEND
  step engine_tests 60 run test-gpu-engine
fi

# The host→device bus, as the streaming modes see it (issue 30).
step bandwidth 30 "${peer[@]}" bandwidth --device "$pdev" --mib $([ "$rehearse" = 1 ] && echo 64 || echo 2048)

# ---- 6. where the time goes: the kernel profile (graphs off) ----
[ -d "$models/big" ] && step ours_profile 90 run unmask-cli "${bench[@]}" --model "$models/big" \
  --canvas "${canvases##*,}" --profile
[ -f "$models/dream-Q8_0.gguf" ] && step ours_dream_profile 40 run unmask-cli "${bench[@]}" \
  --model "$models/dream-Q8_0.gguf" --canvas "$small_canvas" --profile
[ -f "$models/moe-Q8_0.gguf" ] && step ours_moe_profile 40 run unmask-cli "${bench[@]}" \
  --model "$models/moe-Q8_0.gguf" --canvas "$small_canvas" --profile

# ---- 7. the peer checked against us: a tiny f32 LLaDA, both in fp32 (our
#         exact paths: fp32 products and attention) ----
check_ids=3,17,99,508,508,508,42,7,508,250
step make_check 30 run um-make-model --out "$models/check" --shape tiny --family llada --dtype f32 \
  && step ours_check 30 env UNMASK_CUDA_EXACT_PRODUCTS=1 UNMASK_CUDA_EXACT_ATTENTION=1 "$run" unmask-cli logits \
       --model "$models/check" --ids "$check_ids" --device cuda \
  && step torch_check 60 "${peer[@]}" logits --model "$models/check" --device "$pdev" --dtype f32 --ids "$check_ids"

# ---- 8. the quantized files of the big shape, if time is left ----
for q in ${quant//,/ }; do
  [ -d "$models/big" ] || break
  step "quantize_$q" 150 run unmask-cli quantize --model "$models/big" --type "$q" --out "$models/big-$q.gguf" \
    && step "ours_forward_$q" 60 run unmask-cli "${bench[@]}" --model "$models/big-$q.gguf" --canvas "$canvases"
  rm -f "$models/big-$q.gguf"
done

# ---- 9. results: one JSON, one table ----
for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
pids=()
for k in "${!outcome[@]}"; do echo "$k=${outcome[$k]}"; done > "$work/outcomes.txt"
"${py}" - "$work" "$out" "$rehearse" "$(( $(date +%s) - start ))" <<'EOF' 2>> "$log" || cp "$log" "$out/table.txt"
import csv, glob, json, os, sys
work, out, rehearse, elapsed = sys.argv[1], sys.argv[2], sys.argv[3] == "1", int(sys.argv[4])

def load(name):
    """A step's output: its JSON, else the end of its text (a test's report)."""
    try:
        with open(os.path.join(work, name + ".json")) as f:
            text = f.read()
    except Exception:
        return None
    try:
        return json.loads(text)
    except Exception:
        return {"output_tail": text[-3000:]}

res = {"rehearsal": rehearse, "seconds": elapsed, "steps": {}}
with open(os.path.join(work, "outcomes.txt")) as f:
    for line in f:
        k, _, v = line.strip().partition("=")
        res["steps"][k] = v
try:
    with open(os.path.join(work, "gpu.csv")) as f:
        res["gpu"] = list(csv.DictReader(f))
except Exception:
    pass
try:
    res["devices"] = open(os.path.join(work, "devices.txt")).read()
except Exception:
    pass
for p in glob.glob(os.path.join(work, "*.json")):
    name = os.path.basename(p)[:-5]
    res[name] = load(name)
oc, tc = res.get("ours_check"), res.get("torch_check")
if oc and tc and "logits" in oc and "logits" in tc:
    worst = 0.0
    for a, b in zip(tc["logits"], oc["logits"]):
        b = b["values"] if isinstance(b, dict) else b
        worst = max([worst] + [abs(x - y) / (1 + abs(y)) for x, y in zip(a, b)])
    res["peer_check"] = {"max_rel_error": worst, "rows": len(tc["logits"])}
    del tc["logits"], oc["logits"]
with open(os.path.join(out, "results.json"), "w") as f:
    json.dump(res, f, indent=1)

rows = []
def canv(d):
    if not d:
        return {}
    if "canvases" in d:
        return {c["canvas"]: c for c in d["canvases"]}
    if "canvas" in d:
        return {d["canvas"]: d}
    return {}
ours, theirs = canv(res.get("ours_forward")), {}
tf = res.get("torch_forward")
if tf:
    theirs = {r["canvas"]: r for r in tf.get("forward", [])}
lines = []
of = res.get("ours_forward") or {}
big = "LLaDA %sL d%s" % (of.get("n_layers", "?"), of.get("d_model", "?"))
g = (res.get("gpu") or [{}])[0]
lines.append("device: %s, driver %s%s" % (g.get("name", "?"), g.get(" driver_version", g.get("driver_version", "?")),
                                          " (REHEARSAL on the host emulation: no figure here is a GPU's)" if rehearse else ""))
lines.append("%-34s %12s %12s %8s" % ("per forward (canvas)", "ours s", "PyTorch s", "ratio"))
for c in sorted(set(ours) | set(theirs)):
    o = ours.get(c, {}).get("seconds_per_forward")
    t = theirs.get(c, {}).get("seconds_per_forward")
    ratio = "%.2f" % (t / o) if o and t else "-"
    lines.append("%-34s %12s %12s %8s" % ("%s bf16, %d" % (big, c), "%.5f" % o if o else "-",
                                          "%.5f" % t if t else "-", ratio))
for q in ("Q8_0", "Q4_K_M"):
    for c, d in sorted(canv(res.get("ours_forward_" + q)).items()):
        lines.append("%-34s %12.5f %12s %8s" % ("%s %s, %d" % (big, q, c), d["seconds_per_forward"], "-", "-"))
for name, label in (("ours_dream", "Dream"), ("ours_moe", "LLaDA-MoE")):
    d = res.get(name)
    if d:
        lines.append("%-34s %12.5f %12s %8s" % ("%s %.0fM Q8_0, %d" % (label, d.get("parameters", 0) / 1e6, d["canvas"]),
                                                d["seconds_per_forward"], "-", "-"))
og, tg, od = res.get("ours_generate"), res.get("torch_generate"), res.get("ours_generate_dual")
if og or tg:
    lines.append("%-34s %12s %12s %8s" % ("generation (tokens/s)", "ours", "PyTorch", "ratio"))
    o = og and og.get("tokens_per_second")
    t = tg and tg.get("tokens_per_second")
    lines.append("%-34s %12s %12s %8s" % ("exact, gen %s" % (og or tg).get("gen_length"), "%.2f" % o if o else "-",
                                          "%.2f" % t if t else "-", "%.2f" % (o / t) if o and t else "-"))
    if od:
        d = od.get("tokens_per_second")
        lines.append("%-34s %12s %12s %8s" % ("dual cache, threshold 0.9", "%.2f" % d if d else "-", "-",
                                              "%.2fx ours" % (d / o) if d and o else "-"))
    if tg:
        lines.append("ids equal to ours: %s of %s (first difference at %s)" % (tg.get("ids_equal_to_ours"),
                     tg.get("ids_compared"), tg.get("first_difference")))
for name in ("ours_profile", "ours_dream_profile", "ours_moe_profile"):
    d = res.get(name)
    prof = d and (d.get("profile") or (d.get("canvases") or [{}])[-1].get("profile"))
    if prof:
        fam = prof["families"]
        lines.append("profile %s (canvas %s): " % (name[5:], d.get("canvas")) + ", ".join(
            "%s %.1f%%" % (k, 100 * v["share"]) for k, v in sorted(fam.items(), key=lambda kv: -kv[1]["share"])
            if v["share"] >= 0.005))
bw = res.get("bandwidth")
if bw and "pinned_gb_per_s" in bw:
    lines.append("host to device: %.1f GB/s pinned, %.1f GB/s pageable (%d MiB copies)" %
                 (bw["pinned_gb_per_s"], bw["pageable_gb_per_s"], bw["bytes"] >> 20))
if "peer_check" in res:
    lines.append("PyTorch peer against ours, tiny LLaDA in fp32: max relative error %.2g" %
                 res["peer_check"]["max_rel_error"])
lines.append("parity: " + ", ".join("%s %s" % (k, res["steps"].get(k, "-")) for k in
             ("selftest", "backend_ops", "family_gpu_cpu", "family_forward", "engine_tests") if k in res["steps"]))
lines.append("steps: " + "; ".join("%s %s" % kv for kv in sorted(res["steps"].items())))
with open(os.path.join(out, "table.txt"), "w") as f:
    f.write("\n".join(lines) + "\n")
print("\n".join(lines))
EOF
say "finished in $(( $(date +%s) - start ))s; results in $out"
