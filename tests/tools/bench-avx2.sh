#!/bin/bash
# Issue 31's table in one run: unmask at AVX2 (UM_CPU_ISA=avx2) against llama.cpp built for AVX2 only,
# then the native pair, side by side, for the LLaDA, Dream and LLaDA-MoE shapes at F16, Q8_0, Q4_0 and
# Q4_K_M.
#
#   tests/tools/bench-avx2.sh DIR
#
# DIR keeps the GGUFs, made on first use: {llada,dream,moe}-f16.gguf by tests/tools/make-bench-gguf.py
# (random weights of the families' layouts, 134M / 122M / 115M parameters), then Q8_0, Q4_0 and Q4_K_M by
# the AVX2 peer's llama-quantize, so both engines read the same files.
# Environment:
#   UNMASK_CLI        unmask-cli for the native rows (default build-ci/app/unmask-cli)
#   UNMASK_CLI_AVX2   unmask-cli for the AVX2 rows (default build-port/app/unmask-cli if it exists, else
#                     UNMASK_CLI): build it with -Dnative=false, or on an AVX-512 machine the compiler may
#                     put AVX-512 instructions (32 registers) into the AVX2 code paths
#   UNMASK_BEFORE     optional older unmask-cli: a native "before" column
#   LLAMACPP_AVX2     llama.cpp built with LLAMA_ISA=avx2 (default ../peers/llama.cpp-avx2)
#   LLAMACPP          llama.cpp native (default ../peers/llama.cpp; its columns say "-" when absent)
#   THREADS (2), PASSES (10: forwards per unmask run, steps per llama.cpp run), REPS (3: runs per cell)
#   GEN=1             two more AVX2 columns: unmask generating (bench --prompt-length 6 --gen-length 90
#                     --steps PASSES, one block), the job llama-diffusion-cli's runs do, where only the
#                     masked rows' logits are computed (llama.cpp computes all 96 in every step), and its
#                     ratio; wall clock only
#   MEASURE=cpu       cells in CPU time instead (user + sys, from /usr/bin/time): a run of PASSES + 1
#                     forwards (steps) less a run of 1, over PASSES; with THREADS=1 that is each
#                     engine's own cost per step, which time slices lost to other processes on a shared
#                     machine do not change (spinning threads would count, hence one thread)
# Each cell: milliseconds per step over a 96-token canvas with every row's logits, the median of REPS
# runs: unmask `bench --canvas 96 --passes PASSES --no-sgemm` (seconds_per_forward, the model loaded
# once per run), llama-diffusion-cli -ub 96 with PASSES diffusion steps ("time per step": its
# diffusion loop's total over the steps, loading excluded), as tests/tools/bench-vs-llamacpp.sh and
# bench-busy.sh time them. Ratio: llama.cpp / unmask (above 1: unmask is faster). Runs alternate
# between the engines, cell by cell, so that load on a shared machine hits both alike.
# OPENBLAS_CORETYPE is unset: each library picks its own kernels.
set -u
unset OPENBLAS_CORETYPE
D=${1:?usage: bench-avx2.sh DIR}
U=${UNMASK_CLI:-build-ci/app/unmask-cli}
if [ -z "${UNMASK_CLI_AVX2:-}" ] && [ -x build-port/app/unmask-cli ]; then UA=build-port/app/unmask-cli; else UA=${UNMASK_CLI_AVX2:-$U}; fi
OLD=${UNMASK_BEFORE:-}
BA=${LLAMACPP_AVX2:-../peers/llama.cpp-avx2}/build/bin
BN=${LLAMACPP:-../peers/llama.cpp}/build/bin
T=${THREADS:-2}; P=${PASSES:-10}; R=${REPS:-3}
mkdir -p "$D"

