# gpu-run-lib.sh — what the prepared device runs (gpu-bench.sh, gpu-memory.sh)
# share, sourced by both: their options, the output and work folders, the
# time-bounded `step`, and our programs unpacked from the bundle and run under
# their own loader with the device's libcuda, cuBLAS and NVML (docs/gpu.md).
#
# The sourcing script sets before sourcing:
#   tool            its name, for messages and the work folder
#   help_lines      the sed range of its own header printed by --help
#   reserve         seconds kept back for writing the table at the end
#   step_log_tail   lines of each step's stderr copied to the log (empty: all)
# and gets: here, bundle, out, limit, rehearse, py, start, deadline, work,
# log, pids, outcome, say, left, step, loader, libpath, cublas, run.

here=$(cd "$(dirname "$0")/../.." && pwd)
bundle=
out=${OUT:-}
limit=540
rehearse=0
py=
while [ $# -gt 0 ]; do
  case "$1" in
    --bundle) bundle=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --time-limit) limit=$2; shift 2 ;;
    --rehearse) rehearse=1; shift ;;
    --python) py=$2; shift 2 ;;
    -h|--help) sed -n "$help_lines" "$0"; exit 0 ;;
    *) echo "$tool: unknown argument $1" >&2; exit 2 ;;
  esac
done
cd "$here"
[ -n "$bundle" ] || bundle=.gpu-run/bundle.tar.xz
[ "$rehearse" = 1 ] && [ "$bundle" = .gpu-run/bundle.tar.xz ] && bundle=.gpu-run/rehearse.tar.xz
[ -n "$out" ] || out=$here/$tool-out
[ -n "$py" ] || { py=python3; [ "$rehearse" = 1 ] && py=/usr/bin/python3; }
mkdir -p "$out"
out=$(cd "$out" && pwd)
start=$(date +%s)
deadline=$((start + limit))
work=$(mktemp -d "${TMPDIR:-/tmp}/um-$tool.XXXXXX")
log=$out/log.txt
: > "$log"
pids=()

cleanup ()
{
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
  wait 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT

say () { echo "[$(( $(date +%s) - start ))s] $*" | tee -a "$log" >&2; }
left () { echo $((deadline - $(date +%s))); }

# step NAME NEEDED_S CMD…: runs CMD with what is left (less the reserve for
# the table) if at least NEEDED_S seconds are; its stdout to $work/NAME.json,
# its stderr to $work/NAME.err and the log. Records the outcome and which
# step is running ($work/current: samplers tag their lines with it).
declare -A outcome
step ()
{
  local name=$1 need=$2
  shift 2
  local budget=$(( $(left) - reserve ))
  if [ "$budget" -lt "$need" ]; then
    say "skip $name: ${budget}s left, it needs about ${need}s"
    outcome[$name]="skipped (time)"
    return 1
  fi
  say "run $name (up to ${budget}s)"
  echo "$name" > "$work/current"
  local t0=$(date +%s)
  [ "$1" = run ] && { shift; set -- "$run" "$@"; }
  timeout -k 5 "$budget" "$@" > "$work/$name.json" 2> "$work/$name.err"
  local rc=$?
  if [ -n "$step_log_tail" ]; then tail -n "$step_log_tail" "$work/$name.err"; else cat "$work/$name.err"; fi >> "$log"
  echo idle > "$work/current"
  outcome[$name]="rc $rc, $(( $(date +%s) - t0 ))s"
  say "done $name: ${outcome[$name]}"
  return $rc
}

# ---- our programs under their own loader ----
if [ ! -f "$bundle" ]; then
  say "no bundle at $bundle: make it with tests/tools/gpu-pack.sh$([ "$rehearse" = 1 ] && echo ' --emulation')"
  exit 1
fi
mkdir -p "$work/um"
tar -C "$work/um" -xJf "$bundle" 2>> "$log" \
  || "$py" -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' "$bundle" "$work/um" \
  || { say "cannot unpack $bundle"; exit 1; }
say "bundle: $(tr '\n' ' ' < "$work/um/MANIFEST")"
loader=$(ls "$work/um/lib"/ld-linux*.so* | head -n 1)
# The driver's libcuda and the image's cuBLAS (and cuBLASLt beside it).
libpath=$work/um/lib
cublas=
if [ "$rehearse" = 0 ]; then
  for d in /usr/local/nvidia/lib64 /usr/local/nvidia/lib /usr/lib/x86_64-linux-gnu /usr/lib64 /usr/local/cuda/lib64 \
           /usr/local/cuda/targets/x86_64-linux/lib; do
    [ -e "$d/libcuda.so.1" ] && { libpath=$libpath:$d; break; }
  done
  for c in /usr/local/cuda/lib64/libcublas.so.13 /usr/local/cuda/targets/x86_64-linux/lib/libcublas.so.13 \
           $("$py" -c 'import glob, os, nvidia; print(" ".join(glob.glob(os.path.join(list(nvidia.__path__)[0], "cu*", "lib", "libcublas.so.13"))))' 2>/dev/null); do
    [ -e "$c" ] && { cublas=$c; break; }
  done
  [ -n "$cublas" ] && libpath=$libpath:$(dirname "$cublas")
  export UNMASK_CUBLAS_LIBRARY=$cublas
  # NVML from the driver's folder (it is not in the bundle).
  for d in ${libpath//:/ }; do
    [ -e "$d/libnvidia-ml.so.1" ] && { export UNMASK_NVML_LIBRARY=$d/libnvidia-ml.so.1; break; }
  done
fi
# A program, so that timeout can run it: run PROG ARGS…
run=$work/run
cat > "$run" <<RUN
#!/bin/sh
prog=\$1
shift
exec "$loader" --library-path "$libpath" "$work/um/bin/\$prog" "\$@"
RUN
chmod +x "$run"
say "loader $loader; library path $libpath; cuBLAS ${cublas:-(emulated)}; NVML ${UNMASK_NVML_LIBRARY:-(none)}"
echo idle > "$work/current"
