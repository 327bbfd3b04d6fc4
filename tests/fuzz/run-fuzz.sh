#!/usr/bin/env bash
# Builds the libFuzzer targets of the file parsers with clang (ASan + UBSan)
# and runs each for a bounded time, seeded with the fixtures, the malformed
# corpus and tests/fuzz/seeds-json. Usage: tests/fuzz/run-fuzz.sh [SECONDS_PER_TARGET] [OUTDIR]
set -euo pipefail
cd "$(dirname "$0")/../.."
seconds=${1:-30}
out=${2:-build-fuzz}
mkdir -p "$out"

flags=(-g -O1 -std=c11 -D_GNU_SOURCE -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined
       -Ibackend -Ibackend/formats)
libs=$(pkg-config --cflags --libs glib-2.0 gio-2.0 json-glib-1.0)
common=(backend/um-error.c backend/formats/um-dtype.c backend/formats/um-tensor-table.c backend/formats/um-json.c)
tokenizer=(backend/formats/um-tokenizer.c backend/formats/um-tokenizer-json.c backend/formats/um-tokenizer-encode.c
           backend/formats/um-tokenizer-slow.c)
# What loading a model takes, with the reference forward pass.
model=(backend/formats/um-gguf.c backend/formats/um-safetensors.c "${tokenizer[@]}"
       backend/model/um-model.c backend/model/um-model-gguf.c backend/model/um-model-config.c
       backend/model/um-weight-names.c
       backend/model/um-chat-template.c backend/compute/um-ref-kernels.c backend/compute/um-quant-ref.c)

# The GGUF target also loads accepted files as models and runs the reference forward.
# shellcheck disable=SC2086
clang "${flags[@]}" -Ibackend/model -Ibackend/compute "${common[@]}" "${model[@]}" \
  backend/formats/um-gguf-write.c tests/fuzz/fuzz-gguf.c $libs -lm -o "$out/fuzz-gguf"
# The safetensors target also loads files with Hugging Face names as a tiny model's weights.
# shellcheck disable=SC2086
clang "${flags[@]}" -Ibackend/model -Ibackend/compute "${common[@]}" "${model[@]}" \
  tests/fuzz/fuzz-safetensors.c $libs -lm -o "$out/fuzz-safetensors"
# shellcheck disable=SC2086
clang "${flags[@]}" -Ibackend/model "${common[@]}" backend/model/um-model-config.c \
  backend/model/um-weight-names.c "${tokenizer[@]}" tests/fuzz/fuzz-json.c $libs -lm -o "$out/fuzz-json"

seed_gguf="$out/seed-gguf"; seed_st="$out/seed-safetensors"; seed_json="$out/seed-json"
mkdir -p "$seed_gguf" "$seed_st" "$seed_json" "$out/corpus-gguf" "$out/corpus-safetensors" "$out/corpus-json"
cp tests/data/*.gguf tests/data/malformed/*.gguf "$seed_gguf/"
cp tests/data/tiny-llada/model.safetensors "$seed_st/tiny.safetensors"
cp tests/data/small-kquant/model.safetensors "$seed_st/small.safetensors"
# Dream (q/k/v biases), LLaDA-MoE and RND1 (routers, one tensor per expert, QK-norm).
for m in tiny-dream tiny-llada-moe tiny-rnd1; do
  cp "tests/data/$m/model.safetensors" "$seed_st/$m.safetensors"
done
cp tests/fuzz/seeds-json/* "$seed_json/"
for f in config.json generation_config.json tokenizer.json tokenizer_config.json; do
  cp "tests/data/tiny-llada/$f" "$seed_json/tiny-$f"
done
# The other families' config.json keys (Qwen2, OLMoE-like and Qwen3-MoE names).
for m in tiny-dream tiny-llada-moe tiny-rnd1; do
  for f in config.json generation_config.json; do
    cp "tests/data/$m/$f" "$seed_json/$m-$f"
  done
done
# The nesting that crashed json-glib (too big to keep in the repository).
head -c 200000 /dev/zero | tr '\0' '[' > "$seed_json/deep-200000"

export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
"$out/fuzz-gguf" -max_total_time="$seconds" -max_len=700000 -rss_limit_mb=2048 -print_final_stats=1 \
  -artifact_prefix="$out/" "$out/corpus-gguf" "$seed_gguf" 2>&1 | grep -E "stat::number_of_executed_units|stat::peak_rss|ERROR|Done" || true
"$out/fuzz-safetensors" -max_total_time="$seconds" -max_len=700000 -rss_limit_mb=2048 -print_final_stats=1 \
  -artifact_prefix="$out/" "$out/corpus-safetensors" "$seed_st" 2>&1 | grep -E "stat::number_of_executed_units|stat::peak_rss|ERROR|Done" || true
"$out/fuzz-json" -max_total_time="$seconds" -max_len=262144 -rss_limit_mb=2048 -print_final_stats=1 \
  -artifact_prefix="$out/" "$out/corpus-json" "$seed_json" 2>&1 | grep -E "stat::number_of_executed_units|stat::peak_rss|ERROR|Done" || true
# A crash leaves crash-*/leak-*/timeout-* files: fail the run then.
if compgen -G "$out/crash-*" >/dev/null || compgen -G "$out/leak-*" >/dev/null \
   || compgen -G "$out/timeout-*" >/dev/null || compgen -G "$out/oom-*" >/dev/null; then
  echo "fuzzing found a failure; inputs kept in $out:"
  ls "$out"/crash-* "$out"/leak-* "$out"/timeout-* "$out"/oom-* 2>/dev/null
  exit 1
fi
echo "fuzzing: no failures"
