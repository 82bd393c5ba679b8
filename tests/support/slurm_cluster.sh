# Sourced by tests: a single-node SLURM cluster on localhost, all state in a temp dir
# (REFERENCE.md "Single-node SLURM on localhost"). Usage:
#   source tests/support/slurm_cluster.sh
#   slurm_cluster_start   # returns only once the node is idle; else SKIPs or FAILs the test
#   sbatch ...            # SLURM_CONF is exported, pointing at the generated slurm.conf
# slurm_cluster_start installs slurm-wlm and munge with apt-get when they are missing. It SKIPs
# (prints "SKIP: <reason>", exits 77) only where this machine cannot have SLURM: not root, no
# apt-get, or apt cannot get the packages (none in its sources, or no repository reachable).
# Everything else is a FAIL (prints "FAIL: slurm: <reason>" and the daemon logs, exits 1): apt
# failing to install packages it has and can reach, and, once installed, anything that keeps the
# cluster from coming up (the generated slurm.conf, munged, slurmctld, slurmd, the node state).
# slurm_ensure_installed alone (the same SKIP or FAIL) lets a test skip before its other work.
# An EXIT trap (chained before any EXIT trap already set) cancels the jobs, stops every daemon it
# started by PID, kills what is left of the jobs (processes carrying this SLURM_CONF) and removes
# the temp dir.
# shellcheck shell=bash
# shellcheck disable=SC2034  # SLURM_NODE is for the caller

SLURM_TMP=
SLURM_NODE=
_slurm_pids=()
_slurm_prev_exit_trap=
# What apt prints for a download that failed for want of a network.
_SLURM_NET_ERRORS='Temporary failure resolving|Could not resolve|Could not connect'
_SLURM_NET_ERRORS+='|Unable to connect|Connection timed out|Connection failed|Connection refused'
_SLURM_NET_ERRORS+='|Network is unreachable|No route to host'

_slurm_skip() { echo "SKIP: $*"; exit 77; }

_slurm_fail() {  # _slurm_fail REASON: the reason and the daemon logs, exit 1 (the trap stops all)
  echo "FAIL: slurm: $*" >&2
  _slurm_logs
  exit 1
}

_slurm_have_all() {
  local c
  for c in munged slurmctld slurmd sbatch scontrol squeue sinfo scancel srun; do
    command -v "$c" > /dev/null 2>&1 || return 1
  done
}

_slurm_apt() {  # apt-get, waiting up to 2 min for a concurrent apt to let go of its lock
  DEBIAN_FRONTEND=noninteractive timeout 300 apt-get -o DPkg::Lock::Timeout=120 "$@"
}

# Prints why apt cannot get slurm-wlm and munge and returns 0 where the reason is this machine's:
# a package apt has no candidate for (not in its sources, or never listed for want of a
# network), or downloads that all failed for want of a network. Returns 1 otherwise: apt has the
# packages and reached the repositories, so its failure is a real one.
_slurm_apt_unavailable() {  # _slurm_apt_unavailable APT_LOG
  local pkg cand fetch
  fetch=$(grep 'Failed to fetch' "$1" || true)
  for pkg in slurm-wlm munge; do
    cand=$(apt-cache policy "$pkg" 2> /dev/null | awk '$1 == "Candidate:" {print $2}')
    case $cand in
      '' | '(none)') echo "apt has no package $pkg${fetch:+ ($(head -1 <<< "$fetch"))}"; return 0 ;;
    esac
  done
  [ -n "$fetch" ] || return 1
  if grep -Evq "$_SLURM_NET_ERRORS" <<< "$fetch"; then return 1; fi
  echo "apt reaches no repository: $(head -1 <<< "$fetch")"
}