MEASURE=${MEASURE:-wall}
cpu_s () { # command...: user + sys seconds of it
  /usr/bin/time -f "%U %S" "$@" 2>&1 >/dev/null | tail -1 | /usr/bin/python3 -c 'import sys; u, s = sys.stdin.read().split()[-2:]; print(float(u) + float(s))' 2>/dev/null || echo err
}
cpu_ms () { # seconds-of-(P+1) seconds-of-1
  /usr/bin/python3 -c 'import sys; a, b = sys.argv[1:]; print("%.1f" % (1000 * (float(a) - float(b)) / '$P'))' "$1" "$2" 2>/dev/null || echo err
}
median () { /usr/bin/python3 -c 'import sys, statistics; v = [float(x) for x in sys.argv[1:] if x not in ("", "err")]; print("%.0f" % statistics.median(v) if v else "-")' "$@"; }
forward_ms () { # bench's JSON on stdin: milliseconds per forward
  /usr/bin/python3 -c 'import json,sys; print("%.1f" % (1000 * json.load(sys.stdin)["seconds_per_forward"]))' 2>/dev/null || echo err
}
um_ms () { # binary isa model
  if [ "$MEASURE" = cpu ]; then
    cpu_ms "$(cpu_s env ${2:+UM_CPU_ISA=$2} "$1" bench -m "$3" --canvas 96 --passes $((P + 1)) --no-sgemm --threads $T)" \
           "$(cpu_s env ${2:+UM_CPU_ISA=$2} "$1" bench -m "$3" --canvas 96 --passes 1 --no-sgemm --threads $T)"
    return
  fi
  env ${2:+UM_CPU_ISA=$2} "$1" bench -m "$3" --canvas 96 --passes $P --no-sgemm --threads $T 2>/dev/null | forward_ms
}
um_gen_ms () { # binary isa model: a generation's mean time per step
  local blk=""
  case "$3" in *llada-*|*moe-*) blk="--block-length 90";; esac
  env ${2:+UM_CPU_ISA=$2} "$1" bench -m "$3" --prompt-length 6 --gen-length 90 --steps $P $blk --no-sgemm --threads $T \
    2>/dev/null | forward_ms
}
llama_ms () { # bin-folder model
  [ -x "$1/llama-diffusion-cli" ] || { echo ""; return; }
  if [ "$MEASURE" = cpu ]; then
    local run=(env LD_LIBRARY_PATH=$1 "$1/llama-diffusion-cli" -m "$2" -p "Hello" -ub 96 -c 96 -n 90 --diffusion-eps 0.001
               --diffusion-algorithm 4 --top-k 1 -t $T)
    cpu_ms "$(cpu_s "${run[@]}" --diffusion-steps $((P + 1)))" "$(cpu_s "${run[@]}" --diffusion-steps 1)"
    return
  fi
  LD_LIBRARY_PATH=$1 "$1/llama-diffusion-cli" -m "$2" -p "Hello" -ub 96 -c 96 -n 90 --diffusion-steps $P \
    --diffusion-eps 0.001 --diffusion-algorithm 4 --top-k 1 -t $T 2>&1 | grep -ao "time per step: [0-9.]*" \
    | head -1 | grep -o "[0-9.]*$" || echo err
}
ratio () { /usr/bin/python3 -c 'import sys; a, b = sys.argv[1:]; print("%.2f" % (float(b) / float(a)) if "-" not in (a, b) else "-")' "$1" "$2"; }

# The files.
for arch in llada dream moe; do
  f16=$D/$arch-f16.gguf
  [ -f "$f16" ] || LLAMACPP=${BA%/build/bin} /usr/bin/python3 tests/tools/make-bench-gguf.py \
      "$([ $arch = moe ] && echo llada-moe || echo $arch)" "$f16" >/dev/null
  for t in q8_0 q4_0 q4_k_m; do
    [ -f "$D/$arch-$t.gguf" ] || LD_LIBRARY_PATH=$BA "$BA/llama-quantize" "$f16" "$D/$arch-$t.gguf" "${t^^}" >/dev/null 2>&1 \
      || "$U" quantize -m "$f16" -t "${t^^}" -o "$D/$arch-$t.gguf" >/dev/null 2>&1
  done
done

info () { env ${2:+UM_CPU_ISA=$2} "$1" bench -m "$D/llada-q4_0.gguf" --canvas 8 --passes 1 --no-sgemm 2>/dev/null \
  | /usr/bin/python3 -c 'import json,sys; d=json.load(sys.stdin); print("level %s, products %s, openblas %s" % (d["cpu_isa"], d["matmul_path"], d["openblas"].get("corename", "?")))' 2>/dev/null; }
echo "# $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg); $T threads each; median of $R runs of $P steps; $([ "$MEASURE" = cpu ] && echo "CPU" || echo "wall") ms per step"
echo "# unmask AVX2: $UA ($(info "$UA" avx2)); native: $U ($(info "$U" ""))"
echo "# llama.cpp AVX2: $BA; native: $BN$([ -x "$BN/llama-diffusion-cli" ] || echo " (absent)")"
G=${GEN:-}; [ "$MEASURE" = cpu ] && G=""
printf "| model | unmask avx2 | llama.cpp avx2 | ratio |%s%s unmask native | llama.cpp native | ratio |\n" \
  "${G:+ unmask avx2 generating | ratio |}" "${OLD:+ before native |}"
printf "|---|---|---|---|%s%s---|---|---|\n" "${G:+---|---|}" "${OLD:+---|}"
for arch in llada dream moe; do
  for t in f16 q8_0 q4_0 q4_k_m; do
    f=$D/$arch-$t.gguf
    ua=(); la=(); un=(); ln=(); ob=(); ug=()
    for ((i = 0; i < R; i++)); do
      ua+=("$(um_ms "$UA" avx2 "$f")"); la+=("$(llama_ms "$BA" "$f")")
      [ -n "$G" ] && ug+=("$(um_gen_ms "$UA" avx2 "$f")")
      un+=("$(um_ms "$U" "" "$f")"); ln+=("$(llama_ms "$BN" "$f")")
      [ -n "$OLD" ] && ob+=("$(um_ms "$OLD" "" "$f")")
    done
    a=$(median "${ua[@]}"); b=$(median "${la[@]}"); c=$(median "${un[@]}"); d=$(median "${ln[@]}")
    old=""; [ -n "$OLD" ] && old=" $(median "${ob[@]}") |"
    gen=""; [ -n "$G" ] && { g=$(median "${ug[@]}"); gen=" $g (${ug[*]}) | $(ratio "$g" "$b") |"; }
    printf "| %s %s | %s (%s) | %s (%s) | %s |%s%s %s (%s) | %s (%s) | %s |\n" "$arch" "${t^^}" \
      "$a" "${ua[*]}" "$b" "${la[*]}" "$(ratio "$a" "$b")" "$gen" "$old" "$c" "${un[*]}" "$d" "${ln[*]}" "$(ratio "$c" "$d")"
  done
done
