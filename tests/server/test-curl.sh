#!/usr/bin/env bash
# The server's HTTP statuses with curl, one case each, against
# `unmask-cli serve --port 0` on the demo model (127.0.0.1 only; every
# request has a time limit), and the ids of a completion equal to
# `unmask-cli generate --json` with the same options.
# Usage: test-curl.sh UNMASK_CLI MODEL_DIR
set -euo pipefail
cli=$1
model=$2
command -v curl >/dev/null || { echo "curl is missing"; exit 77; }
tmp=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$tmp"; }
trap cleanup EXIT
fail=0
n=0

# start NAME ARGS...: a server; its URL in $url
start() {
  local name=$1; shift
  "$cli" serve --model "$model" --port 0 --threads 1 "$@" >"$tmp/$name.out" 2>"$tmp/$name.err" &
  pids+=($!)
  for _ in $(seq 1 300); do
    url=$(grep -o 'http://127\.0\.0\.1:[0-9]*' "$tmp/$name.out" 2>/dev/null | head -1 || true)
    [ -n "$url" ] && return 0
    sleep 0.1
  done
  echo "server $name did not start:"; cat "$tmp/$name.err"; exit 1
}

# expect STATUS DESCRIPTION CURL-ARGS...: the status, and for errors OpenAI's envelope
expect() {
  local want=$1 what=$2; shift 2
  n=$((n + 1))
  local got
  got=$(curl -s -o "$tmp/body" -D "$tmp/headers" -w '%{http_code}' --max-time 30 "$@" || true)
  if [ "$got" != "$want" ]; then
    echo "not ok $n - $what: HTTP $got, expected $want"; head -c 400 "$tmp/body"; echo; fail=1; return
  fi
  if [ "$want" -ge 400 ] && [ "$want" != 411 ] && ! grep -q '"error":{"message":' "$tmp/body"; then
    echo "not ok $n - $what: no error envelope: $(head -c 300 "$tmp/body")"; fail=1; return
  fi
  echo "ok $n - $what ($got)"
}

header_has() {
  n=$((n + 1))
  if grep -qi "^$1" "$tmp/headers"; then echo "ok $n - header $1"; else echo "not ok $n - header $1 missing"; fail=1; fi
}

