#!/usr/bin/env bash
# Run on a build machine (Go toolchain, no GPU needed): builds what
# tests/gpu/device_check.sh runs on the GPU machine, which has no Go.
#
#   tests/gpu/prepare.sh     -> tests/gpu/bin/cuda.test (the cuda package's tests,
#                               kernels.fatbin embedded)
#                               tests/gpu/bin/libgotree.so (the library, for the
#                               torch extension device_check builds there)
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
mkdir -p tests/gpu/bin
export CGO_ENABLED=1
go test -c -o tests/gpu/bin/cuda.test ./cuda/
go build -buildmode=c-shared -trimpath -o tests/gpu/bin/libgotree.so ./capi
rm -f tests/gpu/bin/libgotree.h
echo "prepare: built tests/gpu/bin/cuda.test ($(du -h tests/gpu/bin/cuda.test | cut -f1)) and tests/gpu/bin/libgotree.so ($(du -h tests/gpu/bin/libgotree.so | cut -f1))"
