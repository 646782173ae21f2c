// The out-of-line error of core/dtype.h.
#include "core/dtype.h"

#include <string>

#include "core/error.h"

namespace tide::detail {

void throw_half_unsupported(DType t, const char* op) {
  throw Error(op, std::string(name(t)) + " is not supported yet: cast to float32 first");
}

}  // namespace tide::detail
