#!/usr/bin/env bash
# A staging copy that does not fit in host memory: the saves fall back to synchronous ones, with
# one line saying why, and the run goes on. The run is put into a memory cgroup (v1, or v2 where
# the memory controller is delegated), a child of this script's own. The copy is large (GPT-2 L4
# C1536, 113 M parameters: params, adam_m and adam_v, 1.36 GB, on rank 0, which writes
# everything) so that the limit can sit well clear of both sides: twice the largest rank's peak
# RSS of a synchronous run (an overestimate of what the two ranks hold, which share their
# libraries' pages) plus 64 MB plus S / 0.75 / 4 (S the copy) leaves about S / 0.75 / 4 plus those
# shared pages available (measured: 0.98 GB, CUDA build 0.97 GB), well below the S / 0.75 =
# 1.83 GB the copy would need, while the synchronous run stays ~0.5 GB under the limit.
# Skips (77) where no child cgroup with a memory limit can be made (not root, read-only).
source "$SOURCE_DIR/tests/support/e2e_lib.sh"
set -- --train-data "$DATA_DIR/train.h5" --val-data '' --n-layer 4 --n-head 12 --d-model 1536 \
  --seq-len 32 --global-batch-size 4 --micro-batch-size 2 --eval-interval 0 --sample-tokens 0 \
  --peak-gflops 100 --threads 1 --steps 1 --save-interval 1

# What the run holds without the copy: synchronous saves, the largest rank's peak RSS.
run_trainer 2 "$SCRATCH/sync.log" "$@" --async-save false --out-dir "$SCRATCH/sync"
[ "$rc" = 0 ] || { cat "$SCRATCH/sync.log"; fail "the synchronous run exited $rc"; }
peak_mib=$(sed -n 's/.*"peak_rss_mib": \([0-9.]*\).*/\1/p' "$SCRATCH/sync/report.json")
staging_mib=$(( 113 * 3 * 4 * 1000000 / 1048576 ))
limit=$(awk -v p="$peak_mib" -v s="$staging_mib" \
  'BEGIN { printf "%.0f", (2 * p + 64 + s / 0.75 / 4) * 1048576 }')

# A child of this process's memory cgroup with that limit; its path into $cg, its limit file
# into $limit_file.
cg="" limit_file=""
v1=$(sed -n 's/^[0-9]*:memory:\(.*\)/\1/p' /proc/self/cgroup)
v2=$(sed -n 's/^0::\(.*\)/\1/p' /proc/self/cgroup)
if [ -n "$v1" ] && [ -w "/sys/fs/cgroup/memory$v1" ]; then
  cg=/sys/fs/cgroup/memory${v1%/}/mpitrain-e2e-$$ limit_file=memory.limit_in_bytes
elif [ -n "$v2" ] && grep -qw memory "/sys/fs/cgroup${v2%/}/cgroup.subtree_control" 2>/dev/null; then
  cg=/sys/fs/cgroup${v2%/}/mpitrain-e2e-$$ limit_file=memory.max
fi
if [ -z "$cg" ] || ! mkdir "$cg" 2>/dev/null || ! echo "$limit" > "$cg/$limit_file" 2>/dev/null; then
  [ -n "$cg" ] && rmdir "$cg" 2>/dev/null
  echo "SKIP: no memory cgroup can be made here (${cg:-none found writable})"
  exit 77
fi
trap 'rmdir "$cg" 2>/dev/null || true; rm -rf "$SCRATCH"' EXIT
echo "cgroup $cg: limit $((limit / 1048576)) MiB (the synchronous run's peak RSS $peak_mib MiB a rank)"

set +e
bash -c 'echo $$ > "$1/cgroup.procs" && shift && exec "$@"' _ "$cg" $MPIRUN -np 2 "$TRAINER" \
  "$@" --out-dir "$SCRATCH/limited" > "$SCRATCH/limited.log" 2>&1
rc=$?
set -e
[ "$rc" = 0 ] || { cat "$SCRATCH/limited.log"; fail "the run under the limit exited $rc"; }
grep "^checkpoints: synchronous saves" "$SCRATCH/limited.log" ||
  { cat "$SCRATCH/limited.log"; fail "no line saying the saves are synchronous"; }
grep -qE "^checkpoints: synchronous saves, not --async-save: the staging copy needs 1\.3[0-9] GB of host memory on a node, more than 3/4 of the [0-9.]+ GB available" "$SCRATCH/limited.log" ||
  fail "the line does not say why (the copy's size against the memory available)"
grep -q "in the background" "$SCRATCH/limited.log" && fail "a save went to the background anyway"
[ "$(grep -c "^saved checkpoint step" "$SCRATCH/limited.log")" = 1 ] || fail "not 1 save"
echo "ok: under a $((limit / 1048576)) MiB cgroup limit the saves were synchronous, said why, and committed"
