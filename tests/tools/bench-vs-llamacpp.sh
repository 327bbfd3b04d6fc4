#!/bin/bash
# Run in the folder holding {dream,moe}-{f16,q8_0,q4_k_m}.gguf (tests/tools/make-bench-gguf.py, then llama-quantize).
# Set UNMASK_CLI to the unmask-cli binary and LLAMACPP to the llama.cpp tree (shared/tools/build-llamacpp.sh).
# Side by side, one run, 2 threads each, OPENBLAS_CORETYPE unset:
#  canvas: unmask-cli bench --canvas 96 (every row's logits, the work llama.cpp does per step)
#  gen:    unmask-cli bench generating 90 tokens after a 6-token prompt in 90 steps (one token per
#          step, 96-token canvas; only the masked rows' logits)
#  llama:  llama-diffusion-cli -ub 96 (96-token canvas), 10 steps, time per step
unset OPENBLAS_CORETYPE
U=${UNMASK_CLI:-build-ci/app/unmask-cli}
B=${LLAMACPP:-../peers/llama.cpp}/build/bin
ms () { /usr/bin/python3 -c 'import json,sys; d=json.load(sys.stdin); print("%.1f" % (1000*d["seconds_per_forward"]))'; }
printf "%-14s %8s %8s %8s %8s | %8s %6s %6s %6s\n" model canvas gen int8can int8gen llama c/l g/l i8g/l
for m in dream-f16 dream-q8_0 dream-q4_k_m moe-f16 moe-q8_0 moe-q4_k_m; do
  case $m in moe*) blk="--block-length 90";; *) blk="";; esac
  c=$($U bench -m $m.gguf --canvas 96 --passes 10 --no-sgemm --threads 2 2>/dev/null | ms)
  g=$($U bench -m $m.gguf --prompt-length 6 --gen-length 90 --steps 90 $blk --no-sgemm --threads 2 2>/dev/null | ms)
  ic=-; ig=-
  case $m in *q8_0) ic=$($U bench -m $m.gguf --canvas 96 --passes 10 --no-sgemm --threads 2 --int8 2>/dev/null | ms)
                    ig=$($U bench -m $m.gguf --prompt-length 6 --gen-length 90 --steps 90 $blk --no-sgemm --threads 2 --int8 2>/dev/null | ms);; esac
  l=$(LD_LIBRARY_PATH=$B $B/llama-diffusion-cli -m $m.gguf -p "Hello" -ub 96 -c 96 -n 90 --diffusion-steps 10 --diffusion-eps 0.001 --diffusion-algorithm 4 --top-k 1 -t 2 2>&1 | grep -o "time per step: [0-9.]*" | head -1 | grep -o "[0-9.]*$")
  r () { [ "$1" = - ] && echo - || /usr/bin/python3 -c "print('%.2f' % ($l/$1))"; }
  printf "%-14s %8s %8s %8s %8s | %8s %6s %6s %6s\n" $m $c $g $ic $ig $l $(r $c) $(r $g) $(r $ig)
done
