#!/usr/bin/env bash
# Software agreement at start-up: a rank reporting another build id (MPITRAIN_FAULT=version), or
# ranks started with different options (an MPMD launch, as a node with another INI file would),
# stop every rank before any work with exit 2 and a table of the differing fields, ranks and
# hosts; the out-dir is not created.
source "$SOURCE_DIR/tests/support/e2e_lib.sh"
require_fault_injection
# shellcheck disable=SC2046
set -- $(tiny_args) --steps 2

MPITRAIN_FAULT=version:rank=1 run_trainer 2 "$SCRATCH/version.log" "$@" --out-dir "$SCRATCH/version"
cat "$SCRATCH/version.log"
[ "$rc" = 2 ] || fail "build id mismatch: exit $rc, expected 2"
grep -q "the ranks do not run the same software" "$SCRATCH/version.log" || fail "no mismatch message"
grep -Eq "^  build_id +[^ ]+ +0 +[^ ]+$" "$SCRATCH/version.log" || fail "rank 0's build id not in the table"
grep -Eq "^ +[^ ]+ \(fault injection: version\) +1 +[^ ]+$" "$SCRATCH/version.log" || fail "rank 1's build id not in the table"
[ "$(grep -c "the ranks do not run the same software" "$SCRATCH/version.log")" = 1 ] || fail "reported more than once"
[ ! -e "$SCRATCH/version" ] || fail "the out-dir was created"
echo "ok: another build id on rank 1: exit 2 with the table"

set +e
$MPIRUN -np 2 "$TRAINER" "$@" --out-dir "$SCRATCH/config" : -np 1 "$TRAINER" "$@" --out-dir "$SCRATCH/config" \
  --lr 1e-4 > "$SCRATCH/config.log" 2>&1
rc=$?
set -e
cat "$SCRATCH/config.log"
[ "$rc" = 2 ] || fail "configuration mismatch: exit $rc, expected 2"
grep -Eq "^  config +[0-9a-f]{16} +0-1 " "$SCRATCH/config.log" || fail "ranks 0-1's configuration hash not in the table"
grep -Eq "^ +[0-9a-f]{16} +2 " "$SCRATCH/config.log" || fail "rank 2's configuration hash not in the table"
grep -q "options of rank 2 that differ from rank 0's: \[lr = 0.0001\]" "$SCRATCH/config.log" || fail "the differing option is not named"
[ ! -e "$SCRATCH/config" ] || fail "the out-dir was created"
echo "ok: another --lr on rank 2: exit 2 with the table and the option"