# Makes slurm-wlm and munge available, with apt-get where they are missing; SKIPs where this
# machine cannot have them, FAILs where apt has them and still does not install them.
slurm_ensure_installed() {
  case ":$PATH:" in *:/usr/sbin:*) ;; *) PATH=$PATH:/usr/sbin:/sbin ;; esac
  _slurm_have_all && return 0
  [ "$(id -u)" = 0 ] || _slurm_skip "slurm-wlm/munge not installed, and not root to install them"
  command -v apt-get > /dev/null 2>&1 ||
    _slurm_skip "slurm-wlm/munge not installed, and no apt-get to install them"
  local log=${TMPDIR:-/tmp}/mpitrain-slurm-apt.$$.log why
  echo "installing slurm-wlm and munge with apt-get (about 20-40 s)..."
  if ! _slurm_apt install -y -qq slurm-wlm munge > "$log" 2>&1; then
    _slurm_apt update -qq >> "$log" 2>&1 || true  # stale lists: refresh them and try again
    _slurm_apt install -y -qq slurm-wlm munge >> "$log" 2>&1 || true
  fi
  if _slurm_have_all; then rm -f "$log"; return 0; fi
  if why=$(_slurm_apt_unavailable "$log"); then rm -f "$log"; _slurm_skip "$why"; fi
  echo "----- last lines of the apt-get log -----" >&2
  tail -20 "$log" >&2
  rm -f "$log"
  _slurm_fail "apt-get install slurm-wlm munge failed, although apt has both packages" \
    "and reaches its repositories"
}

# A TCP port no socket uses, in any state, below the ephemeral range: a port in that range can be
# the local end of some connection (not a listener, so a listener check passes it) and slurmctld's
# bind then fails with "Address already in use" (it failed a CI run of e2e_slurm_requeue).
_slurm_free_port() {
  local lo=32768 hi p i span
  read -r lo hi < /proc/sys/net/ipv4/ip_local_port_range 2> /dev/null || true
  span=$(( lo > 21024 ? lo - 20000 : 40000 ))
  for i in $(seq 1 50); do
    p=$(( 20000 + (RANDOM * 32768 + RANDOM + i) % span ))
    if command -v ss > /dev/null 2>&1; then
      ss -Htan "sport = :$p" 2> /dev/null | grep -q . || { echo "$p"; return; }
    else
      (exec 3<> "/dev/tcp/127.0.0.1/$p") 2> /dev/null || { echo "$p"; return; }
    fi
  done
  echo $(( 20000 + $$ % span ))
}

_slurm_logs() {  # what the daemons said, and the slurm.conf they were given
  local f
  [ -n "$SLURM_TMP" ] || return 0
  for f in munged.out munged.log slurmctld.out slurmctld.log slurmd.out slurmd.log slurm.conf; do
    [ -s "$SLURM_TMP/$f" ] || continue
    echo "----- last lines of $f -----"
    tail -15 "$SLURM_TMP/$f"
  done >&2
}

