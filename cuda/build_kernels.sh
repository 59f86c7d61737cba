#!/usr/bin/env bash
# Builds cuda/kernels.fatbin from cuda/kernels/*.cu with nvcc from PyPI's
# CUDA 13.0 wheels, in a private virtual environment.
#
#   cuda/build_kernels.sh            build (skips nvcc when the hash is current)
#   cuda/build_kernels.sh --force    build even when the hash is current
#   cuda/build_kernels.sh --check    rebuild into a temporary folder and fail if
#                                    the committed hash is stale or ptxas spills
#   cuda/build_kernels.sh --hash     print the source hash and exit (no nvcc)
#
# Environment: PYTHON (python3), CUDA_VENV (build/cuda-venv), NVCC (use this
# nvcc instead of the wheels; its version is recorded in the hash),
# NVCC_THREADS (architectures compiled at once; default: the CPU count).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
PYTHON=${PYTHON:-python3}
CUDA_VENV=${CUDA_VENV:-$root/build/cuda-venv}
# Exact patch versions inside CUDA 13.0 (the wheels must share one minor
# version; exact pins keep CI's rebuild byte-identical to the committed one).
CUDA_PIN='13.0'
NVCC_PIN='13.0.88' NVVM_PIN='13.0.88' CRT_PIN='13.0.88' RUNTIME_PIN='13.0.96'
ARCHS=(75 80 86 89 90)
PTX_ARCH=90
# -fmad=false: the reference semantics have no fused multiply-add.
# --compress-mode=none: any driver reads it, and the Go tests can find
# every kernel name in it.
NVCC_FLAGS=(--fatbin -std=c++17 -O3 -fmad=false --compress-mode=none -Xptxas -v,-warn-spills,-warn-lmem-usage)
gencode=()
for a in "${ARCHS[@]}"; do gencode+=("-gencode=arch=compute_$a,code=sm_$a"); done
gencode+=("-gencode=arch=compute_$PTX_ARCH,code=compute_$PTX_ARCH")
flags_line() { echo "${NVCC_FLAGS[*]} ${gencode[*]}"; }
# nvcc compiles the architectures in parallel (--threads); the output does
# not depend on it, so it stays out of the hashed flags line.
NVCC_THREADS=${NVCC_THREADS:-$(nproc 2>/dev/null || echo 1)}

mode=build
case "${1:-}" in
  "") ;;
  --force) mode=force ;;
  --check) mode=check ;;
  --hash) mode=hash ;;
  -h|--help) sed -n 2,13p "$0"; exit 0 ;;
  *) echo "build_kernels.sh: unknown argument $1" >&2; exit 2 ;;
esac

