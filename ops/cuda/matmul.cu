// CUDA launcher of the GEMM entry (ops/linalg_kernels.h) through cuBLASLt: bfloat16 and
// float16 (16-bit operands and output, float32 accumulation and scale), float and double.
// float32 GEMMs compute in full precision (CUBLAS_COMPUTE_32F never uses TF32; results are
// compared with the CPU's OpenBLAS at tight tolerances) unless they were queued under the
// `high` float32 matmul precision (Gemm::tf32, core/matmul_precision.h):
// CUBLAS_COMPUTE_32F_FAST_TF32. The algorithm is chosen once per shape, strides, pointer
// alignments, compute type and epilogue by cuBLASLt's heuristic and cached for the process.
// The linear entry (GemmBias) uses the bias and bias + ReLU epilogues, so the Linear layer is
// one kernel (with GELU, two: gemm_bias). Batched products (GemmBatch) are cuBLASLt's strided
// batches, one call per outer batch; a broadcast operand has batch stride 0 (the layout attribute's
// documented default, i.e. every batch reads the same matrix). Does not autotune by timing, does
// not synchronize. Sizes past 2^31 - 1 never reach it (the front-ends refuse them, as on the CPU).
// Also here: the one-hot rows of a classification loss (one small kernel).
#include <math_constants.h>

#include <cstdint>
#include <mutex>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <unordered_map>
#include <utility>

#include "core/cuda/await_grids.h"
#include "core/cuda/call_name.h"
#include "core/cuda/check.h"
#include "core/cuda/cublaslt.h"
#include "core/float16.h"
#include "ops/cuda/launch.h"
#include "ops/cuda/registry.h"
#include "ops/functors.h"
#include "ops/linalg_kernels.h"

