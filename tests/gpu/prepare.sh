#!/usr/bin/env bash
# Run on a build machine (Go toolchain, no GPU needed): builds what
# tests/gpu/device_check.sh runs on the GPU machine, which has no Go.
#
#   tests/gpu/prepare.sh     -> tests/gpu/bin/cuda.test (the cuda package's tests,
#                               kernels.fatbin embedded)
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
mkdir -p tests/gpu/bin
export CGO_ENABLED=1
go test -c -o tests/gpu/bin/cuda.test ./cuda/
echo "prepare: built tests/gpu/bin/cuda.test ($(du -h tests/gpu/bin/cuda.test | cut -f1))"
