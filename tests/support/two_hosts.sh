# Two "hosts" on one machine for the e2e tests: network namespaces on a Linux bridge, an rsh
# launcher for Open MPI that enters them, and byte counters for what crossed. Sourced after
# e2e_lib.sh (uses SCRATCH and fail); not a test itself. See docs: /work/shared/REFERENCE.md,
# "Two hosts on one machine".
#
#   th_setup            create h1, h2; or SKIP (print "SKIP: reason", exit 77) where this
#                       machine cannot: not root, no iproute2 or unshare to be had, network
#                       namespaces or bridges not permitted or not supported; or FAIL (exit 1)
#                       where it can and the set-up still goes wrong
#   th_mpirun SECS ARGS mpirun across the two hosts, 2 slots each, TCP between them
#   th_bytes            bytes (rx + tx) through both namespaces' links so far, "h1 h2"
#   th_cleanup          remove everything th_setup made (runs from the EXIT trap by itself)
#
# Names carry this shell's pid, so runs never share an object and a run killed with SIGKILL
# leaves objects that the next run removes (their pid is gone). The subnet is the first free one
# of 10.213.77-86.0/24; choosing it and creating the objects happen under a lock (flock on this
# file), so concurrent runs get different subnets. The hostfile names the hosts by IP address,
# which Open MPI 4.1 accepts, so /etc/hosts is never edited.
# shellcheck shell=bash

TH_PREFIX=mpitrain-th
TH_ID=$$
TH_NS1=$TH_PREFIX-$TH_ID-h1         # network namespaces
TH_NS2=$TH_PREFIX-$TH_ID-h2
TH_BR=mtbr$TH_ID                     # bridge (interface names: at most 15 characters)
TH_V1=mth1$TH_ID TH_V2=mth2$TH_ID    # root-namespace ends of the veth pairs
# shellcheck disable=SC2034  # read through eval in th_setup
TH_P1=mtp1$TH_ID TH_P2=mtp2$TH_ID    # their peers, moved into the namespaces
TH_SUBNET='' TH_IP1='' TH_IP2='' TH_BRIP='' TH_AGENT=''
TH_MADE=0

th_skip() { echo "SKIP: $*"; exit 77; }
th_ip() { ip "$@" || fail "ip $*"; }

# Processes still inside one of our namespaces (orteds or ranks of a killed run).
th_kill_in() {
  local pids
  pids=$(ip netns pids "$1" 2>/dev/null || true)
  # shellcheck disable=SC2086
  [ -z "$pids" ] || kill -9 $pids 2>/dev/null || true
}

th_cleanup() {
  [ "$TH_MADE" = 1 ] || return 0
  th_kill_in "$TH_NS1"; th_kill_in "$TH_NS2"
  ip netns del "$TH_NS1" 2>/dev/null || true   # deleting a namespace deletes its veth pair
  ip netns del "$TH_NS2" 2>/dev/null || true
  ip link del "$TH_V1" 2>/dev/null || true
  ip link del "$TH_V2" 2>/dev/null || true
  ip link del "$TH_BR" 2>/dev/null || true
  TH_MADE=0
}

