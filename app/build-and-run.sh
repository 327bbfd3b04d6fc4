#!/usr/bin/env bash
# From a fresh clone: installs what is missing, builds, and starts the app
# (arguments are passed on, e.g. --demo or --model PATH).
set -euo pipefail
cd "$(dirname "$0")/.."
bash app/install-deps.sh
[ -f build/build.ninja ] || meson setup build
meson compile -C build
exec build/app/unmask "$@"
