#!/usr/bin/env bash
# gotree GPU check: one command on a machine with an NVIDIA GPU (made for
# one H200, driver 580 / CUDA 13.0), no Go toolchain, no network. It runs
# programs built beforehand on a build machine with tests/gpu/prepare.sh:
#
#   1. correctness (the cuda package's tests, one top-level test at a time,
#      each under its own deadline): kernel resources; every dtype x
#      op (ring, tree; LL, Simple; 2, 4, 8 ranks as goroutines sharing the
#      GPU, each rank its own stream; in and out of place; poisoned outputs;
#      fresh random inputs; misaligned buffers); broadcast, reduce,
#      allgather, reducescatter; float32 allreduce from 4 B to
#      GOTREE_GPU_MAXBYTES with ring, tree and auto; a kernel timeout.
#   2. benchmark: allreduce time and busbw per size against the HBM limit
#      from the device-to-device copy bandwidth measured in the same run.
#   3. gotree perf --device (the prebuilt CLI): 2 ranks as processes on the
#      GPU, on one host (CUDA IPC) and as two hosts (proxies), every size
#      checked (#wrong).
#   4. torch: the extension is built against this machine's torch and the
#      prebuilt libgotree.so (in the background from the start), then
#      tests/gpu/torch_check.py with one process per rank on the GPU: 2
#      ranks on one host (CUDA IPC) and 2 ranks as two hosts
#      (GOTREE_HOST_ID; host-staged proxies over loopback TCP).
#      TORCH_CHECK_CONFIGS="2 1,4 1,2 2" adds 4 ranks. Then
#      tests/gpu/train_check.py (DDP, FSDP2, DTensor, torch.compile against
#      a single-process reference) the same ways (TRAIN_CHECK_CONFIGS; an
#      empty value skips either).
#   5. NVRTC (in the background: compiling every kernel takes about a
#      minute), the package's CPU tests, and a table, printed last; every
#      log packed into $OUT/logs.tgz.
#
# From a session with the device tool: build here (tests/gpu/prepare.sh),
# then run `bash tests/gpu/device_check.sh` there with carry
# ["tests/gpu/bin"] and a timeout_s of CHECK_BUDGET + 30. The tracked
# files are close to the tool's 64 MiB: take docs/ out of the index for
# the call (docs/gpu/README.md says how, and what the last runs showed).
#
# The whole check ends within CHECK_BUDGET seconds (default 420):
# each stage's own limit is cut to what is left, and a stage that would
# start with under 20 s left is skipped and reported as such.
#
# Environment: GOTREE_GPU_MAXBYTES (default 256 MiB), GOTREE_GPU_RANKS
# (default 2,4,8), GOTREE_GPU_TIMEOUT (kernel wait, default 10 s),
# CHECK_STAGES (which stages, default "correct nvrtc cpu bench
# perf torch"), OUT (where logs.tgz goes; default a temporary folder).
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
out=${OUT:-$(mktemp -d)}
mkdir -p "$out"
logs=$(mktemp -d /tmp/gotree-check.XXXXXX)
start=$(date +%s)
budget=${CHECK_BUDGET:-420}
stages=" ${CHECK_STAGES:-correct nvrtc cpu bench perf torch} "
rc=0
summary="$logs/summary.txt"
: >"$summary"

elapsed() { echo $(($(date +%s) - start)); }
note() { echo "[$(elapsed)s] $*" | tee -a "$summary"; }
# limit WANT: seconds a stage may take, cut to the budget; 0 to skip.
limit() {
  local left=$((budget - $(elapsed) - 15))
  if ((left < 20)); then echo 0; else echo $((left < $1 ? left : $1)); fi
}
finish() {
  note "done; rc=$rc"
  tar -czf "$out/logs.tgz" -C "$logs" . 2>/dev/null
  cp "$summary" "$out/summary.txt"
  [[ -s "$logs/bench.txt" ]] && { echo; cat "$logs/bench.txt"; }
  echo "(the lines above, without the table: $out/summary.txt)"
  [[ $rc == 0 ]] && echo "device_check: PASS" || echo "device_check: FAIL"
  exit $rc
}
trap 'rc=1; note "interrupted"; finish' TERM INT

# The prebuilt programs (tests/gpu/prepare.sh), unpacked outside $OUT.
bindir="$logs/../gotree-bin.$$"
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
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv,noheader 2>&1 | tee -a "$summary"
python3 -c 'import sys, torch; print("python", sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda, torch.cuda.is_available())' 2>&1 | tee -a "$summary"