namespace tide::kernels::cuda {

namespace {

// Host-side cuBLASLt failures fail the op: the engine prefixes "[matmul]" and the site.
[[noreturn]] void throw_cublas(const char* call, cublasStatus_t st) {
  throw std::runtime_error(
      tide::cuda::library_error(call, cublasLtGetStatusName(st), cublasLtGetStatusString(st)));
}

#define TIDE_CUBLAS_CHECK(call)                                           \
  do {                                                                    \
    cublasStatus_t tide_st_ = (call);                                     \
    if (tide_st_ != CUBLAS_STATUS_SUCCESS) throw_cublas(#call, tide_st_); \
  } while (0)

// What a plan adds after the product: c += bias (per column of the row-major c, i.e. one
// value per output feature), then optionally ReLU.
enum class Epilogue : uint8_t { none, bias, bias_relu };

// The largest power of two (at most 256, cuBLASLt's default assumption) dividing p: the
// heuristic must not pick a kernel that needs more alignment than a view's offset leaves.
uint32_t alignment_of(const void* p) {
  auto v = reinterpret_cast<uintptr_t>(p);
  uint32_t a = 256;
  while (a > 1 && v % a != 0) a /= 2;
  return a;
}

// The alignment every batch of a strided batch keeps: the first pointer's and the stride's.
template <class T>
uint32_t batch_alignment(const T* p, int64_t stride) {
  const uint32_t a = alignment_of(p);
  if (stride == 0) return a;
  const uint32_t s = alignment_of(reinterpret_cast<const void*>(uintptr_t(stride) * sizeof(T)));
  return a < s ? a : s;
}

// Everything the heuristic's choice depends on.
struct PlanKey {
  cudaDataType_t type;
  int device;
  int64_t m, n, k, lda, ldb, ldc;
  bool ta, tb, tf32;
  Epilogue epilogue;
  uint32_t align_a, align_b, align_c, align_bias;
  size_t workspace_bytes;
  int64_t batch = 1, stride_a = 0, stride_b = 0;  // strided batches (c's stride is m * ldc)
  bool operator==(const PlanKey&) const = default;
};

struct PlanKeyHash {
  size_t operator()(const PlanKey& k) const {
    uint64_t h = 1469598103934665603ull;
    auto mix = [&h](uint64_t v) { h = (h ^ v) * 1099511628211ull; };
    mix(uint64_t(k.type));
    mix(uint64_t(k.device));
    for (int64_t v : {k.m, k.n, k.k, k.lda, k.ldb, k.ldc}) mix(uint64_t(v));
    mix(uint64_t(k.ta) | uint64_t(k.tb) << 1 | uint64_t(k.tf32) << 2 | uint64_t(k.epilogue) << 3);
    mix(uint64_t(k.align_a) | uint64_t(k.align_b) << 16 | uint64_t(k.align_c) << 32 |
        uint64_t(k.align_bias) << 48);
    mix(uint64_t(k.workspace_bytes));
    for (int64_t v : {k.batch, k.stride_a, k.stride_b}) mix(uint64_t(v));
    return size_t(h);
  }
};

// The cached part of a GEMM: the algorithm (plain data, documented as copyable). The
// descriptors are built per call on the stack (a few host instructions, no allocation):
// the matmul descriptor carries the bias pointer, which changes per call, and rebuilding
// the layouts avoids sharing or copying cuBLASLt's semi-opaque structures between threads.
struct Plan {
  cublasLtMatmulAlgo_t algo;
  size_t workspace_bytes;  // what the algorithm needs (at most the key's): 0 for many shapes
};

// The column-major layouts of cuBLASLt's A, B and C (= D) for key; see gemm_with_epilogue.
struct Layouts {
  cublasLtMatrixLayoutOpaque_t a, b, c;
};

// Process-wide: the worker threads of every stream (and device) share it. Grows with the
// number of distinct shapes a program multiplies, which training loops keep small.
std::mutex g_plans_mutex;
std::unordered_map<PlanKey, Plan, PlanKeyHash> g_plans;

template <class T>
constexpr cudaDataType_t data_type() {
  if constexpr (std::is_same_v<T, bfloat16>) return CUDA_R_16BF;
  else if constexpr (std::is_same_v<T, float16>) return CUDA_R_16F;
  else return std::is_same_v<T, float> ? CUDA_R_32F : CUDA_R_64F;
}

// The type of alpha and beta (cuBLASLt's scale type): float for float and the 16-bit types,
// whose products accumulate in float32, double for double.
template <class T>
using Scale = std::conditional_t<std::is_same_v<T, double>, double, float>;

cublasLtEpilogue_t to_cublas(Epilogue e) {
  switch (e) {
    case Epilogue::bias: return CUBLASLT_EPILOGUE_BIAS;
    case Epilogue::bias_relu: return CUBLASLT_EPILOGUE_RELU_BIAS;
    case Epilogue::none: break;
  }
  return CUBLASLT_EPILOGUE_DEFAULT;
}

// The matmul descriptor of key, in caller-provided storage.
void init_desc(cublasLtMatmulDescOpaque_t* desc, const PlanKey& key, const void* bias) {
  const bool f64 = key.type == CUDA_R_64F;
  const cublasComputeType_t compute = f64        ? CUBLAS_COMPUTE_64F
                                      : key.tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32
                                                 : CUBLAS_COMPUTE_32F;
  TIDE_CUBLAS_CHECK(cublasLtMatmulDescInit(desc, compute, f64 ? CUDA_R_64F : CUDA_R_32F));
  // The operand swap (see gemm_with_epilogue): cuBLASLt's A is tide's b, so transa = tb.
  cublasOperation_t transa = key.tb ? CUBLAS_OP_T : CUBLAS_OP_N;
  cublasOperation_t transb = key.ta ? CUBLAS_OP_T : CUBLAS_OP_N;
  TIDE_CUBLAS_CHECK(
      cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &transa, sizeof(transa)));
  TIDE_CUBLAS_CHECK(
      cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &transb, sizeof(transb)));
  if (key.epilogue != Epilogue::none) {
    cublasLtEpilogue_t epi = to_cublas(key.epilogue);
    TIDE_CUBLAS_CHECK(
        cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi)));
    TIDE_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias,
                                                     sizeof(bias)));
  }
}

// Column-major layouts (rows, cols, ld) of the swapped problem C^T (n x m) =
// op(b)^T (n x k) @ op(a)^T (k x m); see gemm_with_epilogue.
void init_layouts(Layouts* l, const PlanKey& key) {
  TIDE_CUBLAS_CHECK(cublasLtMatrixLayoutInit(&l->a, key.type, key.tb ? key.k : key.n,
                                             key.tb ? key.n : key.k, key.ldb));
  TIDE_CUBLAS_CHECK(cublasLtMatrixLayoutInit(&l->b, key.type, key.ta ? key.m : key.k,
                                             key.ta ? key.k : key.m, key.lda));
  TIDE_CUBLAS_CHECK(cublasLtMatrixLayoutInit(&l->c, key.type, key.n, key.m, key.ldc));
  if (key.batch == 1) return;
  const int32_t count = int32_t(key.batch);  // the front-ends refuse more than 2^31 - 1
  // cuBLASLt's A is tide's b, its B tide's a.
  const std::pair<cublasLtMatrixLayoutOpaque_t*, int64_t> strides[] = {
      {&l->a, key.stride_b}, {&l->b, key.stride_a}, {&l->c, key.m * key.ldc}};
  for (const auto& [layout, stride] : strides) {
    TIDE_CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT,
                                                       &count, sizeof(count)));
    TIDE_CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(
        layout, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof(stride)));
  }
}

