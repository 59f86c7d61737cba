#!/usr/bin/env bash
# Emulated multi-node cluster on one machine: N network namespaces
# (gotree-n0 .. gotree-n<N-1>) joined by veth pairs through a bridge, each with
# its own address 10.77.0.<i+1>/24 and, optionally, a tc tbf rate limit on its
# link. Addresses exist only inside these namespaces and the bridge.
#
#   netns.sh up N [RATE]        create (RATE like 2gbit; omit for none)
#   netns.sh down               remove everything this script created
#   netns.sh run N [RATE] -- CMD...
#                               up, run CMD once per namespace in parallel
#                               (NODE_RANK, NNODES, MASTER_ADDR, NODE_ADDR and
#                               GOTREE_HOST_ID set; GOTREE_SOCKET_IFNAME=veth),
#                               wait for all, down, exit with the first failure.
#                               Cleans up on failure and on interrupt too.
#   netns.sh exec I -- CMD...   run CMD in namespace I
# With RATE, each direction of a namespace's link is a tbf of that rate,
# burst 1mb, and a queue of NETNS_TBF_LATENCY (default 50ms) at that rate.
# Needs root and iproute2.
set -euo pipefail
BR=gotreebr0
PREFIX=gotree-n
NET=10.77.0

need_root() {
  if [ "$(id -u)" != 0 ]; then echo "netns.sh: needs root (network namespaces)" >&2; exit 77; fi
  command -v ip >/dev/null || { echo "netns.sh: needs iproute2 (ip)" >&2; exit 77; }
}

down() {
  for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep "^${PREFIX}" || true); do
    ip netns del "$ns" 2>/dev/null || true
  done
  for l in $(ip -o link show 2>/dev/null | awk -F': ' '{print $2}' | cut -d@ -f1 | grep '^gtv' || true); do
    ip link del "$l" 2>/dev/null || true
  done
  ip link del "$BR" 2>/dev/null || true
}

up() {
  local n=$1 rate=${2:-}
  down
  ip link add "$BR" type bridge
  ip addr add "$NET.254/24" dev "$BR"
  ip link set "$BR" up
  for ((i = 0; i < n; i++)); do
    local ns="$PREFIX$i"
    ip netns add "$ns"
    ip link add "gtv$i" type veth peer name "gtp$i"
    ip link set "gtp$i" netns "$ns"
    ip netns exec "$ns" ip link set "gtp$i" name veth0
    ip netns exec "$ns" ip addr add "$NET.$((i + 1))/24" dev veth0
    ip netns exec "$ns" ip link set veth0 up
    ip netns exec "$ns" ip link set lo up
    ip link set "gtv$i" master "$BR"
    ip link set "gtv$i" up
    if [ -n "$rate" ]; then
      # Shape both directions: egress of the namespace end and of the bridge end.
      ip netns exec "$ns" tc qdisc add dev veth0 root tbf rate "$rate" burst 1mb latency "${NETNS_TBF_LATENCY:-50ms}"
      tc qdisc add dev "gtv$i" root tbf rate "$rate" burst 1mb latency "${NETNS_TBF_LATENCY:-50ms}"
    fi
  done
}

case "${1:-}" in
  up) need_root; up "$2" "${3:-}" ;;
  down) need_root; down ;;
  exec)
    need_root
    i=$2; shift 2; [ "${1:-}" = -- ] && shift
    exec ip netns exec "$PREFIX$i" "$@"
    ;;
  run)
    need_root
    n=$2; shift 2
    rate=""
    if [ "${1:-}" != -- ]; then rate=$1; shift; fi
    [ "${1:-}" = -- ] && shift
    trap down EXIT INT TERM
    up "$n" "$rate"
    pids=()
    for ((i = 0; i < n; i++)); do
      ip netns exec "$PREFIX$i" env NODE_RANK=$i NNODES=$n MASTER_ADDR=$NET.1 NODE_ADDR=$NET.$((i + 1)) \
        GOTREE_HOST_ID="netns-node$i" GOTREE_SOCKET_IFNAME="=veth0" "$@" &
      pids+=($!)
    done
    rc=0
    for p in "${pids[@]}"; do
      wait "$p" || { r=$?; [ $rc = 0 ] && rc=$r; }
    done
    exit $rc
    ;;
  *) sed -n '2,20p' "$0"; exit 2 ;;
esac
