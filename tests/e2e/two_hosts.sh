#!/usr/bin/env bash
# Two "hosts" on one machine: network namespaces h1 and h2 on a bridge, Open MPI's TCP transport
# between them (tests/support/two_hosts.sh). 4 ranks as --dp 2 --pp 2 put pipeline stage 0
# (ranks 0, 1) on h1 and stage 1 (ranks 2, 3) on h2, so every activation and its gradient
# crosses the link, while each stage's data-parallel pair stays inside its host (vader).
# Checks: per-step losses are bit-identical to the same layout on one host: the transport moves
# bytes and changes no arithmetic; the rank layout, communicators and collective algorithms
# (chosen by communicator size and message size) are the same, so every fp32 sum is done in the
# same order. And the bytes through the links exceed the activations and activation gradients
# of the 5 steps. Prints "SKIP: reason" and passes where namespaces cannot be made (not root,
# no iproute2). Everything it creates is removed on exit (checked at the end).
# shellcheck shell=bash disable=SC2086  # $MPIRUN is a command line
source "$SOURCE_DIR/tests/support/e2e_lib.sh"
source "$SOURCE_DIR/tests/support/two_hosts.sh"
steps=5
read -ra args <<< "$(tiny_args)"
args+=(--steps "$steps" --dp 2 --pp 2)
th_setup  # first, so that a SKIP costs nothing

# Single host, root namespace.
timeout -k 5 60 $MPIRUN -np 4 "$TRAINER" "${args[@]}" --out-dir "$SCRATCH/one" \
  > "$SCRATCH/one.log" 2>&1 || { cat "$SCRATCH/one.log"; fail "single-host run exited non-zero"; }
metric "$SCRATCH/one/metrics.jsonl" loss > "$SCRATCH/one.loss"

# Placement: ranks 0, 1 (stage 0) on h1, ranks 2, 3 (stage 1) on h2, each host with its hostname.
# (stderr apart: mpirun may warn there, e.g. a harmless setpgid race in its rsh launcher.)
# shellcheck disable=SC2016
th_mpirun 30 -np 4 sh -c 'echo $OMPI_COMM_WORLD_RANK $(hostname)' > "$SCRATCH/placement" \
  2> "$SCRATCH/placement.err" || { cat "$SCRATCH/placement" "$SCRATCH/placement.err" \
  "$SCRATCH/th_agent.log"; fail "placement probe exited non-zero"; }
sort "$SCRATCH/placement" | paste -sd' ' > "$SCRATCH/placement.sorted"
[ "$(cat "$SCRATCH/placement.sorted")" = "0 h1 1 h1 2 h2 3 h2" ] \
  || { cat "$SCRATCH/placement" "$SCRATCH/placement.err"; fail "ranks not placed 0,1 on h1 and 2,3 on h2"; }
echo "placement (rank host): $(cat "$SCRATCH/placement.sorted")"

read -r before1 before2 < <(th_bytes)
start=$(date +%s.%N)
th_mpirun 60 -np 4 "$TRAINER" "${args[@]}" --out-dir "$SCRATCH/two" > "$SCRATCH/two.log" 2>&1 \
  || { cat "$SCRATCH/two.log" "$SCRATCH/th_agent.log"; fail "two-host run exited non-zero"; }
end=$(date +%s.%N)
read -r after1 after2 < <(th_bytes)
metric "$SCRATCH/two/metrics.jsonl" loss > "$SCRATCH/two.loss"
echo "two-host trainer run: $(awk -v a="$start" -v b="$end" 'BEGIN{printf "%.2f", b-a}') s"

echo "losses: one host | two hosts"; paste "$SCRATCH/one.loss" "$SCRATCH/two.loss"
[ "$(wc -l < "$SCRATCH/two.loss")" = $steps ] || fail "expected $steps losses from the two-host run"
cmp -s "$SCRATCH/one.loss" "$SCRATCH/two.loss" \
  || fail "losses differ (max relative $(max_rel_diff "$SCRATCH/one.loss" "$SCRATCH/two.loss"))"

# Activations (forward) and their gradients (backward) of every micro-batch, fp32: per step the
# whole global batch, global-batch-size x seq-len x d-model floats, crosses once each way.
activation_bytes=$((steps * 2 * 8 * 32 * 64 * 4))
crossed1=$((after1 - before1)) crossed2=$((after2 - before2))
echo "bytes through h1's link $crossed1, h2's link $crossed2 (activations: $activation_bytes)"
if [ $crossed1 -le $activation_bytes ] || [ $crossed2 -le $activation_bytes ]; then
  fail "too few bytes crossed between the hosts"
fi

th_cleanup
left=$( { ip netns list; ip -o link show; } | grep -E "$TH_PREFIX-$TH_ID-|mt(br|h1|h2|p1|p2)$TH_ID\b" || true)
[ -z "$left" ] || fail "left behind after cleanup: $left"
echo "two hosts: losses identical (to the 9 digits metrics.jsonl keeps), $crossed2 bytes crossed, cleaned up"
