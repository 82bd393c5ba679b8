// How a plan is printed: one ranked table, the best layout's memory and trainer flags, and the
// grids that do not fit with the reason.
//
//   rank  layout             mb  zero  recompute   memory GiB  est. step s  bubble %  exposed comm %  tokens/s   MFU %
//      1  dp4 tp8 pp2 cp1      1     1  selective       70.312       48.103       0.4            13.1     87194    42.2
//   ...
//   (under the table, when shown: what "zero 3k" and HSDP's shard groups mean)
//   best: dp4 tp8 pp2 cp1, micro-batch 1, ZeRO-1, recompute selective — per rank 70.31 GiB = ...
//   trainer flags: --dp 4 --tp 8 --pp 2 --cp 1 --micro-batch-size 1 --zero 1 --recompute selective ...
//                  (ZeRO-3 kept gathered: --zero 3 --zero3-reshard-after-forward false; HSDP:
//                  --zero-shard-size D)
//   do not fit:
//     dp64 tp1 pp1 cp1   memory: at least 512.20 GiB per rank (mb 1, zero 1, recompute full) > 80.00 GiB
#pragma once

#include <cstdio>
#include <string>

#include "mpitrain/planner/planner.hpp"

namespace mpitrain {

std::string layout_name(const Layout& layout);  // "dp4 tp8 pp2 cp1", " sp" added when on

// The trainer options that select this layout for this run.
std::string trainer_flags(const Layout& layout, const RunShape& run);

// The memory a layout may hold (the margin kept), the table's first `top` rows (0 = all; each
// with its headroom: the share of the rank's memory it leaves free), the best layout's memory
// breakdown and flags, and the rejected grids.
void print_plan(std::FILE* out, const Plan& plan, const RunShape& run, int top);

}  // namespace mpitrain