// Builds the plan of key with cuBLASLt's heuristic (host only; no device work).
Plan make_plan(cublasLtHandle_t handle, const PlanKey& key, cublasLtMatmulDescOpaque_t* desc,
               Layouts* l) {
  cublasLtMatmulPreferenceOpaque_t pref;
  TIDE_CUBLAS_CHECK(cublasLtMatmulPreferenceInit(&pref));
  uint64_t ws = key.workspace_bytes;
  TIDE_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
      &pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)));
  // cuBLASLt's A is tide's b and its B is tide's a.
  const std::pair<cublasLtMatmulPreferenceAttributes_t, uint32_t> aligns[] = {
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, key.align_b},
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, key.align_a},
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, key.align_c},
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, key.align_c}};
  for (const auto& [attr, bytes] : aligns)
    TIDE_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(&pref, attr, &bytes, sizeof(bytes)));

  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  TIDE_CUBLAS_CHECK(cublasLtMatmulAlgoGetHeuristic(handle, desc, &l->a, &l->b, &l->c, &l->c, &pref,
                                                   1, &result, &found));
  if (found < 1 || result.state != CUBLAS_STATUS_SUCCESS)
    throw std::runtime_error("cublasLtMatmulAlgoGetHeuristic found no algorithm for (" +
                             std::to_string(key.m) + " x " + std::to_string(key.k) + ") @ (" +
                             std::to_string(key.k) + " x " + std::to_string(key.n) + ")");
  return Plan{result.algo, result.workspaceSize};
}

// The cached plan of key, made on first use. Two threads missing at once both run the
// heuristic (outside the lock); the first to insert wins and both use equal plans.
Plan plan_for(cublasLtHandle_t handle, const PlanKey& key, cublasLtMatmulDescOpaque_t* desc,
              Layouts* l) {
  {
    std::lock_guard<std::mutex> lock(g_plans_mutex);
    auto it = g_plans.find(key);
    if (it != g_plans.end()) return it->second;
  }
  Plan p = make_plan(handle, key, desc, l);
  std::lock_guard<std::mutex> lock(g_plans_mutex);
  return g_plans.try_emplace(key, p).first->second;
}

