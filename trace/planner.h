// The memory planner: value lifetimes over the program, then buffer assignment so that
// intermediates whose lifetimes do not overlap share arena bytes (inputs never share with
// anything: they are the caller's; outputs, state and constants have buffers of their
// own and are never freed by the plan).
#pragma once

#include <string>

#include "trace/graph.h"

namespace tide::trace {

struct PlanSummary {
  size_t arena_bytes = 0;       // the planned peak of intermediates
  size_t unplanned_bytes = 0;   // what they would take without sharing
  size_t output_bytes = 0;      // allocated on every call
  size_t persistent_bytes = 0;  // state and constants, held by the graph
  int intermediates = 0;
};

// Computes g.deps (trace/schedule.h) and lifetimes, assigns arena offsets to intermediates
// (greedy by size, best fit), allocates the arena on g.device and binds every
// intermediate slot into it. With g.concurrent(), two
// intermediates share bytes only when the dependencies order all their accesses, so
// parallel branches never write each other's buffers (the arena may grow). Throws
// "[trace]" if the arena cannot be allocated.
PlanSummary plan(Graph& g);
// The same without allocating or binding the arena: sets the lifetimes, the offsets and
// g.arena_bytes (the memory budget tries layouts: trace/remat.h).
PlanSummary layout(Graph& g);

// An independent check of a plan: walks the program, tracks which intermediates are alive
// at each node (from the nodes' reads and writes, not from the stored lifetimes) and
// reports the first two live values whose arena ranges overlap, or a value outside the
// arena. With g.streams > 1 it also walks the dependency edges to check that values
// sharing bytes are ordered. Empty when the plan is sound.
std::string check_plan(const Graph& g);

}  // namespace tide::trace
