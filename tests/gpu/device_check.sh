#!/usr/bin/env bash
# gotree GPU check: one command, < 8 minutes, on a machine with an NVIDIA
# GPU (made for one H200, driver 580 / CUDA 13.0), no Go toolchain, no
# network. It runs the cuda package's tests, built beforehand on a build
# machine with tests/gpu/prepare.sh (go test -c -o tests/gpu/bin/cuda.test ./cuda/):
#
#   1. correctness: every dtype x op (ring, tree; LL, Simple; 2, 4, 8 ranks
#      as goroutines sharing the GPU, each rank its own stream; in and out
#      of place; poisoned outputs; fresh random inputs; misaligned buffers);
#      broadcast, reduce, allgather, reducescatter; float32 allreduce from
#      4 B to 1 GiB with ring, tree and auto; a kernel timeout; NVRTC.
#   2. benchmark: allreduce time and busbw per size against the HBM limit
#      from the device-to-device copy bandwidth measured in the same run.
#   3. torch: builds the extension against this machine's torch and the
#      prebuilt tests/gpu/bin/libgotree.so, then tests/gpu/torch_check.py
#      with one process per rank on the GPU: 2 ranks on one host (CUDA
#      IPC), and 2 ranks as two hosts (GOTREE_HOST_ID; host-staged proxies
#      over loopback TCP). 4 ranks: TORCH_CHECK_CONFIGS="2 1,4 1,2 2".
#   4. gotree perf --device (the prebuilt CLI): 2 ranks as processes on the
#      GPU, on one host (CUDA IPC) and as two hosts (proxies), every size
#      checked (#wrong).
#   5. the table, printed last.
#
# Environment: GOTREE_GPU_MAXBYTES (default 1 GiB), GOTREE_GPU_RANKS
# (default 2,4,8), OUT (a folder for logs; default a temporary one).
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
out=${OUT:-$(mktemp -d)}
mkdir -p "$out"
start=$(date +%s)

# The prebuilt programs (tests/gpu/prepare.sh), unpacked into $out/bin.
bindir="$out/bin"
mkdir -p "$bindir"
for f in cuda.test libgotree.so gotree; do
  src="$root/tests/gpu/bin/$f"
  if [[ -f "$src.gz" ]]; then
    gunzip -c "$src.gz" >"$bindir/$f"
  elif [[ -f "$src" ]]; then
    cp "$src" "$bindir/$f"
  else
    echo "device_check: $src.gz is missing: run tests/gpu/prepare.sh on a machine with Go first" >&2
    exit 2
  fi
  chmod +x "$bindir/$f"
done
bin="$bindir/cuda.test"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null || echo "device_check: nvidia-smi not found"

export GOTREE_REQUIRE_GPU=1
export GOTREE_GPU_MAXBYTES=${GOTREE_GPU_MAXBYTES:-1073741824}
export GOTREE_GPU_RANKS=${GOTREE_GPU_RANKS:-2,4,8}
export GOTREE_GPU_TIMEOUT=${GOTREE_GPU_TIMEOUT:-20}
export GOTREE_GPU_REPORT="$out/bench.txt"
# Load every kernel when the module loads: spinning kernels must never
# wait for a lazy load.
export CUDA_MODULE_LOADING=EAGER
# NVRTC for TestGPUNVRTC: torch's CUDA wheels carry one.
if [[ -z "${GOTREE_NVRTC:-}" ]]; then
  nv=$(python3 - <<'PY' 2>/dev/null
import glob, os
try:
    import nvidia
    for base in nvidia.__path__:
        for p in sorted(glob.glob(os.path.join(base, "**", "libnvrtc.so*"), recursive=True)):
            if "builtins" not in p and "alt" not in p:
                print(p); break
        else:
            continue
        break
except Exception:
    pass
PY
)
  [[ -n "$nv" ]] && export GOTREE_NVRTC="$nv" && echo "device_check: NVRTC $nv"
fi

