# Sourced by tests: a single-node SLURM cluster on localhost, all state in a temp dir
# (REFERENCE.md "Single-node SLURM on localhost"). Usage:
#   source tests/support/slurm_cluster.sh
#   slurm_cluster_start || { echo "SKIP: $SLURM_SKIP_REASON"; exit 0; }
#   sbatch ...            # SLURM_CONF is exported, pointing at the generated slurm.conf
# slurm_cluster_start installs slurm-wlm and munge with apt-get when they are missing and it can
# (root, apt-get present); it returns non-zero with SLURM_SKIP_REASON set (and the daemon logs
# printed) when the cluster cannot be brought up for an environmental reason.
# An EXIT trap (chained before any EXIT trap already set) cancels the jobs, stops every daemon it
# started by PID, kills what is left of the jobs (processes carrying this SLURM_CONF) and removes
# the temp dir.
# shellcheck shell=bash
# shellcheck disable=SC2034  # SLURM_SKIP_REASON and SLURM_NODE are for the caller

SLURM_TMP=
SLURM_SKIP_REASON=
SLURM_NODE=
_slurm_pids=()
_slurm_prev_exit_trap=

_slurm_have_all() {
  local c
  for c in munged slurmctld slurmd sbatch scontrol squeue sinfo scancel srun; do
    command -v "$c" > /dev/null 2>&1 || return 1
  done
}

# Makes slurm-wlm and munge available; returns 1 with SLURM_SKIP_REASON when it cannot.
slurm_ensure_installed() {
  case ":$PATH:" in *:/usr/sbin:*) ;; *) PATH=$PATH:/usr/sbin:/sbin ;; esac
  _slurm_have_all && return 0
  if [ "$(id -u)" != 0 ] || ! command -v apt-get > /dev/null 2>&1; then
    SLURM_SKIP_REASON="slurm-wlm/munge not installed (and not root with apt-get to install them)"
    return 1
  fi
  local log=${TMPDIR:-/tmp}/mpitrain-slurm-apt.$$.log
  echo "installing slurm-wlm and munge with apt-get (about 20-40 s)..."
  if ! DEBIAN_FRONTEND=noninteractive timeout 300 apt-get install -y -qq slurm-wlm munge > "$log" 2>&1; then
    DEBIAN_FRONTEND=noninteractive timeout 120 apt-get update -qq >> "$log" 2>&1
    DEBIAN_FRONTEND=noninteractive timeout 300 apt-get install -y -qq slurm-wlm munge >> "$log" 2>&1
  fi
  if ! _slurm_have_all; then
    tail -5 "$log" >&2
    rm -f "$log"
    SLURM_SKIP_REASON="apt-get install slurm-wlm munge failed (no network or no package?)"
    return 1
  fi
  rm -f "$log"
}

_slurm_free_port() {  # a TCP port nobody listens on, in 20000-59999
  local p i
  for i in $(seq 1 50); do
    p=$(( 20000 + (RANDOM * 32768 + RANDOM + i) % 40000 ))
    if command -v ss > /dev/null 2>&1; then
      ss -Hltn "sport = :$p" 2> /dev/null | grep -q . || { echo "$p"; return; }
    else
      (exec 3<> "/dev/tcp/127.0.0.1/$p") 2> /dev/null || { echo "$p"; return; }
    fi
  done
  echo $(( 20000 + $$ % 40000 ))
}

_slurm_logs() {
  local f
  for f in munged.log slurmctld.log slurmd.log; do
    [ -f "$SLURM_TMP/$f" ] || continue
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

_slurm_start_fail() {  # _slurm_start_fail REASON: logs, stop, return 1
  SLURM_SKIP_REASON=$1
  _slurm_logs
  slurm_cluster_stop
  return 1
}

# Starts munged, slurmctld and slurmd; waits (20 s at most) until the node is idle.
slurm_cluster_start() {
  slurm_ensure_installed || return 1
  local prev
  prev=$(trap -p EXIT)
  if [ -n "$prev" ]; then
    local -a words=()
    eval "words=($prev)"  # trap -- 'COMMAND' EXIT
    _slurm_prev_exit_trap=${words[2]}
  fi
  trap _slurm_exit_trap EXIT

  SLURM_TMP=$(mktemp -d "${TMPDIR:-/tmp}/mpitrain-slurm.XXXXXX")
  local d=$SLURM_TMP
  mkdir -p "$d/state" "$d/spool" "$d/munge"
  chmod 0755 "$d" "$d/munge"  # munged wants its socket directory searchable by all

  # munge: its own key, socket, pid, log and seed files.
  dd if=/dev/urandom bs=1 count=1024 of="$d/munge/munge.key" status=none 2> /dev/null
  chown root: "$d/munge/munge.key" 2> /dev/null || true
  chmod 0400 "$d/munge/munge.key"
  munged -F --socket="$d/munge/munge.sock" --key-file="$d/munge/munge.key" \
         --pid-file="$d/munge/munged.pid" --log-file="$d/munged.log" \
         --seed-file="$d/munge/munged.seed" > "$d/munged.out" 2>&1 &
  _slurm_pids+=($!)
  local deadline=$((SECONDS + 10))
  until [ -S "$d/munge/munge.sock" ]; do
    kill -0 "${_slurm_pids[0]}" 2> /dev/null || { cat "$d/munged.out" >&2; _slurm_start_fail "munged exited at start"; return 1; }
    [ "$SECONDS" -lt "$deadline" ] || { _slurm_start_fail "munged socket did not appear in 10 s"; return 1; }
    sleep 0.1
  done

  SLURM_NODE=$(hostname -s)
  local cpus mem ctld_port slurmd_port
  cpus=$(getconf _NPROCESSORS_ONLN 2> /dev/null || nproc --all)  # (nproc obeys OMP_NUM_THREADS)
  [ "${cpus:-0}" -ge 2 ] || cpus=2  # tests run 2 tasks; config_overrides accepts more than there are
  mem=$(awk '/^MemTotal:/ {printf "%d", $2 / 1024 * 0.9}' /proc/meminfo)
  [ "${mem:-0}" -gt 20000 ] && mem=20000
  ctld_port=$(_slurm_free_port)
  slurmd_port=$(_slurm_free_port)
  [ "$slurmd_port" != "$ctld_port" ] || slurmd_port=$((ctld_port + 1))
  cat > "$d/slurm.conf" <<EOF
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
  local state=
  while :; do
    state=$(timeout 3 sinfo -h -n "$SLURM_NODE" -o %t 2> /dev/null || true)
    [ "$state" = idle ] && break
    local p
    for p in "${_slurm_pids[@]}"; do
      if ! kill -0 "$p" 2> /dev/null; then
        cat "$d/slurmctld.out" "$d/slurmd.out" >&2
        _slurm_start_fail "a SLURM daemon exited at start (node state '${state}')"
        return 1
      fi
    done
    if [ "$SECONDS" -ge "$deadline" ]; then
      cat "$d/slurmctld.out" "$d/slurmd.out" >&2
      _slurm_start_fail "node $SLURM_NODE not idle after 20 s (state '${state}')"
      return 1
    fi
    sleep 0.2
  done
  echo "slurm: node $SLURM_NODE idle ($cpus CPUs), conf $SLURM_CONF"
}
