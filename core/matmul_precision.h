// The precision of float32 GEMMs: PyTorch's set_float32_matmul_precision. `highest` (the
// default) computes them in float32 throughout; `high` lets a CUDA GEMM round its float32
// operands to TF32 (10 mantissa bits) and run on tensor cores, with float32 accumulation and
// output: ~7x an H100's float32 rate, at about 1e-3 relative error per product.
// A GEMM reads the setting when it is queued (matmul, batched matmul, linear, their
// gradients) and keeps it, so a trace replays with the setting it was traced with, whatever
// the setting at replay. The CPU computes float32 GEMMs in full precision under either
// setting; the recording fake GPU rounds the operands to TF32 as CUDA's conversion does, so
// the setting's path is tested without a GPU. float64 and 16-bit GEMMs ignore it.
// Process-wide; safe to call from any thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <optional>
#include <string_view>

namespace tide {

enum class MatmulPrecision : uint8_t { highest, high };

namespace detail {
inline std::atomic<MatmulPrecision> g_float32_matmul_precision{MatmulPrecision::highest};
}

inline void set_float32_matmul_precision(MatmulPrecision p) {
  detail::g_float32_matmul_precision.store(p, std::memory_order_relaxed);
}
inline MatmulPrecision float32_matmul_precision() {
  return detail::g_float32_matmul_precision.load(std::memory_order_relaxed);
}

// "highest" / "high".
inline const char* name(MatmulPrecision p) {
  return p == MatmulPrecision::high ? "high" : "highest";
}
// The precision named `s` ("highest", "high"), nullopt for anything else.
inline std::optional<MatmulPrecision> matmul_precision_from_name(std::string_view s) {
  if (s == "highest") return MatmulPrecision::highest;
  if (s == "high") return MatmulPrecision::high;
  return std::nullopt;
}

// Sets the precision for a scope and puts the previous one back.
class Float32MatmulPrecisionGuard {
 public:
  explicit Float32MatmulPrecisionGuard(MatmulPrecision p) : before_(float32_matmul_precision()) {
    set_float32_matmul_precision(p);
  }
  ~Float32MatmulPrecisionGuard() { set_float32_matmul_precision(before_); }
  Float32MatmulPrecisionGuard(const Float32MatmulPrecisionGuard&) = delete;
  Float32MatmulPrecisionGuard& operator=(const Float32MatmulPrecisionGuard&) = delete;

 private:
  MatmulPrecision before_;
};

}  // namespace tide
