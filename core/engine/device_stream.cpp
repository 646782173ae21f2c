#include "core/engine/device_stream.h"

#include "core/cuda/runtime.h"
#include "core/engine/engine_impl.h"

namespace tide {

std::unique_ptr<DeviceStream> make_device_stream(StreamImpl& owner) {
  if (owner.device.is_cpu()) return make_cpu_stream(owner);
  return cuda::make_stream(owner);
}

}  // namespace tide