export GOTREE_REQUIRE_GPU=1
export GOTREE_GPU_MAXBYTES=${GOTREE_GPU_MAXBYTES:-268435456}
export GOTREE_GPU_RANKS=${GOTREE_GPU_RANKS:-2,4,8}
export GOTREE_GPU_TIMEOUT=${GOTREE_GPU_TIMEOUT:-10}
export GOTREE_GPU_REPORT="$logs/bench.txt"
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
  [[ -n "$nv" ]] && export GOTREE_NVRTC="$nv" && note "NVRTC $nv"
fi

# The torch extension builds on the CPUs while the GPU tests run, two ways
# at once, each in its own copy of the sources: with the compiler the
# environment names ($CXX, else c++) and with the system's /usr/bin/g++.
# The torch stage runs a one-rank smoke test with each build in that order
# and uses the first that passes; the summary says which did and why the
# other did not. (On this workplace's H200 image $CXX is /opt/gcc/bin/g++,
# which links libstdc++ statically: before setup.py hid those copies with
# -Wl,--exclude-libs,ALL, its build crashed at the first std::ostream <<.)
ext_variants=(env system)
declare -A ext_pid ext_dir
ext_build() {
  local v=$1 dir="$logs/../gotree-ext-$v.$$"
  mkdir -p "$dir" && cp -r "$root/setup.py" "$root/capi" "$root/python" "$dir/"
  cp "$bindir/libgotree.so" "$dir/python/gotree/libgotree.so"
  rm -f "$dir"/python/gotree/_C*.so
  local envs=(GOTREE_SKIP_GO=1)
  if [[ $v == system ]]; then
    [[ -x /usr/bin/g++ ]] || { echo "no /usr/bin/g++" >"$logs/ext-$v.log"; return 1; }
    envs+=(CC=/usr/bin/gcc CXX=/usr/bin/g++)
  fi
  ext_dir[$v]=$dir
  (cd "$dir" && env "${envs[@]}" timeout 300 python3 setup.py build_ext --inplace >"$logs/ext-$v.log" 2>&1) &
  ext_pid[$v]=$!
}
if [[ $stages == *" torch "* ]]; then
  for v in "${ext_variants[@]}"; do ext_build "$v"; done
  echo "CC=${CC:-} CXX=${CXX:-}: $("${CXX:-c++}" --version 2>&1 | head -1)" | tee -a "$summary"
fi

# NVRTC (the fallback where the fatbin has no code for the GPU) compiles
# every kernel on one CPU: it runs in the background from the start.
nvrtc_pid=
if [[ $stages == *" nvrtc "* ]]; then
  (cd "$root/cuda" && timeout -k 5 180 "$bin" -test.v -test.count=1 -test.timeout 175s -test.run '^TestGPUNVRTC$' \
    >"$logs/nvrtc.log" 2>&1) &
  nvrtc_pid=$!
fi

# gotest NAME WANT REGEX: one top-level test under its own deadline.
gotest() {
  local name=$1 want=$2 re=$3 t
  t=$(limit "$want")
  if ((t == 0)); then note "$name: SKIPPED (budget)"; rc=1; return; fi
  (cd "$root/cuda" && timeout -k 5 "$t" "$bin" -test.v -test.count=1 -test.timeout "$((t - 2))s" -test.run "$re" \
    >"$logs/$name.log" 2>&1)
  local r=$?
  ((r == 0)) || rc=1
  note "$name: rc=$r $(grep -cE '^\s*--- PASS' "$logs/$name.log") passed, $(grep -cE '^\s*--- FAIL' "$logs/$name.log") failed"
  grep -E '^\s*--- FAIL|gpu_test.go:[0-9]+|panic|timed out|^FAIL' "$logs/$name.log" | head -8 | cut -c1-400 | tee -a "$summary"
}

# Order: what says most about a first run comes first.
if [[ $stages == *" correct "* ]]; then
  gotest kernels 30 '^TestGPUKernels$'
  grep -m1 'SMs' "$logs/kernels.log" | tee -a "$summary"
  gotest timeout 20 '^TestGPUTimeout$'
  gotest collectives 45 '^TestGPUCollectives$'
fi
if [[ $stages == *" perf "* ]]; then
  for cfg in "2 1 64M" "2 2 16M"; do
    read -r n hosts top <<<"$cfg"
    t=$(limit 40)
    if ((t == 0)); then note "perf $n ranks on $hosts host(s): SKIPPED (budget)"; rc=1; continue; fi
    timeout -k 5 "$t" "$bindir/gotree" perf --nproc "$n" --hosts "$hosts" --device 0 -b 4 -e "$top" -f 8 -n 5 -w 1 -c 1 \
      --timeout "$((t - 5))s" >"$logs/perf-$n-$hosts.txt" 2>&1
    r=$?
    ((r == 0)) || rc=1
    note "perf --device, $n ranks on $hosts host(s): rc=$r"
    # size, out-of-place time/algbw/busbw/#wrong, plan; then the verdict or errors
    grep -E '^ +[0-9]' "$logs/perf-$n-$hosts.txt" | awk '{printf "%12s %10s %8s %8s %6s %12s %3s\n", $1, $6, $7, $8, $9, $(NF-1), $NF}' | tee -a "$summary"
    grep -E 'Out of bounds|Avg bus|gotree perf:|rror' "$logs/perf-$n-$hosts.txt" | head -6 | cut -c1-400 | tee -a "$summary"
  done
