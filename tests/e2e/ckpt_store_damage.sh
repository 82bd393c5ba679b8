#!/usr/bin/env bash
# The checkpoint store never loses what the user had: with every checkpoint damaged, --resume
# auto refuses (exit 2, naming them, the directories untouched) unless --overwrite, which starts
# fresh; a `latest` that is a directory (nothing the store writes) is refused before any work,
# with --resume auto and --resume DIR, instead of being resumed and failing at the next save.
source "$SOURCE_DIR/tests/support/e2e_lib.sh"
# shellcheck disable=SC2046
set -- $(tiny_args) --save-interval 2 --keep-last 0 --steps 4

expect_refused() {  # expect_refused NAME EXPECTED_TEXT TRAINER_ARGS...
  local name=$1 expected=$2; shift 2
  run_trainer 2 "$SCRATCH/$name.log" "$@"
  [ "$rc" = 2 ] || { cat "$SCRATCH/$name.log"; fail "$name: exit $rc, expected 2"; }
  grep -qF -- "$expected" "$SCRATCH/$name.log" || { cat "$SCRATCH/$name.log"; fail "$name: no '$expected'"; }
  grep -q '^step ' "$SCRATCH/$name.log" && fail "$name: training started"
  grep -q 'MPI_ABORT' "$SCRATCH/$name.log" && { cat "$SCRATCH/$name.log"; fail "$name: MPI_Abort"; }
  echo "ok: $name -> $(grep 'trainer: error:' "$SCRATCH/$name.log")"
}

# Every checkpoint damaged: step 4 truncated, step 2's checkpoint.h5 replaced by text.
run_trainer 2 "$SCRATCH/a.log" "$@" --out-dir "$SCRATCH/all"
[ "$rc" = 0 ] || { cat "$SCRATCH/a.log"; fail "first run exited $rc"; }
ckpts="$SCRATCH/all/checkpoints"
truncate -s 4096 "$ckpts/step-00000004/checkpoint.h5"
echo "not a checkpoint" > "$ckpts/step-00000002/checkpoint.h5"
before=$(cd "$ckpts" && find . -type f -exec md5sum {} + | sort)
expect_refused all_damaged \
  "every checkpoint in $ckpts is damaged (step-00000004, step-00000002, each named above); nothing was removed" \
  "$@" --out-dir "$SCRATCH/all" --resume auto
grep -q "step-00000002/checkpoint.h5: .*trying an older one" "$SCRATCH/all_damaged.log" ||
  fail "all_damaged: step 2's damage was not named"
[ "$(cd "$ckpts" && find . -type f -exec md5sum {} + | sort)" = "$before" ] ||
  fail "the refused run changed the damaged checkpoints"
run_trainer 2 "$SCRATCH/fresh.log" "$@" --out-dir "$SCRATCH/all" --resume auto --overwrite
[ "$rc" = 0 ] || { cat "$SCRATCH/fresh.log"; fail "--overwrite over damaged checkpoints exited $rc"; }
grep -q "every checkpoint in $ckpts is damaged; starting fresh over them (--overwrite)" \
  "$SCRATCH/fresh.log" || { cat "$SCRATCH/fresh.log"; fail "--overwrite: no notice"; }
grep -q '^step 4/4' "$SCRATCH/fresh.log" || fail "--overwrite: did not train from step 1"

# `latest` a directory.
run_trainer 2 "$SCRATCH/b.log" "$@" --out-dir "$SCRATCH/dir"
[ "$rc" = 0 ] || { cat "$SCRATCH/b.log"; fail "second run exited $rc"; }
latest="$SCRATCH/dir/checkpoints/latest"
rm "$latest" && mkdir "$latest"
expect_refused latest_dir_auto "$latest is a directory, not a regular file" \
  "$@" --out-dir "$SCRATCH/dir" --resume auto --steps 6
expect_refused latest_dir_path "$latest is a directory, not a regular file" \
  "$@" --out-dir "$SCRATCH/dir" --resume "$SCRATCH/dir/checkpoints/step-00000004" --steps 6
[ -d "$latest" ] && [ -d "$SCRATCH/dir/checkpoints/step-00000004" ] || fail "the refusal changed the store"
echo "ckpt_store_damage: OK"
