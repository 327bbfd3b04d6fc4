#!/usr/bin/env bash
# The whole test suite, from a fresh Debian 12 machine: installs what is
# missing, builds with warnings as errors, runs every test, then runs the
# engine tests again under AddressSanitizer + UndefinedBehaviorSanitizer, and
# fuzzes the GGUF, safetensors and JSON parsers for a bounded time.
set -euo pipefail
cd "$(dirname "$0")/.."

bash app/install-deps.sh --tests

jobs=$(nproc)

# 1. Release-like build, warnings are errors.
if [ ! -f build-ci/build.ninja ]; then
  meson setup build-ci -Dwerror=true -Dbuildtype=debugoptimized -Dgui=enabled
fi
meson compile -C build-ci
meson test -C build-ci --print-errorlogs --num-processes "$jobs" --no-suite gui
# Every CPU code path that run-time dispatch can pick on this machine, not
# only the best one: the numeric tests once per level (scalar, avx2, ...).
for isa in $(build-ci/tests/um-cpu-levels); do
  echo "== numeric tests with UM_CPU_ISA=$isa"
  UM_CPU_ISA="$isa" meson test -C build-ci --print-errorlogs --num-processes "$jobs" --suite isa
done
# And with OpenBLAS's other kernel choice: tolerances must not depend on it.
if [ -n "${OPENBLAS_CORETYPE:-}" ]; then
  echo "== numeric tests with OPENBLAS_CORETYPE unset (was $OPENBLAS_CORETYPE)"
  env -u OPENBLAS_CORETYPE meson test -C build-ci --print-errorlogs --num-processes "$jobs" --suite isa
elif grep -qw avx2 /proc/cpuinfo; then
  echo "== numeric tests with OPENBLAS_CORETYPE=Haswell"
  OPENBLAS_CORETYPE=Haswell meson test -C build-ci --print-errorlogs --num-processes "$jobs" --suite isa
fi
# The desktop app's tests need a display: a private X server and session bus.
dbus-run-session -- xvfb-run -a -s "-screen 0 1600x1200x24" \
  meson test -C build-ci --print-errorlogs --suite gui

# 2. Sanitizers. OpenMP's runtime keeps thread pools alive at exit; that is
#    not a leak of ours, so only leaks with our frames fail the run. Built
#    optimized (-O2 -g): the checks are the same, the suite runs about twice
#    as fast as at -O0, which keeps CI inside its time on 2 cores.
if [ ! -f build-asan/build.ninja ]; then
  meson setup build-asan -Dwerror=true -Dbuildtype=debugoptimized -Db_sanitize=address,undefined \
    -Db_lundef=false -Dgui=disabled -Dcuda=disabled
fi
meson compile -C build-asan
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:strict_string_checks=1 \
UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
LSAN_OPTIONS=suppressions="$PWD/tests/lsan.supp":print_suppressions=0 \
  meson test -C build-asan --print-errorlogs --num-processes "$jobs" --suite engine --timeout-multiplier 4
# 3. The file parsers under libFuzzer, for a bounded time.
bash tests/fuzz/run-fuzz.sh "${UM_FUZZ_SECONDS:-30}" build-fuzz
echo "All tests passed."
