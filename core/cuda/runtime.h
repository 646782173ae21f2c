// The GPUs a process uses (DESIGN §8): one DeviceRuntime per CUDA device index, created on
// first use, backed by the real CUDA runtime (CUDA builds with a GPU) or by a DeviceApi a
// test installed (the recording fake). Everything here compiles without CUDA.
#pragma once

#include <memory>

#include "core/device_stream.h"

namespace tide::cuda {

// The device side of a new tide stream on a GPU (owner.device). Throws
// tide::Error("[stream] ...") when that GPU cannot be used in this process.
std::unique_ptr<DeviceStream> make_stream(StreamImpl& owner);

}  // namespace tide::cuda
