#!/usr/bin/env bash
# Imported checkpoints train alike across layouts, and export round trips bit for bit
# (tests/support/hf_layouts_lib.sh): Qwen3 and Mistral.
source "$SOURCE_DIR/tests/support/e2e_lib.sh"
source "$SOURCE_DIR/tests/support/hf_layouts_lib.sh"
layouts_and_round_trip Qwen3-0.6B
layouts_and_round_trip Mistral-7B-v0.1
echo "ok: Qwen3 and Mistral checkpoints across layouts and round trips"
