# Helpers the bench scripts source: medians and the per-step figures of a trainer's metrics.jsonl.

# median: of the numbers on stdin, one a line.
median() {
  sort -g | awk '{ v[NR] = $1 } END {
    if (NR == 0) exit 1
    if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}

# step_times FILE: "step_ms exposed_comm_ms" of each step record of metrics.jsonl but the first
# (warm-up).
step_times() {
  awk 'match($0, /"step_ms": [^,}]*/) {
         s = substr($0, RSTART + 11, RLENGTH - 11)
         if (match($0, /"exposed_comm_ms": [^,}]*/)) print s, substr($0, RSTART + 19, RLENGTH - 19) }' \
      "$1" | tail -n +2
}
