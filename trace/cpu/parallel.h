// The CPU executor's branch-parallel mode (trace::Options::streams > 1): the calling
// thread (the replay task's worker) and up to g.streams - 1 threads of the intra-op pool
// (core/thread_pool.h) take nodes whose predecessors in g.deps have run, lowest program
// index first. Each node computes what it computes in program order, so results are
// identical to a sequential replay; only independent nodes overlap.
#pragma once

#include <cstdint>

#include "trace/graph.h"

namespace tide::trace {

// Runs g's program; g.deps must be filled (plan()). Kernels run single-threaded while
// branches run (one parallel region at a time); when the pool is busy with another
// stream's kernel, the caller runs every node itself. A failing node stops the others
// from starting new nodes; once running nodes finished, the lowest-numbered failure is
// rethrown with the message run_program gives it. Returns the bytes the kernels allocated
// while they ran, on all threads.
uint64_t run_parallel(const Graph& g);

}  // namespace tide::trace