fi
# torch_ranks N HOSTS PORT LIMIT GDB [CHECK]: tests/gpu/CHECK_check.py
# (default torch) as N processes; returns how many failed. Logs:
# CHECK-N-HOSTS-R.log (.gdb.log when GDB is not empty: under cuda-gdb).
torch_ranks() {
  local n=$1 hosts=$2 port=$3 t=$4 gdb=$5 check=${6:-torch} r fails=0 pids=() logv=()
  for ((r = 0; r < n; r++)); do
    local cmd=(python3 -X faulthandler "$root/tests/gpu/${check}_check.py") log="$logs/$check-$n-$hosts-$r.log"
    if [[ -n $gdb ]]; then
      cmd=(cuda-gdb -q -batch -ex 'handle SIGURG nostop noprint pass' -ex 'handle SIGPIPE nostop noprint pass'
        -ex 'set pagination off' -ex run -ex 'bt 40' -ex 'info threads' --args "${cmd[@]}")
      log="$logs/$check-$n-$hosts-$r.gdb.log"
    fi
    env RANK=$r WORLD_SIZE=$n LOCAL_RANK=$r MASTER_ADDR=127.0.0.1 MASTER_PORT=$port PYTHONUNBUFFERED=1 \
      GOTREE_DEBUG=${GOTREE_DEBUG:-INFO} GOTREE_HOST_ID="gpuhost$((r % hosts))" PYTHONPATH="$pyroot" \
      timeout -k 5 "$t" "${cmd[@]}" >"$log" 2>&1 &
    pids+=($!)
    logv+=("$log")
  done
  for ((r = 0; r < n; r++)); do
    wait "${pids[r]}"
    local st=$?
    ((st == 0)) || fails=$((fails + 1))
    ((st > 128)) && echo "(exit status $st: signal $((st - 128)))" >>"${logv[r]}"
  done
  return $fails
}

