#!/usr/bin/env bash
# The window's smoothness while the engine works (issue 22, section 2).
#
# Starts the app under Xvfb on the demo model with UM_FRAME_STATS set, starts
# a long generation (Ctrl+Return), presses Shift every 200 ms through the X
# server (XTest, by xdotool) for --seconds, then Escape, and prints:
#   - the frame intervals while the run goes (a tick callback keeps the frame
#     clock running, so a stalled main loop shows as a long interval),
#   - each key press's delay from its X server timestamp to the window's
#     handler,
#   - Stop's response: Escape's timestamp to its handler, to the run ended
#     (the page no longer running), to the frame that showed it,
#   - the engine's time per step (what the settings cost the run).
# Not a test: the figures depend on the machine and its load. --busy N starts
# N `python3 -c "while True: pass"` for the time of the measurement, in this
# session (the worst case for a niced engine: with the app in one scheduling
# group, nice weighs the engine against them), or with --busy-session own
# each in a session of its own (setsid), as programs started from another
# terminal or the desktop are: Linux's autogroups (or a desktop's per-app
# cgroups) then share the CPU between them and the app as wholes, and the
# engine's nice value only weighs it against the app's own window.
#
#   tests/tools/frame-bench.sh [--busy N] [--busy-session same|own] [--threads N]
#       [--nice N] [--seconds S] [--repeat R] [--gen-length N] [--steps N]
#       [--build DIR] [--json FILE]
# --nice sets UM_ENGINE_NICE, the engine threads' nice value (default: the
# app's; 0: not niced, as before issue 22).
#
# Needs xvfb-run, dbus-run-session, xdotool and python3 (apt-get install
# xvfb dbus xdotool python3), and a build with the GUI (build/app/unmask).
set -euo pipefail

src=$(cd "$(dirname "$0")/../.." && pwd)
busy=0 session=same threads=0 nice="" seconds=6 repeat=3 gen=512 steps=512 build="$src/build" json="" inner=0
renderer=${GSK_RENDERER:-cairo}

usage () { sed -n '2,30p' "$0" | sed 's/^# \{0,1\}//'; exit "${1:-0}"; }
while [ $# -gt 0 ]; do
  case "$1" in
    --busy) busy=$2; shift 2 ;;
    --busy-session) session=$2; shift 2 ;;
    --threads) threads=$2; shift 2 ;;
    --nice) nice=$2; shift 2 ;;
    --seconds) seconds=$2; shift 2 ;;
    --repeat) repeat=$2; shift 2 ;;
    --gen-length) gen=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --build) build=$(cd "$2" && pwd); shift 2 ;;
    --json) json=$(realpath -m "$2"); shift 2 ;;
    --inner) inner=1; shift ;;
    -h|--help) usage 0 ;;
    *) echo "frame-bench: unknown argument $1" >&2; usage 2 >&2 ;;
  esac
done

if [ "$inner" = 0 ]; then
  for p in xvfb-run dbus-run-session xdotool python3; do
    command -v "$p" >/dev/null || { echo "frame-bench: $p is missing (apt-get install xvfb dbus xdotool python3)" >&2; exit 2; }
  done
  [ -x "$build/app/unmask" ] || { echo "frame-bench: no $build/app/unmask (build with -Dgui=enabled)" >&2; exit 2; }
  xvfb-run -a -s "-screen 0 1280x800x24" dbus-run-session -- \
    bash "$0" --inner --busy "$busy" --busy-session "$session" --threads "$threads" ${nice:+--nice "$nice"} --seconds "$seconds" --repeat "$repeat" \
    --gen-length "$gen" --steps "$steps" --build "$build" ${json:+--json "$json"} 2>&1 \
    | grep -v 'Failed to set fd limit'
  exit
fi

tmp=$(mktemp -d -t frame-bench.XXXXXX)
pids=()
app=""
cleanup () {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  if [ -n "$app" ]; then kill "$app" 2>/dev/null || true; fi
  rm -rf "$tmp"
}
trap cleanup EXIT

stats=$tmp/stats.json
mkdir -p "$tmp/config/unmask" "$tmp/data" "$tmp/cache"
# The parameters as the user's choice; temperature as the model recommends.
printf '{"gen-length": %d, "steps": %d, "block-length": 32, "threads": %d}\n' "$gen" "$steps" "$threads" \
  > "$tmp/config/unmask/settings.json"

for _ in $(seq "$busy"); do
  if [ "$session" = own ]; then
    setsid python3 -c "while True: pass" &
  else
    python3 -c "while True: pass" &
  fi
  pids+=($!)
done

[ -z "$nice" ] || export UM_ENGINE_NICE=$nice
UM_FRAME_STATS=$stats XDG_CONFIG_HOME=$tmp/config XDG_DATA_HOME=$tmp/data XDG_CACHE_HOME=$tmp/cache \
  GSK_RENDERER=$renderer GTK_A11Y=none NO_AT_BRIDGE=1 UNMASK_DEVICE=cpu \
  "$build/app/unmask" --demo > "$tmp/app.log" 2>&1 &
app=$!

fail () { echo "frame-bench: $*" >&2; sed 's/^/  app: /' "$tmp/app.log" >&2; exit 1; }
# Waits (up to $2 s) until the stats file matches the Python expression $1 (d: the JSON).
wait_stats () {
  local end=$((SECONDS + $2))
  until [ -s "$stats" ] && python3 -c "import json,sys; d=json.load(open('$stats')); sys.exit(0 if ($1) else 1)" 2>/dev/null; do
    kill -0 "$app" 2>/dev/null || fail "the app exited"
    [ $SECONDS -lt $end ] || return 1
    sleep 0.25
  done
}

