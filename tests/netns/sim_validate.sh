#!/usr/bin/env bash
# Checks `gotree sim` against `gotree perf` across 2, 3 and 4 network-namespace
# nodes (docs/crossover/netns/README.md):
#
#   sim_validate.sh OUTDIR GOTREE [REPS] [RATE]
#
# 0. `gotree tune` on this machine into OUTDIR/tuning.json (the machine may
#    not be the one that measured docs/crossover/tuning.json), unless
#    SIM_TUNING names a tuning file: the per-call cost, and the link and
#    copy bandwidths until step 3 fits the link's (its loopback TCP rate
#    varied by 40% between runs minutes apart; the namespaces' did not);
# 1. calibration: 2 nodes, ring, CAL_MIN (default 4 B; the first run in
#    docs/crossover/netns used 1K) to 16 KiB, on 1 channel and on 2 channels
#    (GOTREE_MIN_NCHANNELS=2), at RATE (default 1gbit) and without a rate
#    limit: a message through tc's token bucket costs more than one without
#    it, even where the bucket covers it (run-2026-12-06c: 4 KiB on 2 nodes
#    37-66 us at 1 Gbit/s, 32-34 without); where 4 nodes outnumber the
#    cores, also 4 nodes, ring, 4-256 B, 1 channel (the wait of a rank that
#    a message wakes for a core the others' waits hold: --oversub-us); and
#    2 nodes, ring, 4 and 16 MiB without a limit (the bandwidth of one
#    connection through the namespaces: --link-gbps, for both rates);
# 2. validation: 2, 3, 4 nodes x ring, tree x 4 B .. 16 MiB (x4), at RATE and
#    without a rate limit, REPS repetitions (default 5) in fresh namespaces;
# 3. fit --link-gbps, --hop-us and --msg-cpu-us (and --oversub-us) on step 1
#    only (sim_calibrate.py), for each rate on that rate's calibration;
# 4. `gotree sim --perf` with those for both rates (one host of $(nproc) cores, one message at a time on the
#    namespaces' network: --serial-net), and the comparison tables
#    (sim_compare.py).
#
# Writes OUTDIR/raw/{cal-1ch,cal-2ch,cal-over,cal-link,measured}/{RATE,none}/*.json (perf --json
# of rank 0, with commands.txt), OUTDIR/tuning.json and tune.log (step 0),
# OUTDIR/env.txt, OUTDIR/calibration[-none].txt, OUTDIR/sim-RATE.json and OUTDIR/comparison-RATE.md. Needs root; uses the
# netns.sh lock, so it waits for other netns.sh users. Keep the machine
# otherwise idle: the emulated nodes share its cores.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
out=${1:?OUTDIR}; bin=${2:?GOTREE}; reps=${3:-5}; rate=${4:-1gbit}
mkdir -p "$out/raw"
out=$(cd "$out" && pwd)
bin=$(cd "$(dirname "$bin")" && pwd)/$(basename "$bin")
tuning=${SIM_TUNING:-}
if [ -z "$tuning" ]; then
  tuning=$out/tuning.json
  "$bin" tune -out "$tuning" >"$out/tune.log" 2>&1
fi
tuning=$(cd "$(dirname "$tuning")" && pwd)/$(basename "$tuning")
{
  echo "date: $(date -u +%FT%TZ)"
  echo "host: $(uname -r), $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-)"
  echo "gotree: $(git -C "$repo" rev-parse HEAD 2>/dev/null || echo '?')"
  echo "tc: $(tc -V 2>&1 | head -1); netns.sh shapes each namespace link both ways: tbf rate $rate burst 1mb latency ${NETNS_TBF_LATENCY:-50ms}"
  echo "GOTREE_* set: $(env | grep '^GOTREE_' | sort | tr '\n' ' ')"
  echo "tuning: $tuning"
  echo "load before: $(cat /proc/loadavg)"
} >"$out/env.txt"

