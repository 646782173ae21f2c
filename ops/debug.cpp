#include "ops/debug.h"

#include <stdexcept>

#include "ops/op_util.h"

namespace tide::debug {

void fail(const Tensor& input, const Tensor& output, std::string message, Site site) {
  detail::check_defined(input, "fail");
  detail::check_defined(output, "fail");
  detail::launch(
      "fail", output.device(), {input.storage()}, {output.storage()},
      [m = std::move(message)] { throw std::runtime_error(m); }, site);
}

void gate(const Tensor& t, std::function<void()> body, Site site) {
  detail::check_defined(t, "gate");
  detail::launch(
      "gate", t.device(), {t.storage()}, {t.storage()}, [b = std::move(body)] { b(); }, site);
}

}  // namespace tide::debug
