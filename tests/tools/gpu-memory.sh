#!/bin/bash
# gpu-memory.sh — the memory modes on a GPU as one command, for the device
# machine (docs/gpu.md, issue 30): the 32-layer LLaDA-8B shape (bf16 folder
# and our Q4_K_M GGUF) in every mode at budgets standing in for 8, 4 and
# 2 GB cards, with and without --zstd; planned against measured device peak
# (the backend's accounting, cudaMemGetInfo's fall, NVML's per-process
# figure, nvidia-smi's per-process samples), per forward time, bytes
# streamed, the bound max (compute, bytes / bandwidth) and the ratio to it;
# resident against streamed token ids; the MoE shapes with experts off the
# device; `unmask-cli optimize` at each budget; a process holding the GPU's
# memory (an allocation failure must be a clear error, never a crash); the
# PyTorch offload peer and llama.cpp's llama-diffusion-cli (if carried)
# beside ours. Stops itself within --time-limit; steps that would not fit
# are skipped and say so.
#
#   bash tests/tools/gpu-memory.sh [--bundle FILE] [--out DIR] [--time-limit S] [--rehearse] [--python PY]
#
# --bundle FILE   default .gpu-run/bundle.tar.xz (.gpu-run/rehearse.tar.xz with --rehearse)
# --out DIR       default $OUT (the device tool's), else ./gpu-memory-out
# --time-limit S  seconds for the whole run, default 540
# --rehearse      here, without a GPU: the CUDA emulation's bundle
#                 (gpu-pack.sh --emulation), tiny shapes and budgets scaled
#                 to them, the held memory emulated (UM_EMU_DEVICE_HELD,
#                 UM_EMU_FAIL_AFTER), PyTorch on the CPU
# --python PY     the Python with torch (default python3; /usr/bin/python3
#                 when rehearsing)
#
# Files written: results.json, table.txt, log.txt, apps.csv (nvidia-smi
# --query-compute-apps every 0.2 s, each line tagged with the step running).
set -uo pipefail

tool=gpu-memory help_lines=2,28p reserve=25 step_log_tail=5
. "$(dirname "$0")/gpu-run-lib.sh"

# ---- the device, and each process's memory sampled while we run ----
if [ "$rehearse" = 0 ] && command -v nvidia-smi > /dev/null; then
  nvidia-smi --query-gpu=name,driver_version,memory.total,pcie.link.gen.max,pcie.link.width.max \
    --format=csv > "$work/gpu.csv" 2>> "$log"
  ( while :; do s=$(cat "$work/current" 2>/dev/null); \
      nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader,nounits 2>/dev/null \
        | sed "s/^/$(date +%s.%N),$s,/"; sleep 0.2; done ) > "$out/apps.csv" 2>> "$log" &
  pids+=($!)
else
  echo "name,driver_version,memory.total" > "$work/gpu.csv"
  echo "host emulation (rehearsal),none,0" >> "$work/gpu.csv"
  : > "$out/apps.csv"
fi

# ---- the shapes and budgets of this run ----
if [ "$rehearse" = 1 ]; then
  big=(--shape tiny --family llada --layers 4)
  moe=(--shape tiny --family llada-moe --layers 4)
  moe2=()
  canvas=24
  passes=2
  # The plan counts a GPU backend's own share as 600 MiB: budgets just
  # above it leave the tiny model's weights as the cards' budgets leave
  # an 8B's. Two slots stream, whatever fits.
  budgets="900MiB 700MiB 650MiB"
  moe_budget=700MiB
  moe2_budget=700MiB
  slots=(--resident-layers 2)
  gen=(--prompt-length 8 --gen-length 16 --block-length 8 --steps 16)
  held_env=(env UM_EMU_DEVICE_HELD=$(( (16 << 30) - (64 << 20) )))
  pdev=cpu
  peer_budget=0.001
else
  big=(--shape llada-8b)
  moe=(--shape llada-moe-7b)
  moe2=(--shape llada2-mini)
  canvas=96
  passes=3
  budgets="8GiB 4GiB 2GiB"
  moe_budget=2GiB
  moe2_budget=4GiB
  slots=()
  gen=(--prompt-length 32 --gen-length 32 --block-length 32 --steps 32)
  held_env=()
  pdev=cuda
  peer_budget=2
