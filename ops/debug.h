// Ops for tests and demonstrations of the engine's behaviour. They are real queued ops
// with hazard tracking, not mocks.
#pragma once

#include <functional>
#include <string>

#include "core/engine/engine.h"
#include "core/tensor.h"

namespace tide::debug {

// Queues an op that reads `input` and writes `output` and throws `message` when it runs:
// output is poisoned, and the failure surfaces at the first sync that touches it.
void fail(const Tensor& input, const Tensor& output, std::string message,
          Site site = Site::current());

// Queues an op that writes `t` (leaving its values alone) and calls `body()` on the
// worker; body may block (e.g. on a std::latch) to hold the stream. Exceptions from body
// fail the op like any kernel error.
void gate(const Tensor& t, std::function<void()> body, Site site = Site::current());

}  // namespace tide::debug