win=""
for _ in $(seq 150); do
  win=$(xdotool search --onlyvisible --name '^Unmask$' 2>/dev/null | head -n 1 || true)
  [ -n "$win" ] && break
  sleep 0.2
done
[ -n "$win" ] || fail "no window"
# No window manager: give the window the X input focus, so XTest keys go to it.
xdotool windowfocus --sync "$win"

# CPU time (clock ticks) of the whole machine and of the processes of the
# measurement (the app, the busy ones, the X server): the rest is other
# work that ran meanwhile, which makes the figures noise.
machine_ticks () { awk '/^cpu / { print $2 + $3 + $4 + $7 + $8 }' /proc/stat; }
our_ticks () {
  local t=0 p
  for p in "$app" "${pids[@]}" $(pgrep -x Xvfb -s 0 2>/dev/null || true) $(pgrep -f "Xvfb ${DISPLAY} " || true); do
    [ -r "/proc/$p/stat" ] && t=$((t + $(awk '{ print $14 + $15 }' "/proc/$p/stat")))
  done
  echo "$t"
}
m0=$(machine_ticks) o0=$(our_ticks) t0=$(date +%s.%N)

n_keys=$((seconds * 5))
for r in $(seq "$repeat"); do
  # Ctrl+Return until a run starts: the model may still be loading.
  end=$((SECONDS + 60))
  until wait_stats "d['running'] and len(d['runs']) == $((r - 1))" 0; do
    [ $SECONDS -lt $end ] || fail "no run started"
    xdotool key ctrl+Return
    wait_stats "d['running']" 1 || true
  done
  # One xdotool: a keystroke (press, 100 ms, release, 100 ms) every 200 ms.
  # shellcheck disable=SC2046
  xdotool key --delay 200 $(printf 'shift %.0s' $(seq "$n_keys"))
  wait_stats "d['running']" 0 || fail "run $r ended before Escape: raise --gen-length/--steps or lower --seconds"
  # Which threads ran at which nice value (those that used 1 % of a CPU or more).
  [ "$r" != 1 ] || ps -L -o ni=,pcpu=,comm= -p "$app" | awk '$2 >= 1 { t = t sprintf(" %s(nice %s, %s%%)", $3, $1, $2) }
    END { print "threads:" t }' > "$tmp/threads"
  xdotool key Escape
  wait_stats "len(d['stops']) == $r" 30 || fail "Escape did not stop run $r"
  sleep 1
done

m1=$(machine_ticks) o1=$(our_ticks) t1=$(date +%s.%N)
other=$(awk -v m=$((m1 - m0)) -v o=$((o1 - o0)) -v hz="$(getconf CLK_TCK)" -v s0="$t0" -v s1="$t1" -v n="$(nproc)" \
  'BEGIN { printf "%.0f", 100 * (m - o) / hz / ((s1 - s0) * n) }')
xdotool key ctrl+q
for _ in $(seq 50); do kill -0 "$app" 2>/dev/null || break; sleep 0.2; done
kill -0 "$app" 2>/dev/null && kill "$app"
wait "$app" 2>/dev/null || true
app=""
[ -z "$json" ] || cp "$stats" "$json"

python3 - "$stats" "$busy ($session session)" "$threads" "$repeat" "$seconds" "$gen" "$steps" "$renderer" "$other" <<'EOF'
import json, math, os, sys

d = json.load(open(sys.argv[1]))
busy, threads, repeat, seconds, gen, steps, renderer, other = sys.argv[2:]

def pct(v, p):
    """Nearest rank."""
    s = sorted(v)
    return s[max(0, math.ceil(p / 100 * len(s)) - 1)] if s else float('nan')

def line(name, v):
    if not v:
        return f"{name:<24} (none)"
    return (f"{name:<24} n={len(v):<5} p50={pct(v, 50):6.1f}  p95={pct(v, 95):6.1f}  "
            f"p99={pct(v, 99):6.1f}  max={max(v):6.1f} ms")

frames, keys = d['frames_ms'], d['keys_ms']
stops, runs = d['stops'], d['runs']
print(f"other work meanwhile: {other} % of the machine's CPU (load {os.getloadavg()[0]:.2f} at the end)")
print(f"busy {busy}, threads {threads or 'default'}, "
      f"engine nice {d.get('engine_nice', 'none')}, "
      f"{repeat} runs of gen {gen}/steps {steps} stopped after ~{seconds} s, renderer {renderer}")
print(line("frame interval", frames))
print(f"{'':<24} frames > 50 ms: {sum(f > 50 for f in frames)}, > 100 ms: {sum(f > 100 for f in frames)}")
print(line("frame work (main thread)", d['work_ms']))
print(line("key press delay", keys))
print(f"{'':<24} keys > 100 ms: {sum(k > 100 for k in keys)}, unstamped: {d['keys_unstamped']}")
print(line("Stop: handler", [s['handled_ms'] for s in stops]))
print(line("Stop: run ended", [s['stopped_ms'] for s in stops]))
print(line("Stop: shown", [s['shown_ms'] for s in stops]))
ms_step = [1000 * r['seconds'] / r['steps'] for r in runs if r['steps'] > 0]
print(open(os.path.join(os.path.dirname(sys.argv[1]), 'threads')).read().strip())
print(f"{'engine':<24} " + ", ".join(f"{m:.1f}" for m in ms_step) + " ms/step (run start to stop / steps)")
print(f"{'UI thread per run':<24} " + ", ".join(f"cpu {r['ui_cpu_ms']:.0f} ms wait {r['ui_wait_ms']:.0f} ms / {r['seconds']:.1f} s"
                                             for r in runs) + " (waiting: runnable, no CPU)")
EOF
