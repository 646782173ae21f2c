// tide_bench, attention: scaled_dot_product_attention (the fused op) against its anchor,
// the matmul-softmax-matmul composition with an additive causal mask, measured in the same
// run on the same inputs. The char GPT preset (B = 12, H = 4, D = 32, T = 64) and T = 256,
// float32, causal; forward alone and forward + backward (a sum of out * w as the loss),
// each waited for (enqueue, execute, sync). GFLOP/s counts the four products of the
// unmasked T x T forward (4 B H T^2 D) and, with the backward, the four more it recomputes
// or takes (counting 2.5x the forward), the same napkin for both, so the rates compare.
// fused:2 is the same attention over a fused projection's rows, qkv (B, T, 3, H, D)
// (scaled_dot_product_attention_qkv), the GPT's layout. Not here: the CUDA kernels
// (tide_bench_cuda), other head widths.
#include <benchmark/benchmark.h>

#include <cmath>
#include <vector>

#include "tide.h"

namespace {

using tide::Tensor;

constexpr int64_t kB = 12, kH = 4, kD = 32;

Tensor causal_mask(int64_t t) {
  std::vector<double> m(size_t(t * t), 0.0);
  for (int64_t i = 0; i < t; ++i)
    for (int64_t j = i + 1; j < t; ++j) m[size_t(i * t + j)] = -1e30;
  return tide::from_data(m, tide::Shape{t, t});
}

Tensor composed(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask) {
  Tensor sc = tide::mul(tide::matmul(q, k, {.trans_b = true}), 1.0 / std::sqrt(double(kD)));
  return tide::matmul(tide::softmax(tide::add(sc, mask)), v);
}

// Args: T, fused (1: q, k, v (B, H, T, D); 2: qkv (B, T, 3, H, D)) or composed (0),
// backward (1) or not (0).
void BM_Attention(benchmark::State& state) {
  const int64_t t = state.range(0);
  const bool fused = state.range(1) != 0, backward = state.range(2) != 0;
  const bool rows = state.range(1) == 2;
  tide::Generator gen(1);
  const tide::Shape shape{kB, kH, t, kD};
  Tensor q = tide::randn(shape, tide::DType::float32, gen).requires_grad_(backward);
  Tensor k = tide::randn(shape, tide::DType::float32, gen).requires_grad_(backward);
  Tensor v = tide::randn(shape, tide::DType::float32, gen).requires_grad_(backward);
  const Tensor w = tide::randn(shape, tide::DType::float32, gen);
  const Tensor mask = causal_mask(t);
  Tensor qkv = tide::randn({kB, t, 3, kH, kD}, tide::DType::float32, gen).requires_grad_(backward);
  const Tensor w_rows = tide::randn({kB, t, kH, kD}, tide::DType::float32, gen);
  tide::wait_all();
  for (auto _ : state) {
    Tensor out = rows    ? tide::scaled_dot_product_attention_qkv(qkv, true)
                 : fused ? tide::scaled_dot_product_attention(q, k, v, true)
                         : composed(q, k, v, mask);
    if (backward) {
      for (Tensor* x : {&q, &k, &v, &qkv}) x->zero_grad();
      tide::sum(tide::mul(out, rows ? w_rows : w)).backward();
      tide::wait_all();
    } else {
      out.wait_to_read();
    }
  }
  const double flops = 4.0 * kB * kH * double(t) * double(t) * kD * (backward ? 2.5 : 1.0);
  state.counters["GFLOP/s"] =
      benchmark::Counter(flops / 1e9, benchmark::Counter::kIsIterationInvariantRate);
  state.SetLabel(std::string(rows    ? "fused qkv rows"
                             : fused ? "fused"
                                     : "composed") +
                 (backward ? " fwd+bwd" : " fwd"));
}
BENCHMARK(BM_Attention)
    ->ArgNames({"T", "fused", "bwd"})
    ->ArgsProduct({{64, 256}, {1, 2, 0}, {0, 1}})
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);

}  // namespace