start main
u=$url
expect 200 "GET /health" "$u/health"
expect 200 "GET /v1/models" "$u/v1/models"
expect 200 "GET /v1/models/demo-model" "$u/v1/models/demo-model"
expect 404 "an unknown model" "$u/v1/models/gpt-4"
expect 404 "an unknown path" "$u/v1/nothing"
expect 405 "GET on chat/completions" "$u/v1/chat/completions"
header_has "Allow: POST"
expect 405 "POST on /v1/models" -d '{}' "$u/v1/models"
expect 501 "embeddings" -d '{"input":"x"}' "$u/v1/embeddings"
expect 501 "responses" -d '{"input":"x"}' "$u/v1/responses"
header_has "x-should-retry: false"
expect 400 "invalid JSON" -d '{"messages":' "$u/v1/chat/completions"
expect 400 "no messages" -d '{}' "$u/v1/chat/completions"
expect 400 "n > 1" -d '{"messages":[{"role":"user","content":"hi"}],"n":2}' "$u/v1/chat/completions"
grep -q '"param":"n"' "$tmp/body" || { echo "not ok - n: param not named"; fail=1; }
expect 400 "tools" -d '{"messages":[{"role":"user","content":"hi"}],"tools":[{"type":"function","function":{"name":"f"}}]}' "$u/v1/chat/completions"
expect 400 "an image part" -d '{"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"x"}}]}]}' "$u/v1/chat/completions"
expect 400 "json_schema output" -d '{"messages":[{"role":"user","content":"hi"}],"response_format":{"type":"json_schema"}}' "$u/v1/chat/completions"
expect 400 "steps of the wrong type" -d '{"prompt":"a","unmask":{"steps":"many"}}' "$u/v1/completions"
expect 400 "absurd steps" -d '{"prompt":"a","unmask":{"steps":1000000000000}}' "$u/v1/completions"
expect 400 "negative temperature" -d '{"prompt":"a","temperature":-1}' "$u/v1/completions"
expect 400 "too long for the context" -d '{"prompt":"a","max_tokens":5000}' "$u/v1/completions"
expect 400 "a prompt past the context" -d "{\"prompt\":[$(seq 1 4100 | awk '{printf "%s%d", (NR>1?",":""), $1 % 4000 + 1}')],\"max_tokens\":8}" "$u/v1/completions"
grep -q 'context_length_exceeded' "$tmp/body" || { echo "not ok - context: code missing"; fail=1; }
expect 400 "an unknown unmask field" -d '{"prompt":"a","unmask":{"stepz":4}}' "$u/v1/completions"
expect 400 "a Dream option on LLaDA" -d '{"prompt":"a","unmask":{"alg":"entropy"}}' "$u/v1/completions"
expect 403 "a foreign Host (DNS rebinding)" -H 'Host: evil.example' "$u/v1/models"
expect 403 "a foreign Origin" -H 'Origin: http://evil.example' "$u/v1/models"
expect 411 "a body without a length" -H 'Transfer-Encoding: chunked' -d '{"prompt":"a"}' "$u/v1/completions"
head -c 3000000 /dev/zero | tr '\0' ' ' >"$tmp/big"
expect 413 "a 3 MB body" --data-binary @"$tmp/big" "$u/v1/completions"
expect 204 "an OPTIONS preflight" -X OPTIONS "$u/v1/chat/completions"
expect 200 "a completion" -d '{"prompt":"She looked at the","max_tokens":16,"seed":3}' "$u/v1/completions"
grep -q '"object":"text_completion"' "$tmp/body" || { echo "not ok - completion object"; fail=1; }
expect 200 "a chat stream" -N -d '{"messages":[{"role":"user","content":"Hi"}],"max_tokens":16,"stream":true}' "$u/v1/chat/completions"
header_has "Content-Type: text/event-stream"
n=$((n + 1))
if [ "$(tail -c 16 "$tmp/body")" = $'data: [DONE]\n\n' ] || tail -n 2 "$tmp/body" | grep -q '^data: \[DONE\]$'; then
  echo "ok $n - the stream ends with [DONE]"
else echo "not ok $n - no [DONE] at the end"; fail=1; fi
expect 200 "GET /v1/unmask/info" "$u/v1/unmask/info"
expect 400 "an empty prompt" -d '{"prompt":"","max_tokens":8}' "$u/v1/completions"
grep -q '"param":"prompt"' "$tmp/body" || { echo "not ok - empty prompt: param not named"; fail=1; }
# A suffix grows the canvas after the answer: checked before the 200.
expect 200 "a suffix (infill) with the default blocks" -d '{"prompt":"She looked at the","suffix":" The end.","max_tokens":64,"unmask":{"steps":8}}' "$u/v1/completions"
expect 200 "a streamed suffix" -N -d '{"prompt":"She looked at the","suffix":" The end.","max_tokens":64,"stream":true,"unmask":{"steps":8}}' "$u/v1/completions"
n=$((n + 1))
if grep -q '"error"' "$tmp/body"; then echo "not ok $n - an error in the suffix stream: $(head -c 300 "$tmp/body")"; fail=1
else echo "ok $n - no error in the suffix stream"; fi
expect 400 "a suffix and a block that does not divide the canvas" -d '{"prompt":"She looked at the","suffix":" The end.","max_tokens":16,"unmask":{"steps":4,"block_length":8}}' "$u/v1/completions"
grep -q '"param":"unmask.block_length"' "$tmp/body" || { echo "not ok - suffix blocks: param not named"; fail=1; }