pm=("$here/perf_matrix.sh")
sizes=(-b "${CAL_MIN:-4}" -e 16K -f 4 -n 20 -w 5 -c 1)
full=(-b 4 -e 16M -f 4 -n 20 -w 5 -c 1)
for r in "$rate" none; do
  [ "$r" = none ] && [ "$rate" = none ] && continue
  "${pm[@]}" "$out/raw/cal-1ch" "$r" "$bin" "$reps" 2 ring "${sizes[@]}"
  PERF_ENV=GOTREE_MIN_NCHANNELS=2 "${pm[@]}" "$out/raw/cal-2ch" "$r" "$bin" "$reps" 2 ring "${sizes[@]}"
  if [ "$(nproc)" -lt 4 ]; then
    "${pm[@]}" "$out/raw/cal-over" "$r" "$bin" "$reps" 4 ring -b 4 -e 256 -f 4 -n 20 -w 5 -c 1
  fi
done
"${pm[@]}" "$out/raw/cal-link" none "$bin" "$reps" 2 ring -b 4M -e 16M -f 4 -n 10 -w 3 -c 1
"${pm[@]}" "$out/raw/measured" "$rate" "$bin" "$reps" "2 3 4" "ring tree" "${full[@]}"
[ "$rate" != none ] && "${pm[@]}" "$out/raw/measured" none "$bin" "$reps" "2 3 4" "ring tree" "${full[@]}"
echo "load after: $(cat /proc/loadavg)" >>"$out/env.txt"

# --serial-net: the namespaces' veth pairs and bridge carry one message at a
# time (tests/netns/exchange.py: two ranks sending to each other at once take
# twice as long as one-way hops here, while over loopback they overlap).
sim=("$bin" sim --links cpu --tuning "$tuning" --ranks-per-node 1 --mtu 1500 --host-cores "$(nproc)" --serial-net)
# fit_compare R CALFILE TITLE NIC-ARGS...: fit the latency parameters on R's
# calibration runs (into CALFILE), simulate with them and compare with R's
# measurements. Without a limit it fits the link bandwidth first (cal-link),
# into $link, which the fit at RATE then takes.
link=""
fit_compare() {
  local r=$1 cal=$2 title=$3 lat
  shift 3
  local over=() bw=()
  [ -d "$out/raw/cal-over/$r" ] && over=("$out/raw/cal-over/$r")
  [ "$r" = none ] && bw=(--link "$out/raw/cal-link/none")
  # shellcheck disable=SC2086
  lat=$(python3 "$here/sim_calibrate.py" "${bw[@]}" "$out/raw/cal-1ch/$r" "$out/raw/cal-2ch/$r" "${over[@]}" -- "${sim[@]}" $link "$@" 2>"$cal")
  if [ "$r" = none ]; then
    link=$(grep -o -- '--link-gbps [0-9.]*' <<<"$lat")
  else
    lat="$link $lat"
  fi
  echo "fit: $lat" >>"$cal"
  echo "sim: ${sim[*]} $lat" >>"$cal"
  # shellcheck disable=SC2086
  "${sim[@]}" $lat --perf --json --nodes 2,3,4 -b 4 -e 16M -f 4 "$@" >"$out/sim-$r.json"
  python3 "$here/sim_compare.py" "$out/raw/measured/$r" "$out/sim-$r.json" --title "$title" >"$out/comparison-$r.md"
}
if [ "$rate" = none ]; then
  fit_compare none "$out/calibration.txt" "no rate limit" --nic-gbps 0
else
  fit_compare none "$out/calibration-none.txt" "no rate limit" --nic-gbps 0
  fit_compare "$rate" "$out/calibration.txt" "tbf $rate per namespace link and direction" --nic-rate "$rate" --nic-burst 1M
fi
tail -n 1 "$out/comparison-$rate.md" "$out/comparison-none.md"
