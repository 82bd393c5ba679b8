#!/usr/bin/env bash
# Imported checkpoints train alike across layouts, and export round trips bit for bit
# (tests/support/hf_layouts_lib.sh): Llama 3.2 (also ZeRO-3 at dp 2) and Qwen2.5.
source "$SOURCE_DIR/tests/support/e2e_lib.sh"
source "$SOURCE_DIR/tests/support/hf_layouts_lib.sh"
layouts_and_round_trip Llama-3.2-1B "--dp 2 --zero 3"
layouts_and_round_trip Qwen2.5-0.5B
echo "ok: Llama 3.2 and Qwen2.5 checkpoints across layouts and round trips"