# The same ids as unmask-cli generate, same options (the exact schedule).
n=$((n + 1))
"$cli" generate --model "$model" --prompt "She looked at the" --gen-length 32 --steps 32 --block-length 16 \
  --seed 11 --temperature 0.7 --threads 1 --json 2>/dev/null | grep -o '"ids":\[[0-9,]*\]' | head -1 \
  | sed 's/"ids"://' >"$tmp/want"
curl -s --max-time 60 -d '{"prompt":"She looked at the","max_tokens":32,"seed":11,"temperature":0.7,"unmask":{"steps":32,"block_length":16,"return_trace":true}}' \
  "$u/v1/completions" | grep -o '"token_ids":\[[0-9,]*\]' | sed 's/"token_ids"://' >"$tmp/got"
if [ -s "$tmp/want" ] && cmp -s "$tmp/want" "$tmp/got"; then echo "ok $n - ids equal unmask-cli generate"
else echo "not ok $n - ids differ: generate $(cat "$tmp/want") server $(cat "$tmp/got")"; fail=1; fi

# Keys: 401 without, 200 with either header, /health and preflights public.
printf 'sekrit-key-1\n' >"$tmp/keys"; chmod 600 "$tmp/keys"
start keyed --api-key-file "$tmp/keys"
k=$url
expect 401 "no key" "$k/v1/models"
expect 401 "a wrong key" -H 'Authorization: Bearer nope' "$k/v1/models"
expect 200 "Bearer key" -H 'Authorization: Bearer sekrit-key-1' "$k/v1/models"
expect 200 "x-api-key" -H 'x-api-key: sekrit-key-1' "$k/v1/models"
expect 200 "/health without a key" "$k/health"
expect 204 "a preflight without a key" -X OPTIONS "$k/v1/models"
n=$((n + 1))
if "$cli" serve --model "$model" --host 0.0.0.0 --port 0 >/dev/null 2>"$tmp/refuse.err"; then
  echo "not ok $n - a network bind without a key started"; fail=1
else echo "ok $n - a network bind without a key refuses to start"; fi

# CORS: only the given origin, with its preflight.
start cors --cors-origin http://app.example
c=$url
expect 204 "an allowed origin's preflight" -X OPTIONS -H 'Origin: http://app.example' "$c/v1/chat/completions"
header_has "Access-Control-Allow-Origin: http://app.example"
expect 204 "an allowed origin's preflight for an SDK's headers" -X OPTIONS -H 'Origin: http://app.example' \
  -H 'Access-Control-Request-Method: POST' -H 'Access-Control-Request-Headers: authorization, x-stainless-os' "$c/v1/chat/completions"
header_has "Access-Control-Allow-Headers: authorization, x-stainless-os"
expect 200 "an allowed origin's request" -H 'Origin: http://app.example' "$c/v1/models"
header_has "Access-Control-Expose-Headers: x-request-id"
expect 403 "another origin" -H 'Origin: http://evil.example' "$c/v1/models"

# A full queue: one running, none waiting → 503 with Retry-After.
start busy --max-queue 0
b=$url
curl -s --max-time 60 -o /dev/null -d '{"prompt":"a","max_tokens":256,"unmask":{"steps":256,"block_length":256}}' "$b/v1/completions" &
pids+=($!)
for _ in $(seq 1 100); do curl -s "$b/v1/unmask/info" | grep -q '"running":1' && break; sleep 0.05; done
expect 503 "a full queue" -d '{"prompt":"a","max_tokens":8}' "$b/v1/completions"
header_has "Retry-After"
n=$((n + 1))
# Busy is worth a retry (after Retry-After); OpenAI's SDKs would not retry with x-should-retry: false.
if grep -qi '^x-should-retry: false' "$tmp/headers"; then echo "not ok $n - a 503 says x-should-retry: false"; fail=1
else echo "ok $n - a 503 lets clients retry"; fi
expect 200 "health while busy" "$b/health"

echo "1..$n"
exit $fail