# Cancels the jobs, stops the daemons by PID, removes the temp dir. Safe to call twice.
slurm_cluster_stop() {
  [ -n "$SLURM_TMP" ] || return 0
  local p deadline
  if [ ${#_slurm_pids[@]} -gt 0 ] && [ -f "$SLURM_TMP/slurm.conf" ]; then
    timeout 5 scancel --full --signal=KILL --user=root > /dev/null 2>&1 || true
    timeout 5 scancel --user=root > /dev/null 2>&1 || true
    deadline=$((SECONDS + 10))
    while [ "$SECONDS" -lt "$deadline" ] && \
          [ -n "$(timeout 3 squeue -h -o %i 2> /dev/null)" ]; do sleep 0.2; done
  fi
  for p in "${_slurm_pids[@]}"; do kill -TERM "$p" 2> /dev/null || true; done
  deadline=$((SECONDS + 5))
  for p in "${_slurm_pids[@]}"; do
    while kill -0 "$p" 2> /dev/null && [ "$SECONDS" -lt "$deadline" ]; do sleep 0.1; done
    kill -KILL "$p" 2> /dev/null || true
    wait "$p" 2> /dev/null || true
  done
  _slurm_pids=()
  # What the jobs left (slurmstepd, ranks) carries this SLURM_CONF in its environment.
  local me=$$ env
  for env in /proc/[0-9]*/environ; do
    p=${env#/proc/}; p=${p%/environ}
    [ "$p" = "$me" ] && continue
    if { tr '\0' '\n' < "$env"; } 2> /dev/null | grep -qxF "SLURM_CONF=$SLURM_TMP/slurm.conf"; then
      kill -KILL "$p" 2> /dev/null || true
    fi
  done
  rm -rf "$SLURM_TMP"
  SLURM_TMP=
}

_slurm_exit_trap() {
  local rc=$?
  slurm_cluster_stop
  [ -z "$_slurm_prev_exit_trap" ] || eval "$_slurm_prev_exit_trap"
  exit "$rc"
}

# Starts munged, slurmctld and slurmd; waits (20 s at most) until the node is idle. SKIPs or FAILs
# (see the top) instead of returning when it cannot.
slurm_cluster_start() {
  slurm_ensure_installed
  local prev
  prev=$(trap -p EXIT)
  if [ -n "$prev" ]; then
    local -a words=()
    eval "words=($prev)"  # trap -- 'COMMAND' EXIT
    _slurm_prev_exit_trap=${words[2]}
  fi
  trap _slurm_exit_trap EXIT

  SLURM_TMP=$(mktemp -d "${TMPDIR:-/tmp}/mpitrain-slurm.XXXXXX") || _slurm_fail "mktemp -d failed"
  local d=$SLURM_TMP
  mkdir -p "$d/state" "$d/spool" "$d/munge" || _slurm_fail "cannot make the state directories in $d"
  chmod 0755 "$d" "$d/munge"  # munged wants its socket directory searchable by all

  # munge: its own key, socket, pid, log and seed files.
  dd if=/dev/urandom bs=1 count=1024 of="$d/munge/munge.key" status=none 2> /dev/null ||
    _slurm_fail "cannot write the munge key"
  chown root: "$d/munge/munge.key" 2> /dev/null || true
  chmod 0400 "$d/munge/munge.key"
  munged -F --socket="$d/munge/munge.sock" --key-file="$d/munge/munge.key" \
         --pid-file="$d/munge/munged.pid" --log-file="$d/munged.log" \
         --seed-file="$d/munge/munged.seed" > "$d/munged.out" 2>&1 &
  _slurm_pids+=($!)
  local deadline=$((SECONDS + 10))
  until [ -S "$d/munge/munge.sock" ]; do
    kill -0 "${_slurm_pids[0]}" 2> /dev/null || _slurm_fail "munged exited at start"
    [ "$SECONDS" -lt "$deadline" ] || _slurm_fail "munged socket did not appear in 10 s"
    sleep 0.1
  done

  SLURM_NODE=$(hostname -s) || _slurm_fail "hostname -s failed"
  local cpus mem ctld_port slurmd_port
  cpus=$(getconf _NPROCESSORS_ONLN 2> /dev/null || nproc --all)  # (nproc obeys OMP_NUM_THREADS)
  [ "${cpus:-0}" -ge 2 ] || cpus=2  # tests run 2 tasks; config_overrides accepts more than there are
  mem=$(awk '/^MemTotal:/ {printf "%d", $2 / 1024 * 0.9}' /proc/meminfo)
  [ "${mem:-0}" -gt 20000 ] && mem=20000
  ctld_port=$(_slurm_free_port)
  slurmd_port=$(_slurm_free_port)
  [ "$slurmd_port" != "$ctld_port" ] || slurmd_port=$((ctld_port + 1))
  cat > "$d/slurm.conf" <<EOF || _slurm_fail "cannot write $d/slurm.conf"
ClusterName=mpitrain-test
SlurmctldHost=$SLURM_NODE(127.0.0.1)
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$d/munge/munge.sock
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=pmix
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
ReturnToService=2
SlurmdParameters=config_overrides
MailProg=/bin/true
StateSaveLocation=$d/state
SlurmdSpoolDir=$d/spool
SlurmctldPidFile=$d/slurmctld.pid
SlurmdPidFile=$d/slurmd.pid
SlurmctldLogFile=$d/slurmctld.log
SlurmdLogFile=$d/slurmd.log
SlurmctldTimeout=30
SlurmdTimeout=30
KillWait=5
NodeName=$SLURM_NODE NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=$mem State=UNKNOWN
PartitionName=test Nodes=$SLURM_NODE Default=YES MaxTime=INFINITE State=UP
EOF
  export SLURM_CONF=$d/slurm.conf

  slurmctld -D -i > "$d/slurmctld.out" 2>&1 &
  _slurm_pids+=($!)
  slurmd -D > "$d/slurmd.out" 2>&1 &
  _slurm_pids+=($!)

  deadline=$((SECONDS + 20))
  local state='' p
  while :; do
    state=$(timeout 3 sinfo -h -n "$SLURM_NODE" -o %t 2> /dev/null || true)
    [ "$state" = idle ] && break
    for p in "${_slurm_pids[@]}"; do
      kill -0 "$p" 2> /dev/null || _slurm_fail "a SLURM daemon exited at start (node: '$state')"
    done
    [ "$SECONDS" -lt "$deadline" ] || _slurm_fail "node $SLURM_NODE not idle after 20 s ('$state')"
    sleep 0.2
  done
  echo "slurm: node $SLURM_NODE idle ($cpus CPUs), conf $SLURM_CONF"
}
