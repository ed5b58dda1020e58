#!/bin/sh
# build-ptx.sh rebuilds the PTX of every cuda/kernels/*.cu (NAME.cu ->
# NAME.ptx, committed and embedded in the binary) with Debian's clang 14,
# without a CUDA toolkit:
#
#   clang++ -x cuda --cuda-device-only -nocudainc -nocudalib
#           --cuda-gpu-arch=sm_80 -O3 (PTX ISA 7.0)
#
# sm_80 PTX runs on Ampere and, JIT-compiled by the driver at module load,
# on Hopper and later. clang 14 emits the same PTX for the same source on
# any machine (no paths, dates or versions in it), so the committed files
# can be checked:
#
#   build-ptx.sh           rewrite the .ptx files
#   build-ptx.sh --check   compile into a temporary directory and fail if
#                          any committed .ptx differs (CI)
#
# CLANG names the compiler (default: clang++-14 if present, else clang++).
# Another major version of clang emits other (valid) PTX: the script
# refuses it unless CLAWRL_PTX_ANY_CLANG=1, so that the committed files
# always come from clang 14.
set -eu
cd "$(dirname "$0")"

if [ -z "${CLANG:-}" ]; then
  if command -v clang++-14 >/dev/null 2>&1; then CLANG=clang++-14; else CLANG=clang++; fi
fi
if ! command -v "$CLANG" >/dev/null 2>&1; then
  echo "build-ptx.sh: $CLANG not found (apt-get install clang)" >&2
  exit 2
fi
major=$("$CLANG" --version | sed -n 's/.*clang version \([0-9]*\)\..*/\1/p' | head -n 1)
if [ "$major" != 14 ] && [ "${CLAWRL_PTX_ANY_CLANG:-}" != 1 ]; then
  echo "build-ptx.sh: $CLANG is clang $major; the committed PTX comes from clang 14" >&2
  exit 2
fi

check=0
if [ "${1:-}" = --check ]; then check=1; fi
out=.
if [ $check = 1 ]; then
  out=$(mktemp -d)
  trap 'rm -rf "$out"' EXIT
fi

status=0
for src in *.cu; do
  name=${src%.cu}
  "$CLANG" -x cuda --cuda-device-only -nocudainc -nocudalib --cuda-gpu-arch=sm_80 -O3 \
    -Xclang -target-feature -Xclang +ptx70 -Wall -Werror -S -o "$out/$name.ptx" "$src"
  if [ $check = 1 ] && ! cmp -s "$out/$name.ptx" "$name.ptx"; then
    echo "build-ptx.sh: cuda/kernels/$name.ptx differs from what $src compiles to; run go generate ./cuda/..." >&2
    status=1
  fi
done
if [ $check = 1 ]; then
  for ptx in *.ptx; do
    if [ ! -e "${ptx%.ptx}.cu" ]; then
      echo "build-ptx.sh: cuda/kernels/$ptx has no source" >&2
      status=1
    fi
  done
fi
exit $status
