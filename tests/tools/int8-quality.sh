#!/bin/bash
# What 8-bit activations cost, next to what the weights' quantization costs, on the demo model.
# usage: tests/tools/int8-quality.sh [OUTDIR]   (UNMASK_CLI: default build-ci/app/unmask-cli)
# For each type, the GGUF `unmask-cli quantize` makes from data/demo-model (kept in OUTDIR, default
# /tmp/unmask-int8-quality), then `unmask-cli compare` on windows of README.md (mean KL(reference ‖
# model) over all positions, arg-max agreement, largest logit difference):
#   weights  the GGUF with --exact against the F32 folder: what quantizing the weights costs;
#   8-bit    the GGUF (8-bit activations, the default) against itself with --exact;
#   both     the GGUF (default) against the F32 folder;
# and whole generations (greedy, 64 tokens in 64 steps, blocks of 32, 8 prompts): the share of generated
# ids two runs agree on, and how many of the 8 runs are identical: the GGUF with --exact against the F32
# folder (what the weights' quantization changes), and the GGUF's default against its --exact.
# The integer products give the same bits at every CPU level (AVX2, AVX-VNNI, AVX-512 VNNI), so the
# table does not depend on the machine (below AVX2 there are no 8-bit products: --exact is all there is).
set -eu
U=${UNMASK_CLI:-build-ci/app/unmask-cli}
D=${1:-/tmp/unmask-int8-quality}
SRC=data/demo-model
mkdir -p "$D"
kl () { /usr/bin/python3 -c 'import json,sys; d=json.load(sys.stdin); print("%.2e %.4f %.3f" % (d["mean_kl"], d["argmax_agreement"], d["max_abs_logit_diff"]))'; }
cmp_ () { "$U" compare -m "$1" -r "$2" --text-file README.md --sequences 16 --length 96 --threads 2 ${3:-} 2>/dev/null | kl; }
PROMPTS=("The history of the" "In the morning she" "He said that the" "A new study of" "The city council" \
         "When the war ended" "Music and dance" "The first thing to")
gen () { # model [--exact] -> ids of each prompt, one line each
  for p in "${PROMPTS[@]}"; do
    "$U" generate -m "$1" -p "$p" --gen-length 64 --steps 64 --block-length 32 --temperature 0 --threads 2 --json ${2:-} \
      2>/dev/null | /usr/bin/python3 -c 'import json,sys; print(" ".join(map(str, json.load(sys.stdin)["ids"])))'
  done
}
agree () { /usr/bin/python3 - "$1" "$2" <<'EOF'
import sys
a = [l.split() for l in open(sys.argv[1])]; b = [l.split() for l in open(sys.argv[2])]
same = sum(x == y for la, lb in zip(a, b) for x, y in zip(la, lb)); n = sum(len(la) for la in a)
print("%.3f %d/%d" % (same / n, sum(la == lb for la, lb in zip(a, b)), len(a)))
EOF
}
echo "# $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'); $("$U" bench -m $SRC --canvas 8 --passes 1 2>/dev/null | /usr/bin/python3 -c 'import json,sys; print("level", json.load(sys.stdin)["cpu_isa"])')"
gen $SRC --exact > "$D/gen-F32.txt"
printf "| type | weights: KL, arg-max, max diff | 8-bit: KL, arg-max, max diff | both: KL, arg-max, max diff | generations, weights: ids agreeing, runs identical | generations, 8-bit |\n"
printf "|---|---|---|---|---|---|\n"
for t in Q8_0 Q6_K Q5_K_M Q5_0 Q4_K_M Q4_0; do
  g=$D/demo-$t.gguf
  [ -f "$g" ] || "$U" quantize -m $SRC -t $t -o "$g" >/dev/null 2>&1
  w=$(cmp_ "$g" $SRC --exact); a=$(cmp_ "$g" "$g"); b=$(cmp_ "$g" $SRC)
  gen "$g" --exact > "$D/gen-$t-exact.txt"; gen "$g" > "$D/gen-$t-int8.txt"
  printf "| %s | %s | %s | %s | %s | %s |\n" $t "$w" "$a" "$b" "$(agree "$D/gen-F32.txt" "$D/gen-$t-exact.txt")" \
    "$(agree "$D/gen-$t-exact.txt" "$D/gen-$t-int8.txt")"
done
