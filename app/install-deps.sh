#!/usr/bin/env bash
# Installs what building Unmask needs on Debian 12 (and, with --tests, what
# the test suite needs too), only the packages that are missing. Uses sudo
# unless already root.
set -euo pipefail

packages=(meson ninja-build gcc g++ pkg-config libglib2.0-dev libjson-glib-dev libzstd-dev
          libopenblas-openmp-dev libsoup-3.0-dev libgtk-4-dev libadwaita-1-dev gettext desktop-file-utils appstream)
if [ "${1:-}" = "--tests" ]; then
  packages+=(clang libclang-rt-14-dev xvfb xauth dbus curl)
fi

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  sudo=""
  [ "$(id -u)" -ne 0 ] && sudo="sudo"
  echo "Installing: ${missing[*]}"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
fi