fi
models=$work/models
mkdir -p "$models"
export UM_TEST_DATA=$here/tests/data OMP_NUM_THREADS=$(nproc) XDG_CACHE_HOME=$work/cache UNMASK_CONFIG_DIR=$work/config
mkdir -p "$work/cache" "$work/config"
bench=(bench --device cuda --no-sgemm --head choose --passes "$passes" --canvas "$canvas")
modes="standard standard-8bit extreme-mild extreme-moderate extreme-aggressive"
"$run" unmask-cli devices > "$work/devices.txt" 2>> "$log"

# mode_runs MODEL TAG: plan at each budget, then bench every mode that
# fits (the plan says; one that does not is recorded from the plan), the
# streaming one also with --zstd.
mode_runs ()
{
  local model=$1 tag=$2 b m
  for b in $budgets; do
    step "plan_${tag}_$b" 20 run unmask-cli plan --model "$model" --device cuda --budget "$b" --json \
      --prompt-length "$((canvas / 2))" --gen-length "$((canvas / 2))" --block-length "$((canvas / 2))"
    for m in $modes; do
      if ! "$py" - "$work/plan_${tag}_$b.json" "$m" <<'EOF' 2>/dev/null; then
import json, sys
plans = json.load(open(sys.argv[1]))
plans = plans.get("modes", plans) if isinstance(plans, dict) else plans
sys.exit(0 if any(p.get("mode") == sys.argv[2] and p.get("fits") for p in plans) else 1)
EOF
        outcome[${tag}_${m}_$b]="does not fit (plan)"
        continue
      fi
      local extra=()
      [ "$m" = extreme-aggressive ] && extra=("${slots[@]}")
      step "${tag}_${m}_$b" 45 run unmask-cli "${bench[@]}" --model "$model" --mode "$m" --budget "$b" "${extra[@]}"
      [ "$m" = extreme-aggressive ] && step "${tag}_${m}_zstd_$b" 45 run unmask-cli "${bench[@]}" --model "$model" \
        --mode "$m" --budget "$b" --zstd "${extra[@]}"
    done
  done
}

# ---- 1. the 8B shape: our Q4_K_M GGUF first (it travels least), then the
#         bf16 folder (the modes convert it once, into the cache) ----
if step make_big 240 run um-make-model --out "$models/big" "${big[@]}" --dtype bf16 --gguf Q4_K_M; then
  q4=$models/big-Q4_K_M.gguf
  # The host→device bus, measured apart (the streaming bound uses the
  # one each run measures at load, on its own buffers).
  step bandwidth 30 env PYTHONUNBUFFERED=1 "$py" "$here/tests/tools/gpu-peer-torch.py" bandwidth --device "$pdev" \
    --mib $([ "$rehearse" = 1 ] && echo 64 || echo 2048)
  mode_runs "$q4" q4
  # Resident against streamed: the same ids (lossless streaming).
  step ids_resident 60 run unmask-cli generate --model "$q4" --device cuda --mode extreme-moderate \
    --budget "${budgets%% *}" --prompt "The capital of France is" --json "${gen[@]:2}"
  step ids_streamed 60 run unmask-cli generate --model "$q4" --device cuda --mode extreme-aggressive \
    --budget "${budgets##* }" "${slots[@]}" --prompt "The capital of France is" --json "${gen[@]:2}"
  step ids_streamed_zstd 60 run unmask-cli generate --model "$q4" --device cuda --mode extreme-aggressive \
    --budget "${budgets##* }" "${slots[@]}" --zstd --prompt "The capital of France is" --json "${gen[@]:2}"
  # What the one-click optimizer picks at each budget, then that choice run.
  for b in $budgets; do
    step "optimize_$b" 30 run unmask-cli optimize --model "$q4" --device cuda --budget "$b" --json --dry-run \
      --gen-length 64 --block-length 32 --prompt-length 32 || continue
    m=$("$py" -c 'import json, sys; print(json.load(open(sys.argv[1]))["chosen_mode"])' "$work/optimize_$b.json" \
        2>/dev/null) || continue
    step "optimized_${m}_$b" 45 run unmask-cli "${bench[@]}" --model "$q4" --mode "$m" --budget "$b"
  done
  # Another program holds the GPU: before the load (the plan against the
  # free memory) and during it (memory taken after the plan).
  if [ "$rehearse" = 1 ]; then
    step held_before_load 30 "${held_env[@]}" "$run" unmask-cli "${bench[@]}" --model "$q4" --mode extreme-aggressive \
      --budget "${budgets##* }"
    # The device grants what the same run took before less half its
    # weights: the rest "taken by another program" after the plan, while
    # the weights load.
    need=$("$py" -c 'import json, sys; m = json.load(open(sys.argv[1]))["measured"]; print(m["device_used_delta_peak_bytes"] - m["device_weight_bytes"] // 2)' \
           "$work/q4_extreme-moderate_${budgets%% *}.json" 2>/dev/null || echo $((32 << 20)))
    step held_after_plan 30 env UM_EMU_FAIL_AFTER="$need" "$run" unmask-cli "${bench[@]}" --model "$q4" \
      --mode extreme-moderate --budget "${budgets%% *}"
  else
    # A holder leaving ~1 GiB free, for as long as the step runs.
    "$py" -c 'import torch, time, sys
