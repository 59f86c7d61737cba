#!/usr/bin/env bash
# Run on a build machine (Go toolchain, no GPU needed): builds what
# tests/gpu/device_check.sh runs on the GPU machine, which has no Go.
#
#   tests/gpu/prepare.sh     -> tests/gpu/bin/cuda.test.gz (the cuda package's tests,
#                               kernels.fatbin embedded)
#                               tests/gpu/bin/libgotree.so.gz (the library, for the
#                               torch extension device_check builds there)
#                               tests/gpu/bin/gotree.gz (the CLI: gotree perf --device)
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
mkdir -p tests/gpu/bin
export CGO_ENABLED=1
# Stripped: the three (each with the 15 MB fatbin) travel to the GPU machine.
go test -c -ldflags='-s -w' -o tests/gpu/bin/cuda.test ./cuda/
go build -buildmode=c-shared -trimpath -ldflags='-s -w' -o tests/gpu/bin/libgotree.so ./capi
go build -trimpath -ldflags='-s -w' -o tests/gpu/bin/gotree ./cmd/gotree
rm -f tests/gpu/bin/libgotree.h
# Compressed (62 MB -> 15 MB: what a device session may carry is limited);
# device_check.sh unpacks them.
for f in cuda.test libgotree.so gotree; do gzip -f tests/gpu/bin/$f; done
echo "prepare: built tests/gpu/bin/: $(cd tests/gpu/bin && du -h *.gz | tr '\t\n' ' ')"
