// The CPU's 16-bit GEMMs (ops/cpu/half_gemm.h): oneDNN's bfloat16 matmul where the build has
// it, else the float32 GEMM between a widening and one rounding.
#include "ops/cpu/half_gemm.h"

#if TIDE_BF16_GEMM_ONEDNN
#include <oneapi/dnnl/dnnl.hpp>

#include "ops/cpu/one_openmp_thread.h"
#endif

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "core/float16.h"
#include "ops/cpu/blas_gemm.h"
#include "ops/cpu/gelu_rows.h"

namespace tide::kernels::cpu {

namespace {

// The float32 scratch of the widening path, kept per thread so that a GEMM allocates nothing
// once its shapes have been seen; given back after a GEMM that needed more than kKeptBytes
// (the allocator does not see this memory, so none of size stays behind).
struct Scratch {
  std::vector<float> a, b, c;
  static constexpr size_t kKeptBytes = size_t(32) << 20;
  void trim() {
    for (std::vector<float>* v : {&a, &b, &c})
      if (v->capacity() * sizeof(float) > kKeptBytes) std::vector<float>().swap(*v);
  }
};
Scratch& scratch() {
  thread_local Scratch s;
  return s;
}

// g's product through the float32 GEMM: op(a) and op(b) widened (exactly), one float32 GEMM,
// then + bias and ReLU in float32 when asked, and one rounding into c (GELU: epilogue_gelu).
template <class H>
void float32_gemm(const Gemm<H>& g, const H* bias, bool relu) {
  Scratch& s = scratch();
  s.c.resize(size_t(g.m * g.n));
  blas_gemm_loaded(
      g.ta, g.tb, g.m, g.n, g.k, g.a.get(), g.lda, g.b.get(), g.ldb, s.c.data(),
      std::max<int64_t>(1, g.n), [](H v) { return float(v); }, s.a, s.b);
  H* c = g.c.get();
  const float* sums = s.c.data();
  parallel_for(g.m, tide::detail::grain_for(g.n), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r)
      for (int64_t j = 0; j < g.n; ++j) {
        float v = sums[r * g.n + j];
        if (bias) v += float(bias[j]);
        if (relu) v = v > 0.0f ? v : 0.0f;
        c[r * g.ldc + j] = H(v);
      }
  });
  s.trim();
}

// With GELU: c's rows, x @ w + b rounded once, move to pre, and c gets GELU of them (the
// bits of the gelu op on pre).
template <class H>
void epilogue_gelu(const Gemm<H>& g, H* pre) {
  for (int64_t r = 0; r < g.m; ++r) {
    H* row = g.c.get() + r * g.ldc;
    std::copy(row, row + g.n, pre + r * g.ldc);
    gelu_tanh_serial(pre + r * g.ldc, row, g.n);
  }
}

#if TIDE_BF16_GEMM_ONEDNN

// oneDNN's OpenMP threads are not used: a GEMM runs in row parts on tide's pool, each part
// serial (ops/cpu/one_openmp_thread.h), a batch of them on the calling worker alone. oneDNN
// 2.6.3's multi-threaded bfloat16 matmul returns wrong products for some shapes with a
// transposed operand (e.g. 12 x 32 @ (50 x 32)^T on 2 threads; 1 thread is right), and
// parts fixed by the shape keep the products' bits independent of the pool's size.
dnnl::engine& cpu_engine() {
  static dnnl::engine e(dnnl::engine::kind::cpu, 0);
  return e;
}

// The descriptor of `batch` matrices op(x), each rows x cols, `batch_stride` elements apart
// (0: one matrix that every batch reads, oneDNN's broadcast batch of 1). x is stored
// transposed (cols x rows, row stride ld) when trans, else rows x cols.
dnnl::memory::desc matrices(int64_t batch, int64_t batch_stride, int64_t rows, int64_t cols,
                            bool trans, int64_t ld) {
  using dnnl::memory;
  const bool broadcast = batch_stride == 0;
  const memory::dims dims{broadcast ? 1 : batch, rows, cols};
  const memory::dims strides{broadcast ? rows * cols : batch_stride, trans ? 1 : ld,
                             trans ? ld : 1};
  return memory::desc(dims, memory::data_type::bf16, strides);
}