// c = op(a) @ op(b) (+ bias, ReLU) launched on ctx's stream.
//
// The row-major/column-major mapping. tide's matrices are row-major: element (i, j) of a
// matrix with row stride ld is at p[i * ld + j]. Read as column-major with leading
// dimension ld, the same memory is the transpose. So the row-major c (m x n, ldc) is the
// column-major C^T (n x m, ldc), and since C^T = op(b)^T @ op(a)^T we ask cuBLASLt for the
// column-major product with the operands swapped and dimensions (n, m, k):
//   cuBLASLt A = b's memory. Without tb, b is k x n row-major (ldb): column-major it is
//     b^T = op(b)^T, shape n x k, so transa = N, layout (n, k, ldb). With tb, b is stored
//     n x k row-major: column-major it is the k x n matrix b^T = op(b), so transa = T,
//     layout (k, n, ldb).
//   cuBLASLt B = a's memory. Without ta, a is m x k row-major (lda): column-major it is
//     a^T = op(a)^T, k x m, transb = N, layout (k, m, lda). With ta, a is stored k x m:
//     column-major it is m x k = op(a), transb = T, layout (m, k, lda).
//   cuBLASLt C = D = c's memory: layout (n, m, ldc).
// The bias epilogue adds a vector of D's row count (n) to every column of D, i.e. to every
// row of the row-major c: one value per output feature, as Linear needs.
// `batch` products at once when batch > 1: a, b step by stride_a, stride_b elements and c by
// m * ldc (c is contiguous then).
template <class T>
void gemm_with_epilogue(const KernelContext& ctx, const Gemm<T>& g, Epilogue epilogue,
                        const T* bias, int64_t batch = 1, int64_t stride_a = 0,
                        int64_t stride_b = 0) {
  if (g.m == 0 || g.n == 0 || batch == 0) return;
  T* c = g.c.get();
  if (g.k == 0) {
    // An empty sum: c = 0, written here rather than trusting cuBLASLt with k = 0 (and
    // layouts with zero rows or columns).
    if (epilogue != Epilogue::none)
      throw std::runtime_error("GEMM with k = 0 and a bias epilogue is not implemented");
    if (g.ldc == g.n)
      TIDE_CUDA_CHECK(cudaMemsetAsync(c, 0, size_t(batch * g.m * g.n) * sizeof(T), stream_of(ctx)));
    else
      TIDE_CUDA_CHECK(cudaMemset2DAsync(c, size_t(g.ldc) * sizeof(T), 0, size_t(g.n) * sizeof(T),
                                        size_t(g.m), stream_of(ctx)));
    return;
  }
  if (!ctx.blas) throw std::runtime_error("no cuBLASLt handle for this stream");
  auto handle = cublasLtHandle_t(ctx.blas);
  const T* a = g.a.get();
  const T* b = g.b.get();
  size_t ws_bytes = ctx.workspace ? ctx.workspace_bytes : 0;
  PlanKey key{data_type<T>(),
              ctx.device.index,
              g.m,
              g.n,
              g.k,
              g.lda,
              g.ldb,
              g.ldc,
              g.ta,
              g.tb,
              std::is_same_v<T, float> && g.tf32,
              epilogue,
              batch_alignment(a, stride_a),
              batch_alignment(b, stride_b),
              batch_alignment(c, batch > 1 ? g.m * g.ldc : 0),
              epilogue == Epilogue::none ? 256u : alignment_of(bias),
              ws_bytes,
              batch,
              stride_a,
              stride_b};
  cublasLtMatmulDescOpaque_t desc;
  init_desc(&desc, key, bias);
  Layouts l;
  init_layouts(&l, key);
  Plan plan = plan_for(handle, key, &desc, &l);
  const Scale<T> alpha = 1, beta = 0;  // beta = 0: c (uninitialised) is not read
  TIDE_CUBLAS_CHECK(cublasLtMatmul(handle, &desc, &alpha, b, &l.a, a, &l.b, &beta, c, &l.c, c, &l.c,
                                   &plan.algo, use_workspace(ctx, plan.workspace_bytes),
                                   plan.workspace_bytes ? ws_bytes : 0, stream_of(ctx)));
}

template <class T>
void gemm(const KernelContext& ctx, const Gemm<T>& g, const NoExtra&) {
  gemm_with_epilogue<T>(ctx, g, Epilogue::none, nullptr);
}

// The batches of GemmBatch: one strided-batched call per outer batch.
template <class T>
void gemm_batched(const KernelContext& ctx, const Gemm<T>& g, const GemmBatch& bt) {
  for (int64_t o = 0; o < bt.outer; ++o)
    gemm_with_epilogue<T>(ctx, outer_batch(g, bt, o), Epilogue::none, nullptr, bt.count,
                          bt.stride_a, bt.stride_b);
}

// c = bias broadcast over the rows (then ReLU): a product with an empty inner dimension.
template <class T>
__global__ void fill_rows_with_bias(T* c, const T* bias, int64_t m, int64_t n, int64_t ldc,
                                    bool relu) {
  tide::cuda::await_prerequisite_grids();
  for (int64_t i = global_index(); i < m * n; i += grid_stride()) {
    const Scale<T> v = Scale<T>(bias[i % n]);  // exact: a 16-bit value widened
    c[(i / n) * ldc + i % n] = T(relu && v < Scale<T>(0) ? Scale<T>(0) : v);
  }
}

// c = GELU (tanh form) of pre, both m x n at row stride ldc: tide's functor, the gelu op's
// arithmetic.
template <class T>
__global__ void gelu_rows(const T* pre, T* c, int64_t m, int64_t n, int64_t ldc) {
  tide::cuda::await_prerequisite_grids();
  for (int64_t i = global_index(); i < m * n; i += grid_stride()) {
    const int64_t at = (i / n) * ldc + i % n;
    c[at] = T(fn::GeluTanh{}(Scale<T>(pre[at])));
  }
}

