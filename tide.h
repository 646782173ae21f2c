// tide: the whole public API.
#pragma once

#include "core/allocator.h"
#include "core/determinism.h"
#include "core/engine/engine.h"
#include "core/error.h"
#include "core/matmul_precision.h"
#include "core/memory_probe.h"
#include "core/memory_record.h"
#include "core/profiler.h"
#include "core/rng.h"
#include "core/tensor.h"
#include "core/thread_pool.h"
#include "dist/mpi.h"
#include "ops/ops.h"
#include "trace/trace.h"