// Whether oneDNN has a bfloat16 matmul for this CPU at all: oneDNN 2.6 has none (not even
// its reference kernel) on a CPU without AVX-512, e.g. an AVX2-only AMD EPYC, and refuses
// the primitive as unimplemented. Probed once, on a 2 x 2 product.
bool onednn_bf16_runs() {
  static const bool runs = [] {
    using dnnl::memory;
    const memory::desc m({2, 2}, memory::data_type::bf16, memory::format_tag::ab);
    try {
      const OneOpenMpThread one_thread;
      const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(m, m, m), cpu_engine());
      return true;
    } catch (const dnnl::error& e) {
      if (e.status == dnnl_unimplemented) return false;
      throw std::runtime_error(std::string("oneDNN's bfloat16 matmul failed: ") + e.what() +
                               " (status " + std::to_string(int(e.status)) + ")");
    }
  }();
  return runs;
}

// c's `batch` blocks (each m x n at row stride ldc, m * ldc apart) = op(a) @ op(b) (+ bias,
// ReLU) by oneDNN's matmul, the primitive taken from oneDNN's cache after a shape's first call.
// False, having written nothing, when oneDNN offers no kernel or only its reference one
// (strides its fast kernels do not take): the float32 path is faster then.
bool onednn_gemm(const Gemm<bfloat16>& g, int64_t batch, int64_t stride_a, int64_t stride_b,
                 const bfloat16* bias, bool relu) {
  using dnnl::memory;
  try {
    const OneOpenMpThread one_thread;  // before the primitive: its thread count is part of it
    dnnl::engine& eng = cpu_engine();
    const memory::desc a = matrices(batch, stride_a, g.m, g.k, g.ta, g.lda);
    const memory::desc b = matrices(batch, stride_b, g.k, g.n, g.tb, g.ldb);
    const memory::desc c = matrices(batch, g.m * g.ldc, g.m, g.n, false, g.ldc);
    const memory::desc bias_md({1, 1, g.n}, memory::data_type::bf16, memory::dims{g.n, g.n, 1});
    dnnl::primitive_attr attr;
    if (relu) {
      dnnl::post_ops ops;
      ops.append_eltwise(1.0f, dnnl::algorithm::eltwise_relu, 0.0f, 0.0f);
      attr.set_post_ops(ops);
    }
    const dnnl::matmul::desc desc =
        bias ? dnnl::matmul::desc(a, b, bias_md, c) : dnnl::matmul::desc(a, b, c);
    dnnl::matmul::primitive_desc pd;
    try {
      pd = dnnl::matmul::primitive_desc(desc, attr, eng);
    } catch (const dnnl::error& e) {
      if (e.status == dnnl_unimplemented) return false;  // strides no kernel takes
      throw;
    }
    if (std::string(pd.impl_info_str()).rfind("ref", 0) == 0) return false;
    const dnnl::matmul prim(pd);
    thread_local dnnl::stream stream(eng);
    // oneDNN takes non-const handles; it only reads the source, weights and bias.
    memory am(a, eng, const_cast<bfloat16*>(g.a.get()));
    memory bm(b, eng, const_cast<bfloat16*>(g.b.get()));
    memory cm(c, eng, g.c.get());
    if (bias) {
      memory biasm(bias_md, eng, const_cast<bfloat16*>(bias));
      prim.execute(
          stream,
          {{DNNL_ARG_SRC, am}, {DNNL_ARG_WEIGHTS, bm}, {DNNL_ARG_BIAS, biasm}, {DNNL_ARG_DST, cm}});
    } else {
      prim.execute(stream, {{DNNL_ARG_SRC, am}, {DNNL_ARG_WEIGHTS, bm}, {DNNL_ARG_DST, cm}});
    }
    stream.wait();
    return true;
  } catch (const dnnl::error& e) {
    throw std::runtime_error(std::string("oneDNN's bfloat16 matmul failed: ") + e.what() +
                             " (status " + std::to_string(int(e.status)) + ")");
  }
}