cd "$root/cuda"   # the tests read testdata/ and build_kernels.sh from here
rc=0
echo "== correctness"
timeout 290 "$bin" -test.v -test.count=1 -test.timeout 285s \
  -test.run 'TestGPUKernels|TestGPUNVRTC|TestGPUDtypes|TestGPUCollectives|TestGPUSizes|TestGPUTimeout' \
  >"$out/correctness.log" 2>&1 || rc=1
grep -E '^(=== RUN|--- |ok|FAIL|PASS)|gpu_test.go' "$out/correctness.log" | grep -v '^=== RUN' | tail -40
echo "== CPU tests of the package (binding fakes, emulated kernels, fatbin freshness)"
timeout 60 "$bin" -test.count=1 -test.timeout 55s -test.skip 'TestGPU' \
  >"$out/cpu.log" 2>&1 || rc=1
tail -3 "$out/cpu.log"
echo "== benchmark"
timeout 150 "$bin" -test.v -test.count=1 -test.timeout 145s -test.run 'TestGPUBench' >"$out/bench.log" 2>&1 || rc=1
grep -E '^(--- |ok|FAIL)' "$out/bench.log"
echo "== gotree perf --device: one process per rank, no torch"
for cfg in "2 1 64M" "2 2 16M"; do
  read -r n hosts top <<<"$cfg"
  echo "-- $n ranks on $hosts host(s)"
  timeout 60 "$bindir/gotree" perf --nproc "$n" --hosts "$hosts" --device 0 -b 4 -e "$top" -f 8 -n 5 -w 1 -c 1 --timeout 45s \
    >"$out/perf-$n-$hosts.txt" 2>&1 || rc=1
  # size, out-of-place time/algbw/busbw/#wrong, plan; then the verdict or errors
  grep -E '^ +[0-9]' "$out/perf-$n-$hosts.txt" | awk '{print $1, $6, $7, $8, $9, $(NF-1), $NF}' | column -t
  grep -E 'Out of bounds|Avg bus|gotree perf:' "$out/perf-$n-$hosts.txt" | head -6
done
echo "== torch: CUDA tensors, one process per rank"
if python3 -c 'import torch; assert torch.cuda.is_available()' 2>/dev/null; then
  cp "$bindir/libgotree.so" "$root/python/gotree/libgotree.so"
  if (cd "$root" && GOTREE_SKIP_GO=1 timeout 240 python3 setup.py build_ext --inplace >"$out/ext.log" 2>&1); then
    port=29700
    IFS=, read -ra cfgs <<<"${TORCH_CHECK_CONFIGS:-2 1,2 2}"
    for cfg in "${cfgs[@]}"; do
      read -r n hosts <<<"$cfg"
      port=$((port + 1))
      pids=()
      for ((r = 0; r < n; r++)); do
        env RANK=$r WORLD_SIZE=$n LOCAL_RANK=$r MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
          GOTREE_HOST_ID="gpuhost$((r % hosts))" PYTHONPATH="$root/python" \
          timeout 75 python3 "$root/tests/gpu/torch_check.py" >"$out/torch-$n-$hosts-$r.log" 2>&1 &
        pids+=($!)
      done
      for p in "${pids[@]}"; do wait "$p" || rc=1; done
      echo "-- $n ranks on $hosts host(s):"
      grep -h "torch_check\|rank 0 all_reduce\|  rank" "$out"/torch-$n-$hosts-*.log | head -20
      grep -lh "Error\|Traceback" "$out"/torch-$n-$hosts-*.log >/dev/null 2>&1 && tail -5 "$out"/torch-$n-$hosts-0.log
    done
  else
    rc=1
    echo "device_check: building the torch extension failed:"; tail -20 "$out/ext.log"
  fi
else
  echo "device_check: skipped (torch sees no GPU)"
fi
echo "== $(( $(date +%s) - start )) s; logs in $out"
if [[ -s "$out/bench.txt" ]]; then
  echo
  cat "$out/bench.txt"
else
  tail -20 "$out/bench.log"
fi
[[ $rc == 0 ]] && echo "device_check: PASS" || echo "device_check: FAIL"
exit $rc