# The sources, in a fixed order. The hash covers their names and bytes and
# the nvcc version line; the Go test TestFatbinFresh recomputes the
# source part without nvcc.
sources() { (cd "$here" && LC_ALL=C ls kernels/*.cu kernels/*.cuh 2>/dev/null | LC_ALL=C sort); }

source_hash() {
  # sha256 over "name\n<len>\n<bytes>" for each source, in order.
  (cd "$here" && for f in $(sources); do
      printf '%s\n%s\n' "$f" "$(wc -c <"$f" | tr -d ' ')"; cat "$f"
    done) | sha256sum | cut -d' ' -f1
}

if [[ $mode == hash ]]; then source_hash; exit 0; fi

setup_nvcc() {
  if [[ -n "${NVCC:-}" ]]; then return; fi
  local stamp="$CUDA_VENV/.ready-$NVCC_PIN-$RUNTIME_PIN"
  if [[ ! -f "$stamp" ]]; then
    echo "build_kernels: creating $CUDA_VENV with CUDA $CUDA_PIN wheels" >&2
    "$PYTHON" -m venv "$CUDA_VENV"
    "$CUDA_VENV/bin/python" -m pip install -q --disable-pip-version-check \
      "nvidia-cuda-nvcc==$NVCC_PIN" "nvidia-nvvm==$NVVM_PIN" \
      "nvidia-cuda-crt==$CRT_PIN" "nvidia-cuda-runtime==$RUNTIME_PIN"
    touch "$stamp"
  fi
  local cu13
  cu13=$("$CUDA_VENV/bin/python" -c 'import nvidia, os; print(os.path.join(list(nvidia.__path__)[0], "cu13"))')
  NVCC="$cu13/bin/nvcc"
  # nvcc finds cicc under ../nvvm/bin and ptxas beside itself.
  export PATH="$cu13/bin:$PATH"
  export LD_LIBRARY_PATH="$cu13/lib:$cu13/nvvm/lib64:${LD_LIBRARY_PATH:-}"
}

nvcc_version() { "$NVCC" --version | grep -E '^Cuda compilation tools' | head -1; }

full_hash() { printf '%s\n%s\n%s\n' "$(source_hash)" "$(nvcc_version)" "$(flags_line)" | sha256sum | cut -d' ' -f1; }

hashfile="$here/kernels.fatbin.sha256"
fatbin="$here/kernels.fatbin"

write_hashfile() { # $1 = file to write
  {
    echo "# gotree kernels.fatbin: written by cuda/build_kernels.sh; do not edit"
    echo "sources $(source_hash)"
    echo "nvcc $(nvcc_version)"
    echo "flags $(flags_line)"
    echo "full $(full_hash)"
    echo "fatbin $(sha256sum "$2" | cut -d' ' -f1)"
  } >"$1"
}

compile() { # $1 = output fatbin, $2 = ptxas log
  nice "$NVCC" --threads "$NVCC_THREADS" "${NVCC_FLAGS[@]}" "${gencode[@]}" -o "$1" "$here/kernels/gotree.cu" 2>"$2" || { cat "$2" >&2; return 1; }
  if ! grep -qE ' 0 bytes spill stores, 0 bytes spill loads' "$2"; then
    echo "build_kernels: no ptxas -v report in $2" >&2
    return 1
  fi
  if grep -qE '[1-9][0-9]* bytes spill (stores|loads)' "$2"; then
    grep -E 'spill|Compiling entry' "$2" | grep -B1 -E '[1-9][0-9]* bytes spill' >&2 || true
    echo "build_kernels: ptxas reports register spills (see above)" >&2
    return 1
  fi
  if grep -qiE 'warning' "$2"; then
    grep -iE 'warning' "$2" >&2
    echo "build_kernels: compiler warnings (see above)" >&2
    return 1
  fi
}

if [[ $mode == build ]] && [[ -f "$fatbin" && -f "$hashfile" ]] &&
   grep -qxF "sources $(source_hash)" "$hashfile" && grep -qxF "flags $(flags_line)" "$hashfile"; then
  echo "build_kernels: kernels.fatbin is current (sources $(source_hash | cut -c1-12))"
  exit 0
fi

setup_nvcc
echo "build_kernels: $(nvcc_version)" >&2

if [[ $mode == check ]]; then
  tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
  compile "$tmp/k.fatbin" "$tmp/ptxas.log"
  want=$(grep '^full ' "$hashfile" | cut -d' ' -f2 || true)
  got=$(full_hash)
  if [[ "$want" != "$got" ]]; then
    echo "build_kernels --check: cuda/kernels.fatbin is stale: committed hash $want, sources+nvcc give $got; run 'make kernels'" >&2
    exit 1
  fi
  want=$(grep '^fatbin ' "$hashfile" | cut -d' ' -f2 || true)
  got=$(sha256sum "$tmp/k.fatbin" | cut -d' ' -f1)
  if [[ "$want" != "$got" ]]; then
    echo "build_kernels --check: the rebuilt fatbin ($got) differs from the committed one ($want) although sources, nvcc and flags agree" >&2
    exit 1
  fi
  echo "build_kernels --check: ok ($(grep -c 'Compiling entry' "$tmp/ptxas.log") entries compiled, 0 spills, fatbin identical)"
  exit 0
fi

t0=$(date +%s)
mkdir -p "$root/build"
compile "$fatbin.tmp" "$root/build/ptxas.log"
mv "$fatbin.tmp" "$fatbin"
write_hashfile "$hashfile" "$fatbin"
echo "build_kernels: wrote cuda/kernels.fatbin ($(wc -c <"$fatbin") bytes) in $(( $(date +%s) - t0 ))s"