#endif  // TIDE_BF16_GEMM_ONEDNN

// One product or a strided batch of them (c contiguous when batch > 1), by oneDNN when it
// applies, else product by product through float32. bias and act: one product only (the
// Linear layer's; pre as GemmBias's).
template <class H>
void run(const Gemm<H>& g, int64_t batch, int64_t stride_a, int64_t stride_b, const H* bias,
         LinearAct act = LinearAct::none, H* pre = nullptr) {
  if (g.m == 0 || g.n == 0 || batch == 0) return;
  const bool relu = act == LinearAct::relu, gelu = act == LinearAct::gelu_tanh;
#if TIDE_BF16_GEMM_ONEDNN
  if constexpr (std::is_same_v<H, bfloat16>) {
    // k = 0 (c = bias or 0) is left to the float32 path, which writes it. One product: its
    // rows in parts on tide's pool (for_onednn_row_parts), a part oneDNN cannot take (its
    // reference kernel) through float32.
    if (g.k > 0 && batch == 1 && onednn_bf16_runs()) {
      for_onednn_row_parts(g.m, g.n, g.k, [&](int64_t r0, int64_t mr) {
        Gemm<H> part = g;
        part.m = mr;
        part.a.offset += g.ta ? r0 : r0 * g.lda;
        part.c.offset += r0 * g.ldc;
        if (!onednn_gemm(part, 1, 0, 0, bias, relu)) float32_gemm(part, bias, relu);
        if (gelu) epilogue_gelu(part, pre + r0 * g.ldc);
      });
      return;
    }
    if (g.k > 0 && onednn_bf16_runs() && onednn_gemm(g, batch, stride_a, stride_b, bias, relu))
      return;
  }
#endif
  for (int64_t i = 0; i < batch; ++i) {
    Gemm<H> s = g;
    s.a.offset += i * stride_a;
    s.b.offset += i * stride_b;
    s.c.offset += i * g.m * g.ldc;
    float32_gemm(s, bias, relu);
    if (gelu) epilogue_gelu(s, pre);
  }
}

}  // namespace

template <class H>
void half_gemm(const Gemm<H>& g) {
  run<H>(g, 1, 0, 0, nullptr);
}

template <class H>
void half_gemm_batched(const Gemm<H>& g, const GemmBatch& bt) {
  for (int64_t o = 0; o < bt.outer; ++o)
    run<H>(outer_batch(g, bt, o), bt.count, bt.stride_a, bt.stride_b, nullptr);
}

template <class H>
void half_gemm_bias(const GemmBias<H>& gb) {
  run<H>(gb.g, 1, 0, 0, gb.bias.get(), gb.act,
         gb.act == LinearAct::gelu_tanh ? gb.pre.get() : nullptr);
}

std::string bf16_gemm_library() {
#if TIDE_BF16_GEMM_ONEDNN
  const dnnl_version_t* v = dnnl_version();
  const std::string onednn = "oneDNN " + std::to_string(v->major) + "." + std::to_string(v->minor) +
                             "." + std::to_string(v->patch);
  if (!onednn_bf16_runs()) return "the float32 GEMM (" + onednn + " has no bfloat16 matmul here)";
  return onednn + " (matmul)";
#else
  return "the float32 GEMM";
#endif
}

template void half_gemm<bfloat16>(const Gemm<bfloat16>&);
template void half_gemm<float16>(const Gemm<float16>&);
template void half_gemm_batched<bfloat16>(const Gemm<bfloat16>&, const GemmBatch&);
template void half_gemm_batched<float16>(const Gemm<float16>&, const GemmBatch&);
template void half_gemm_bias<bfloat16>(const GemmBias<bfloat16>&);
template void half_gemm_bias<float16>(const GemmBias<float16>&);

}  // namespace tide::kernels::cpu
