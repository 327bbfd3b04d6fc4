#!/bin/bash
# Speed with other work on the CPU, side by side with llama.cpp, one run.
# usage: tests/tools/bench-busy.sh DIR   (DIR holds llada-f16.gguf and llada-q4_0.gguf:
#   tests/tools/make-bench-gguf.py llada DIR/llada-f16.gguf, then llama-quantize ... Q4_0)
# Environment: UNMASK_CLI (default build-ci/app/unmask-cli), UNMASK_BEFORE (optional: an older
# unmask-cli for a "before" column), LLAMACPP (llama.cpp tree built by shared/tools/build-llamacpp.sh).
# Each cell: ms per forward over a 96-token canvas with every row's logits (llama.cpp's diffusion
# example does that per step); unmask's own busy processes come from bench --background N, llama.cpp's
# from the same number of shell busy loops.  OPENBLAS_CORETYPE unset.
set -u
unset OPENBLAS_CORETYPE
D=${1:?model folder}
U=${UNMASK_CLI:-build-ci/app/unmask-cli}
OLD=${UNMASK_BEFORE:-}
B=${LLAMACPP:-../peers/llama.cpp}/build/bin
PASSES=${PASSES:-20}
ms () { /usr/bin/python3 -c 'import json,sys; d=json.load(sys.stdin); print("%.0f" % (1000*d["seconds_per_forward"]))' 2>/dev/null || echo err; }
busy_start () { pids=(); for ((i = 0; i < $1; i++)); do (while :; do :; done) & pids+=($!); done; }
busy_stop () { [ ${#pids[@]} -gt 0 ] && kill "${pids[@]}" 2>/dev/null; wait "${pids[@]}" 2>/dev/null; pids=(); }
# the default's cell also shows the thread count it had settled on
msd () { /usr/bin/python3 -c 'import json,sys; d=json.load(sys.stdin); print("%.0f (%d)" % (1000*d["seconds_per_forward"], d["threads_at_end"]))' 2>/dev/null || echo err; }
um () { # binary threads busy model
  local t=""; [ "$2" != default ] && t="--threads $2"
  "$1" bench -m "$4" --canvas 96 --passes $PASSES --no-sgemm $t --background $3 2>/dev/null | if [ "$2" = default ]; then msd; else ms; fi
}
um_old () { # the older binary has no --background: shell busy loops, as for llama.cpp
  busy_start $3
  "$1" bench -m "$4" --canvas 96 --passes $PASSES --no-sgemm --threads $2 2>/dev/null | ms
  busy_stop
}
llama () { # threads busy model
  local r
  busy_start $2
  r=$(LD_LIBRARY_PATH=$B $B/llama-diffusion-cli -m "$3" -p "Hello" -ub 96 -c 96 -n 90 --diffusion-steps $PASSES \
        --diffusion-eps 0.001 --diffusion-algorithm 4 --top-k 1 -t $1 2>&1 | grep -o "time per step: [0-9.]*" \
        | head -1 | grep -o "[0-9.]*$")
  busy_stop
  printf "%.0f\n" "${r:-0}"
}
echo "# $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) cores; $($U bench -m $D/llada-q4_0.gguf --canvas 8 --passes 1 --no-sgemm 2>/dev/null | /usr/bin/python3 -c 'import json,sys; d=json.load(sys.stdin); print("isa", d["cpu_isa"], "| openblas:", d["openblas"])')"
printf "| load | model |%s unmask default | unmask 2 threads | unmask 1 thread | llama.cpp 2 threads | llama.cpp 1 thread |\n" "${OLD:+ before: 2 threads | before: 1 thread |}"
printf "|---|---|%s---|---|---|---|---|\n" "${OLD:+---|---|}"
for m in f16 q4_0; do
  for busy in 0 1 2; do
    f=$D/llada-$m.gguf
    old=""; [ -n "$OLD" ] && old=" $(um_old $OLD 2 $busy $f) | $(um_old $OLD 1 $busy $f) |"
    printf "| %s | %s |%s %s | %s | %s | %s | %s |\n" "$([ $busy = 0 ] && echo quiet || echo "$busy busy")" "${m^^}" "$old" \
      "$(um $U default $busy $f)" "$(um $U 2 $busy $f)" "$(um $U 1 $busy $f)" "$(llama 2 $busy $f)" "$(llama 1 $busy $f)"
  done
done