// With GELU, the product and bias go to pre through the bias epilogue and a second kernel
// writes c. (cuBLASLt's GELU_AUX_BIAS epilogue would do both in one, with its own GELU; not
// used until a GPU measures it against this.)
template <class T>
void gemm_bias(const KernelContext& ctx, const GemmBias<T>& gb, const NoExtra&) {
  const bool gelu = gb.act == LinearAct::gelu_tanh, relu = gb.act == LinearAct::relu;
  Gemm<T> g = gb.g;
  if (gelu) g.c = gb.pre;
  if (g.k == 0) {
    if (g.m * g.n > 0)
      fill_rows_with_bias<T><<<blocks_for(g.m * g.n), kThreads, 0, stream_of(ctx)>>>(
          g.c.get(), gb.bias.get(), g.m, g.n, g.ldc, relu);
  } else {
    gemm_with_epilogue<T>(ctx, g, relu ? Epilogue::bias_relu : Epilogue::bias, gb.bias.get());
  }
  if (gelu && g.m * g.n > 0)
    gelu_rows<T><<<blocks_for(g.m * g.n), kThreads, 0, stream_of(ctx)>>>(gb.pre.get(), gb.g.c.get(),
                                                                         g.m, g.n, g.ldc);
}

// One-hot rows (OneHotRows): the loss's targets. A kernel cannot throw, so a label outside
// [0, classes) makes its whole row NaN: the loss computed from it is NaN (the CPU entry
// fails the op instead; see ops/linalg.h one_hot).
template <class T, class L>
__global__ void one_hot_kernel(const L* labels, T* y, int64_t rows, int64_t classes) {
  tide::cuda::await_prerequisite_grids();
  for (int64_t i = global_index(); i < rows * classes; i += grid_stride()) {
    const int64_t r = i / classes, c = i % classes;
    const int64_t v = int64_t(labels[r]);
    y[i] = v < 0 || v >= classes ? T(CUDART_NAN) : T(v == c ? 1 : 0);
  }
}

template <class T, class L>
void one_hot_rows(const KernelContext& ctx, const OneHotRows<T, L>& o, const NoExtra&) {
  if (o.rows * o.classes == 0) return;
  one_hot_kernel<T, L><<<blocks_for(o.rows * o.classes), kThreads, 0, stream_of(ctx)>>>(
      o.labels.get(), o.y.get(), o.rows, o.classes);
}

}  // namespace

void register_matmul(OpList& ops) {
  CudaKernel<OneHotRows<float, int32_t>, NoExtra>::fn = &one_hot_rows<float, int32_t>;
  CudaKernel<OneHotRows<float, int64_t>, NoExtra>::fn = &one_hot_rows<float, int64_t>;
  CudaKernel<OneHotRows<double, int32_t>, NoExtra>::fn = &one_hot_rows<double, int32_t>;
  CudaKernel<OneHotRows<double, int64_t>, NoExtra>::fn = &one_hot_rows<double, int64_t>;
  CudaKernel<Gemm<float>, NoExtra>::fn = &gemm<float>;
  CudaKernel<Gemm<double>, NoExtra>::fn = &gemm<double>;
  CudaKernel<Gemm<float>, GemmBatch>::fn = &gemm_batched<float>;
  CudaKernel<Gemm<double>, GemmBatch>::fn = &gemm_batched<double>;
  CudaKernel<GemmBias<float>, NoExtra>::fn = &gemm_bias<float>;
  CudaKernel<GemmBias<double>, NoExtra>::fn = &gemm_bias<double>;
  CudaKernel<Gemm<bfloat16>, NoExtra>::fn = &gemm<bfloat16>;
  CudaKernel<Gemm<float16>, NoExtra>::fn = &gemm<float16>;
  CudaKernel<Gemm<bfloat16>, GemmBatch>::fn = &gemm_batched<bfloat16>;
  CudaKernel<Gemm<float16>, GemmBatch>::fn = &gemm_batched<float16>;
  CudaKernel<GemmBias<bfloat16>, NoExtra>::fn = &gemm_bias<bfloat16>;
  CudaKernel<GemmBias<float16>, NoExtra>::fn = &gemm_bias<float16>;
  ops[size_t(OpId::matmul)] = true;
  ops[size_t(OpId::linear)] = true;
  ops[size_t(OpId::one_hot)] = true;
}

}  // namespace tide::kernels::cuda