# Objects of earlier runs whose shell is gone (killed before its trap could run).
th_remove_stale() {
  local ns pid dev
  for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep "^$TH_PREFIX-" || true); do
    pid=${ns#"$TH_PREFIX"-}; pid=${pid%%-*}
    kill -0 "$pid" 2>/dev/null && continue
    th_kill_in "$ns"; ip netns del "$ns" 2>/dev/null || true
  done
  for dev in $(ip -o link show 2>/dev/null | awk -F': ' '{print $2}' | sed 's/@.*//' \
               | grep -E '^mt(br|h1|h2)[0-9]+$' || true); do
    pid=${dev#mt??}
    kill -0 "$pid" 2>/dev/null || ip link del "$dev" 2>/dev/null || true
  done
}

th_pick_subnet() {
  local n used
  used=$( { ip -4 -o addr show; ip -4 route show table all; } 2>/dev/null)
  for n in $(seq 77 86); do
    if ! grep -q "10\.213\.$n\." <<< "$used"; then
      TH_SUBNET=10.213.$n.0/24 TH_IP1=10.213.$n.11 TH_IP2=10.213.$n.12 TH_BRIP=10.213.$n.1
      return 0
    fi
  done
  return 1
}

# An error of "ip netns add" or "ip link add" that means this machine cannot (no capability in
# this container, no such kernel support) rather than a broken set-up: SKIP with it, else FAIL.
th_skip_or_fail() {  # th_skip_or_fail WHAT ERROR_FILE
  local err
  err=$(cat "$2")
  th_cleanup; exec {TH_LOCK_FD}>&-
  grep -Eq 'not permitted|Permission denied|not supported' <<< "$err" &&
    th_skip "cannot create $1: $err"
  fail "cannot create $1: $err"
}

th_setup() {
  [ "$(id -u)" = 0 ] || th_skip "not root: network namespaces need CAP_NET_ADMIN and CAP_SYS_ADMIN"
  if ! command -v ip > /dev/null; then
    command -v apt-get > /dev/null ||
      th_skip "no ip command (iproute2), and no apt-get to install it"
    echo "installing iproute2 (no ip command)"
    { timeout 120 apt-get update -qq && DEBIAN_FRONTEND=noninteractive \
        timeout 120 apt-get install -y -qq iproute2; } > "$SCRATCH/apt.log" 2>&1 || true
    if ! command -v ip > /dev/null; then
      cat "$SCRATCH/apt.log"
      # Only a network that apt cannot reach excuses it: Debian always has iproute2.
      grep -Eq 'Temporary failure resolving|Could not (resolve|connect)|Network is unreachable' \
        "$SCRATCH/apt.log" && th_skip "no ip command (iproute2), and apt reaches no repository"
      fail "apt-get install iproute2 did not give an ip command"
    fi
  fi
  command -v unshare > /dev/null || th_skip "no unshare command (util-linux)"
  # The probe and the whole set-up hold the lock, so two runs never pick the same subnet.
  exec {TH_LOCK_FD}< "${BASH_SOURCE[0]}"
  if command -v flock > /dev/null; then
    timeout 30 flock "$TH_LOCK_FD" || fail "two_hosts.sh lock held by another run for 30 s"
  fi
  th_remove_stale
  TH_MADE=1   # from here on, cleanup removes whatever part exists
  ip netns add "$TH_NS1" 2> "$SCRATCH/netns.err" ||
    th_skip_or_fail "a network namespace" "$SCRATCH/netns.err"
  ip link add "$TH_BR" type bridge 2> "$SCRATCH/bridge.err" ||
    th_skip_or_fail "a bridge" "$SCRATCH/bridge.err"
  th_pick_subnet || fail "no free subnet in 10.213.77-86.0/24"
  th_ip netns add "$TH_NS2"
  th_ip addr add "$TH_BRIP/24" dev "$TH_BR"
  th_ip link set "$TH_BR" up
  local i ns v p addr
  for i in 1 2; do
    eval "ns=\$TH_NS$i v=\$TH_V$i p=\$TH_P$i addr=\$TH_IP$i"
    th_ip link add "$v" type veth peer name "$p"
    th_ip link set "$p" netns "$ns"
    th_ip link set "$v" master "$TH_BR"
    th_ip link set "$v" up
    th_ip -n "$ns" link set lo up
    th_ip -n "$ns" addr add "$addr/24" dev "$p"
    th_ip -n "$ns" link set "$p" up
  done
  exec {TH_LOCK_FD}>&-
  th_write_agent
  # The bridge must forward between the two ports before anything is launched.
  local ok=0
  command -v ping > /dev/null || ok=1  # nothing to check with
  for i in $(seq 50); do
    [ $ok = 1 ] && break
    if ip netns exec "$TH_NS1" ping -c1 -W1 "$TH_IP2" > /dev/null 2>&1 &&
       ip netns exec "$TH_NS2" ping -c1 -W1 "$TH_BRIP" > /dev/null 2>&1; then ok=1; break; fi
    sleep 0.1
  done
  if [ $ok = 0 ]; then
    ip -s link; ip -n "$TH_NS1" addr; fail "h1 cannot reach h2 through the bridge"
  fi
  echo "two hosts: h1=$TH_IP1 (netns $TH_NS1), h2=$TH_IP2 (netns $TH_NS2), bridge $TH_BR $TH_BRIP"
}

# The launcher Open MPI runs instead of ssh: "agent HOST COMMAND..." runs COMMAND (a shell
# command line, as ssh would get it) in HOST's namespace, with HOST's own hostname (UTS
# namespace): with one shared hostname the orteds share a session directory and crash.
th_write_agent() {
  TH_AGENT=$SCRATCH/th_agent.sh
  cat > "$TH_AGENT" <<EOF
#!/bin/sh
host=\$1; shift
case \$host in
  h1|$TH_IP1) ns=$TH_NS1 name=h1 ;;
  h2|$TH_IP2) ns=$TH_NS2 name=h2 ;;
  *) echo "th_agent: unknown host \$host" >&2; exit 1 ;;
esac
echo "th_agent: \$host -> \$ns: \$*" >> "$SCRATCH/th_agent.log"
exec ip netns exec "\$ns" unshare --uts sh -c "hostname \$name && exec sh -c \"\\\$0\"" "\$*"
EOF
  chmod +x "$TH_AGENT"
  printf '%s slots=2\n%s slots=2\n' "$TH_IP1" "$TH_IP2" > "$SCRATCH/th_hostfile"
}

th_mpirun() {  # th_mpirun SECONDS MPIRUN-ARGS...: killed after SECONDS
  local limit=$1; shift
  # shellcheck disable=SC2086  # MPIRUN is a command line (mpirun --oversubscribe --bind-to none)
  timeout -k 5 "$limit" env OMPI_MCA_plm_rsh_agent="$TH_AGENT" OMPI_ALLOW_RUN_AS_ROOT=1 \
    OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 $MPIRUN --hostfile "$SCRATCH/th_hostfile" --map-by ppr:2:node \
    --mca plm_rsh_no_tree_spawn 1 \
    --mca btl tcp,vader,self --mca btl_tcp_if_include "$TH_SUBNET" \
    --mca oob_tcp_if_include "$TH_SUBNET" -x OMP_NUM_THREADS=1 "$@" || {
    local rc=$?
    [ $rc = 124 ] || [ $rc = 137 ] && echo "th_mpirun: killed after $limit s" >&2
    return $rc
  }
}

th_bytes() {
  local v1=/sys/class/net/$TH_V1/statistics v2=/sys/class/net/$TH_V2/statistics
  echo $(( $(cat "$v1/rx_bytes") + $(cat "$v1/tx_bytes") )) \
       $(( $(cat "$v2/rx_bytes") + $(cat "$v2/tx_bytes") ))
}

# Chain onto the EXIT trap already set (e2e_lib's, which removes SCRATCH): our cleanup first.
th_chain_exit_trap() {
  local -a prev=()
  eval "prev=($(trap -p EXIT))"  # trap -- 'COMMAND' EXIT
  # shellcheck disable=SC2064  # the earlier command is meant to be expanded now
  trap "th_cleanup; ${prev[2]:-}" EXIT
}
th_chain_exit_trap
trap 'exit 130' INT
trap 'exit 143' TERM
