#include "core/cuda/runtime.h"

#include "core/engine_impl.h"
#include "core/error.h"

namespace tide::cuda {

std::unique_ptr<DeviceStream> make_stream(StreamImpl& owner) {
  throw Error("stream", "cannot create a stream on " + owner.device.str() +
                            ": this build has no CUDA backend");
}

}  // namespace tide::cuda
