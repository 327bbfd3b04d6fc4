#!/bin/bash
# gpu-pack.sh — the binaries a device run needs, built here, with every
# library they load and the loader itself, in one compressed file that the
# device tool carries (.gpu-run/, ignored by git): the device image has the
# NVIDIA driver, cuBLAS and PyTorch but none of our runtime libraries, so
# tests/tools/gpu-bench.sh runs our programs under this loader with
# --library-path (our glibc with our loader; the driver's libcuda and the
# image's cuBLAS are the only libraries taken from the device).
#
#   tests/tools/gpu-pack.sh [--build DIR] [--emulation] [--out FILE]
#
# --build DIR   a build with -Dcuda=enabled (default build-gpu, configured
#               here if missing: -Dnative=false, since the device's CPU is not
#               this one; release; no GUI)
# --emulation   pack the CUDA emulation's programs instead (unmask-cli-emu as
#               unmask-cli, the *-emu tests), for gpu-bench.sh --rehearse
# --out FILE    default .gpu-run/bundle.tar.xz (.gpu-run/rehearse.tar.xz with
#               --emulation)
#
# The working tree travels with the call too (about 45 MiB of it is tracked
# files); the bundle must stay under what is left of the 64 MiB: it is
# refused above 18 MiB.
set -euo pipefail

here=$(cd "$(dirname "$0")/../.." && pwd)
build=build-gpu
emulation=0
out=
while [ $# -gt 0 ]; do
  case "$1" in
    --build) build=$2; shift 2 ;;
    --emulation) emulation=1; shift ;;
    --out) out=$2; shift 2 ;;
    -h|--help) sed -n '2,24p' "$0"; exit 0 ;;
    *) echo "gpu-pack: unknown argument $1" >&2; exit 2 ;;
  esac
done
cd "$here"
if [ -z "$out" ]; then
  out=.gpu-run/bundle.tar.xz
  [ "$emulation" = 1 ] && out=.gpu-run/rehearse.tar.xz
fi
limit=$((18 << 20))

if [ "$emulation" = 1 ]; then
  targets=(unmask-cli-emu um-make-model test-gpu-engine-emu cuda-emu-kernels test-backend-ops-emu
           test-family-forward-emu test-family-gpu-cpu-emu)
else
  targets=(unmask-cli um-make-model test-backend-ops test-family-forward-gpu test-family-gpu-cpu test-gpu-engine
           um-cuda-selftest)
fi
if [ ! -f "$build/build.ninja" ]; then
  echo "gpu-pack: configuring $build" >&2
  meson setup "$build" -Dcuda=enabled -Dnative=false -Dgui=disabled -Dbuildtype=release >&2
fi
meson compile -C "$build" "${targets[@]}" >&2

stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/bin" "$stage/lib"
for t in "${targets[@]}"; do
  f=$(find "$build" -type f -name "$t" -perm -u+x | head -n 1)
  [ -n "$f" ] || { echo "gpu-pack: $t not built in $build" >&2; exit 1; }
  name=$t
  [ "$t" = unmask-cli-emu ] && name=unmask-cli
  strip --strip-unneeded -o "$stage/bin/$name" "$f"
done
# Every library the loader resolves for them, glibc's included (it must
# match the loader), by their real files under the names asked for.
for b in "$stage"/bin/*; do
  ldd "$b" | awk '/=> \// { print $1, $3 }'
done | sort -u | while read -r soname path; do
  cp -L "$path" "$stage/lib/$soname"
done
loader=$(ldd "$stage/bin/unmask-cli" | awk '/ld-linux/ { print $1 }')
cp -L "$loader" "$stage/lib/$(basename "$loader")"
# The rest of our glibc: the device's libcuda and cuBLAS ask for libdl,
# libpthread and librt by name, which must be our glibc's too (this loader
# and this libc), not the device's.
libc_dir=$(dirname "$(ldd "$stage/bin/unmask-cli" | awk '$1 == "libc.so.6" { print $3 }')")
for l in libdl.so.2 libpthread.so.0 librt.so.1 libutil.so.1 libanl.so.1 libnss_files.so.2 libnss_dns.so.2; do
  [ -e "$libc_dir/$l" ] && [ ! -e "$stage/lib/$l" ] && cp -L "$libc_dir/$l" "$stage/lib/$l"
done
{
  echo "built: $(date -u +%Y-%m-%dT%H:%M:%SZ) from $(git rev-parse --short HEAD 2>/dev/null || echo '?')"
  echo "build: $build ($(meson introspect "$build" --buildoptions 2>/dev/null | python3 -c 'import json,sys; o={x["name"]:x["value"] for x in json.load(sys.stdin)}; print("cuda=%s native=%s buildtype=%s" % (o.get("cuda"), o.get("native"), o.get("buildtype")))' 2>/dev/null || echo '?'))"
  echo "emulation: $emulation"
  echo "loader: $(basename "$loader")"
} > "$stage/MANIFEST"

mkdir -p "$(dirname "$out")"
tar -C "$stage" -cf - MANIFEST bin lib | xz -9e -T0 > "$out.tmp"
size=$(stat -c %s "$out.tmp")
if [ "$size" -gt "$limit" ]; then
  rm -f "$out.tmp"
  echo "gpu-pack: the bundle is $((size >> 20)) MiB, over the $((limit >> 20)) MiB the device tool leaves" >&2
  exit 1
fi
mv "$out.tmp" "$out"
echo "gpu-pack: $out: $((size / 1024)) KiB, $(ls "$stage/bin" | wc -l) programs, $(ls "$stage/lib" | wc -l) libraries" >&2