if [[ $stages == *" torch "* ]]; then
  if ! python3 -c 'import torch; assert torch.cuda.is_available()' 2>/dev/null; then
    note "torch: SKIPPED (torch sees no GPU)"
    rc=1
  else
    # The first build whose one-rank smoke test passes.
    ext=
    for v in "${ext_variants[@]}"; do
      [[ -n ${ext_pid[$v]:-} ]] || { note "torch: extension ($v): $(head -1 "$logs/ext-$v.log")"; continue; }
      if ! wait "${ext_pid[$v]}"; then
        note "torch: extension ($v): build failed:"; tail -5 "$logs/ext-$v.log" | cut -c1-300 | tee -a "$summary"
        continue
      fi
      so=$(ls "${ext_dir[$v]}"/python/gotree/_C*.so)
      note "torch: extension ($v) built; linked by: $(grep -E ' -shared ' "$logs/ext-$v.log" | tail -1 | cut -d' ' -f1-8); $(nm -C --defined-only "$so" 2>/dev/null | grep -c ' std::basic_ostream') std::basic_ostream functions inside; $(ldd "$so" | grep -o 'libstdc++[^ ]* => [^ ]*')"
      env RANK=0 WORLD_SIZE=1 MASTER_ADDR=127.0.0.1 MASTER_PORT=$((29650 + ${#v})) PYTHONPATH="${ext_dir[$v]}/python" \
        timeout -k 5 60 python3 -X faulthandler -c '
import torch, torch.distributed as dist, gotree
torch.cuda.set_device(0)
dist.init_process_group("gotree", rank=0, world_size=1)
x = torch.arange(5.0); dist.all_reduce(x)
y = torch.arange(7.0, device="cuda"); dist.all_reduce(y); torch.cuda.synchronize()
assert x.tolist() == list(range(5)) and y.tolist() == list(range(7)), (x, y)
dist.destroy_process_group()
print("smoke ok")' >"$logs/smoke-$v.log" 2>&1
      r=$?
      note "torch: one-rank smoke test ($v): rc=$r $(grep -m1 -E 'smoke ok|Error|error' "$logs/smoke-$v.log" | cut -c1-200)"
      if ((r == 0)); then ext=$v; break; fi
      rc=1
    done
  fi
  if [[ -n ${ext:-} ]]; then
    note "torch: checks with the extension built by ($ext)"
    pyroot=${ext_dir[$ext]}/python
    port=29700
    IFS=, read -ra cfgs <<<"${TORCH_CHECK_CONFIGS-2 1,2 2}"
    for cfg in "${cfgs[@]}"; do
      read -r n hosts <<<"$cfg"
      t=$(limit 60)
      if ((t == 0)); then note "torch $n ranks on $hosts host(s): SKIPPED (budget)"; rc=1; continue; fi
      port=$((port + 1))
      torch_ranks "$n" "$hosts" "$port" "$t" ""
      fails=$?
      ((fails == 0)) || rc=1
      note "torch, $n ranks on $hosts host(s): $fails rank(s) failed"
      grep -h "torch_check.*:\|rank 0 all_reduce\|  rank" "$logs"/torch-$n-$hosts-*.log | grep -v "torch_check rank [0-9]*: " | head -20 | cut -c1-300 | tee -a "$summary"
      if ((fails > 0)); then
        for ((r = 0; r < n; r++)); do tail -12 "$logs/torch-$n-$hosts-$r.log" | cut -c1-300 | tee -a "$summary"; done
        # An illegal address (found at some later synchronisation): again
        # with a synchronisation after every collective, which names it.
        if grep -q "illegal memory access" "$logs"/torch-$n-$hosts-*.log; then
          t=$(limit 60)
          if ((t > 0)); then
            mkdir -p "$logs/sync"
            port=$((port + 1))
            TORCH_CHECK_SYNC=1 CUDA_LAUNCH_BLOCKING=1 logs="$logs/sync" torch_ranks "$n" "$hosts" "$port" "$t" ""
            note "torch, $n ranks on $hosts host(s), synchronising after every collective:"
            for ((r = 0; r < n; r++)); do
              grep -B2 -m1 "illegal memory access" "$logs/sync/torch-$n-$hosts-$r.log" | cut -c1-250 | tee -a "$summary"
            done
          fi
        fi
        # A rank that died of a signal: again under cuda-gdb, for the
        # native stack where it died.
        if grep -q "signal 11\|signal 6)\|Fatal Python error" "$logs"/torch-$n-$hosts-*.log && command -v cuda-gdb >/dev/null; then
          t=$(limit 60)
          if ((t > 0)); then
            port=$((port + 1))
            torch_ranks "$n" "$hosts" "$port" "$t" gdb
            note "torch, $n ranks on $hosts host(s), under cuda-gdb:"
            for ((r = 0; r < n; r++)); do
              grep -E "^#[0-9]+ |signal|SIG" "$logs/torch-$n-$hosts-$r.gdb.log" | head -30 | cut -c1-250 | tee -a "$summary"
            done
          fi
        fi
      fi
    done
    # Training: DDP, FSDP2, DTensor and a compiled function of functional
    # collectives against a single-process reference (train_check.py).
    IFS=, read -ra cfgs <<<"${TRAIN_CHECK_CONFIGS-2 1,2 2}"
    for cfg in "${cfgs[@]}"; do
      read -r n hosts <<<"$cfg"
      t=$(limit 90)
      if ((t == 0)); then note "training $n ranks on $hosts host(s): SKIPPED (budget)"; rc=1; continue; fi
      port=$((port + 1))
      torch_ranks "$n" "$hosts" "$port" "$t" "" train
      fails=$?
      ((fails == 0)) || rc=1
      note "training (train_check.py), $n ranks on $hosts host(s): $fails rank(s) failed"
      grep -h "^train_check rank [0-9]*/\|^  rank" "$logs"/train-$n-$hosts-*.log | head -12 | cut -c1-300 | tee -a "$summary"
      if ((fails > 0)); then
        for ((r = 0; r < n; r++)); do tail -8 "$logs/train-$n-$hosts-$r.log" | cut -c1-300 | tee -a "$summary"; done
      fi
    done
  fi
fi
if [[ $stages == *" correct "* ]]; then
  gotest dtypes 60 '^TestGPUDtypes$'
  gotest sizes 60 '^TestGPUSizes$'
fi
if [[ $stages == *" bench "* ]]; then
  gotest bench 60 '^TestGPUBench$'
fi
if [[ $stages == *" cpu "* ]]; then
  t=$(limit 30)
  if ((t > 0)); then
    (cd "$root/cuda" && timeout "$t" "$bin" -test.count=1 -test.timeout "$((t - 2))s" -test.skip 'TestGPU' >"$logs/cpu.log" 2>&1) || rc=1
    note "cpu tests of the package: $(tail -1 "$logs/cpu.log")"
  fi
fi
if [[ -n $nvrtc_pid ]]; then
  wait "$nvrtc_pid"
  r=$?
  ((r == 0)) || rc=1
  note "nvrtc: rc=$r $(grep -E 'gpu_test.go|^--- ' "$logs/nvrtc.log" | head -3 | cut -c1-200 | tr '\n' ' ')"
fi
finish
