#!/usr/bin/env bash
# The HTTP server under real clients, on the demo model, 127.0.0.1 only:
#   run-node-tests.sh sdk  UNMASK_CLI [MODEL]   the official OpenAI Node SDK (node/sdk.test.mjs)
#   run-node-tests.sh load UNMASK_CLI [MODEL]   load, disconnects, hostile requests (node/load.test.mjs)
# Starts `unmask-cli serve --port 0` (and, for sdk, a second one that wants
# a key), reads the port from its "Listening on http://127.0.0.1:PORT/"
# line, runs `node --test`, and stops the servers; a server that died or
# crashed on the way out fails the test.
#
# openai is pinned in node/package-lock.json to the last major that runs on
# Node 20 (v7 needs Node 22); `npm ci` installs it when node_modules is
# missing (from npm's cache when it can). Debian 12's own nodejs is 18,
# which no openai release supports, so app/install-deps.sh does not install
# it: the project's machines carry NodeSource's Node 20 with npm. Exit 77
# (skip) only when node or npm is absent or node is too old.
set -euo pipefail

mode=${1:?sdk or load}
cli=${2:?path to unmask-cli}
model=${3:-${UM_DEMO_MODEL:?}}
here=$(cd "$(dirname "$0")" && pwd)
nodedir=$here/node

case "$mode" in
  sdk) need_node=20 ;;  # openai@6: "Node.js 20 LTS or later"
  load) need_node=18 ;; # built-in modules only
  *) echo "unknown mode $mode" >&2; exit 2 ;;
esac
if ! command -v node >/dev/null; then
  echo "node is not installed: skipping"; exit 77
fi
node_major=$(node -p 'process.versions.node.split(".")[0]')
if [ "$node_major" -lt "$need_node" ]; then
  echo "node $(node --version) is older than $need_node: skipping"; exit 77
fi

if [ "$mode" = sdk ]; then
  want=$(node -p 'require(process.argv[1]).packages["node_modules/openai"].version' "$nodedir/package-lock.json")
  have=$(node -p 'try { require(process.argv[1]).version } catch { "" }' "$nodedir/node_modules/openai/package.json")
  if [ "$have" != "$want" ]; then
    if ! command -v npm >/dev/null; then
      echo "npm is not installed: skipping"; exit 77
    fi
    echo "npm ci (openai $want)"
    (cd "$nodedir" && timeout 300 npm ci --prefer-offline --no-audit --no-fund)
  fi
fi

tmp=$(mktemp -d)
pids=()
names=()
# Neither the user's optimizer profile nor their caches: the servers and
# the reference `unmask-cli generate` resolve the same defaults.
export XDG_CONFIG_HOME=$tmp/config XDG_CACHE_HOME=$tmp/cache

stop_servers() {
  local rc=0 i pid st
  for i in "${!pids[@]}"; do
    pid=${pids[$i]}
    if ! kill -0 "$pid" 2>/dev/null; then
      wait "$pid" && st=0 || st=$?
      echo "server ${names[$i]} died during the tests (exit $st):"; tail -n 40 "$tmp/${names[$i]}.err"
      rc=1; continue
    fi
    kill -TERM "$pid"
    for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    if kill -0 "$pid" 2>/dev/null; then
      echo "server ${names[$i]} still running 10 s after SIGTERM"; kill -KILL "$pid"; rc=1
    fi
    wait "$pid" && st=0 || st=$?
    # 0: it handled the signal; 143: it did not (the default action).
    if [ "$st" -ne 0 ] && [ "$st" -ne 143 ]; then
      echo "server ${names[$i]} exited with $st after SIGTERM:"; tail -n 40 "$tmp/${names[$i]}.err"; rc=1
    fi
  done
  pids=()
  return $rc
}
trap 'stop_servers >/dev/null 2>&1 || true; rm -rf "$tmp"' EXIT

# start_server NAME VAR [ENV=VALUE…] -- ARGS… : sets VAR to the base URL;
# the PID lands in pids[].
start_server() {
  local name=$1 var=$2 envs=()
  shift 2
  while [ "$1" != "--" ]; do envs+=("$1"); shift; done
  shift
  # The redirections happen in the child: create the files first, or the
  # first sed below may run before they exist.
  : >"$tmp/$name.out"; : >"$tmp/$name.err"
  env "${envs[@]}" "$cli" serve --port 0 --model "$model" "$@" >"$tmp/$name.out" 2>"$tmp/$name.err" &
  local pid=$! url="" deadline=$((SECONDS + 60))
  pids+=("$pid"); names+=("$name")
  while [ -z "$url" ]; do
    url=$(sed -n 's|^Listening on \(http://127\.0\.0\.1:[0-9]*\)/$|\1|p' "$tmp/$name.out" | head -n 1)
    [ -n "$url" ] && break
    if ! kill -0 "$pid" 2>/dev/null; then
      echo "server $name exited before listening:" >&2; cat "$tmp/$name.err" >&2; return 1
    fi
    if [ $SECONDS -ge $deadline ]; then
      echo "server $name printed no Listening line in 60 s:" >&2; cat "$tmp/$name.out" "$tmp/$name.err" >&2; return 1
    fi
    sleep 0.1
  done
  # The port is open before the model has loaded: /health says when it has.
  if ! node -e '
    (async () => {
      for (let i = 0; i < 600; i++) {
        try { if ((await fetch(process.argv[1] + "/health")).status === 200) return; } catch {}
        await new Promise((r) => setTimeout(r, 100));
      }
      process.exit(1);
    })();' "$url"; then
    echo "server $name not healthy in 60 s:" >&2; cat "$tmp/$name.err" >&2; return 1
  fi
  printf -v "$var" %s "$url"
}

case "$mode" in
  sdk)
    start_server plain UM_SERVER_URL --
    UM_KEYED_KEY=um-test-$(od -An -N12 -tx1 /dev/urandom | tr -d ' \n')
    start_server keyed UM_KEYED_URL "UNMASK_API_KEY=$UM_KEYED_KEY" --
    export UM_KEYED_URL UM_KEYED_KEY
    files=(sdk.test.mjs)
    ;;
  load)
    # 1 running + 2 waiting: eight clients overflow it.
    start_server load UM_SERVER_URL -- --max-queue 2
    files=(load.test.mjs)
    ;;
esac
export UM_SERVER_URL UM_SERVER_PID=${pids[0]} UM_CLI=$cli UM_DEMO_MODEL=$model

rc=0
(cd "$nodedir" && timeout 280 node --test --test-reporter=spec "${files[@]}") || rc=$?
[ $rc -eq 124 ] && echo "node --test did not finish in 280 s"
stop_servers || rc=1
exit $rc