f, t = torch.cuda.mem_get_info()
x = torch.empty(max(f - (1 << 30), 1), dtype=torch.uint8, device="cuda")
print("holding", x.numel(), flush=True)
time.sleep(float(sys.argv[1]))' 60 > "$work/holder.txt" 2>> "$log" &
    holder=$!
    pids+=($holder)
    sleep 8
    step held_before_load 30 run unmask-cli "${bench[@]}" --model "$q4" --mode extreme-aggressive --budget 2GiB
    kill "$holder" 2>/dev/null
  fi
  # The bf16 folder: every mode converts (once) from it.
  mode_runs "$models/big" bf16
  # The peer: PyTorch with the weights offloaded to host memory.
  step torch_offload 90 env PYTHONUNBUFFERED=1 "$py" "$here/tests/tools/gpu-peer-torch.py" offload \
    --model "$models/big" --device "$pdev" --canvas "$canvas" --passes "$passes" --max-memory-gib "$peer_budget"
  # llama.cpp's diffusion example with as many layers as fit (if carried).
  if [ -x "$work/um/bin/llama-diffusion-cli" ]; then
    step llamacpp_ngl 90 env LD_LIBRARY_PATH="$work/um/lib" "$work/um/bin/llama-diffusion-cli" -m "$q4" \
      -p "The capital of France is" -n 64 --diffusion-steps 64 -ngl 8
  else
    outcome[llamacpp_ngl]="not carried (no llama-diffusion-cli in the bundle)"
  fi
  rm -rf "$models/big" "$work/cache"
  mkdir -p "$work/cache"
fi

# ---- 2. the MoE shapes with experts off the device ----
if step make_moe 240 run um-make-model --out "$models/moe" "${moe[@]}" --gguf Q4_K_M --gguf-only; then
  for x in fetch host; do
    step "moe_${x}_$moe_budget" 60 run unmask-cli "${bench[@]}" --model "$models/moe-Q4_K_M.gguf" --mode standard \
      --budget "$moe_budget" --experts "$x"
  done
  step "plan_moe_$moe_budget" 20 run unmask-cli plan --model "$models/moe-Q4_K_M.gguf" --device cuda \
    --budget "$moe_budget" --json
  rm -f "$models/moe-Q4_K_M.gguf"
fi
if [ "${#moe2[@]}" -gt 0 ] && step make_moe2 300 run um-make-model --out "$models/moe2" "${moe2[@]}" --gguf Q4_K_M \
     --gguf-only; then
  step "moe2_fetch_$moe2_budget" 60 run unmask-cli "${bench[@]}" --model "$models/moe2-Q4_K_M.gguf" --mode standard \
    --budget "$moe2_budget" --experts fetch
  rm -f "$models/moe2-Q4_K_M.gguf"
elif [ "${#moe2[@]}" -eq 0 ]; then
  outcome[make_moe2]="not in the rehearsal (no tiny LLaDA 2.0-mini shape with Q4_K_M rows)"
fi

# ---- 3. results ----
for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
pids=()
for k in "${!outcome[@]}"; do echo "$k=${outcome[$k]}"; done > "$work/outcomes.txt"
"$py" "$here/tests/tools/gpu-memory-table.py" "$work" "$out" "$rehearse" "$(( $(date +%s) - start ))" 2>> "$log" \
  || cp "$log" "$out/table.txt"
say "finished in $(( $(date +%s) - start ))s; results in $out"
