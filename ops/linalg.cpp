// matmul through CBLAS, transpose, and the row-wise softmax / log_softmax.
#include "ops/linalg.h"

#include <cblas.h>

#include <cmath>

#include "ops/autograd.h"
#include "ops/elementwise.h"
#include "ops/op_util.h"
#include "ops/reduce.h"

namespace tide {

using namespace detail;
using Grads = std::vector<Tensor>;

Tensor matmul(const Tensor& a, const Tensor& b, MatmulOptions opt, Site site) {
  const char* op = "matmul";
  check_same(a, b, op);
  check_floating(a, op);
  auto desc = [&] {
    return describe(a) + (opt.trans_a ? "^T" : "") + " @ " + describe(b) +
           (opt.trans_b ? "^T" : "");
  };
  TIDE_CHECK(a.ndim() == 2 && b.ndim() == 2, op, "needs 2-D tensors, got ", desc());
  int64_t m = opt.trans_a ? a.shape()[1] : a.shape()[0];
  int64_t k = opt.trans_a ? a.shape()[0] : a.shape()[1];
  int64_t kb = opt.trans_b ? b.shape()[1] : b.shape()[0];
  int64_t n = opt.trans_b ? b.shape()[0] : b.shape()[1];
  TIDE_CHECK(k == kb, op, "inner dimensions differ: ", desc());
  Tensor y = Tensor::empty({m, n}, a.dtype(), a.device(), op);
  int lda = int(std::max<int64_t>(1, a.shape()[1]));
  int ldb = int(std::max<int64_t>(1, b.shape()[1]));
  int ldc = int(std::max<int64_t>(1, n));
  CBLAS_TRANSPOSE ta = opt.trans_a ? CblasTrans : CblasNoTrans;
  CBLAS_TRANSPOSE tb = opt.trans_b ? CblasTrans : CblasNoTrans;
  if (m * n > 0) {
    if (a.dtype() == DType::float32) {
      DataRef<float> ra = a.ref<float>(), rb = b.ref<float>(), rc = y.ref<float>();
      launch(op, y.device(), {a.storage(), b.storage()}, {y.storage()}, [=] {
        cblas_sgemm(CblasRowMajor, ta, tb, int(m), int(n), int(k), 1.0f, ra.get(), lda, rb.get(), ldb,
                    0.0f, rc.get(), ldc);
      }, site);
    } else {
      DataRef<double> ra = a.ref<double>(), rb = b.ref<double>(), rc = y.ref<double>();
      launch(op, y.device(), {a.storage(), b.storage()}, {y.storage()}, [=] {
        cblas_dgemm(CblasRowMajor, ta, tb, int(m), int(n), int(k), 1.0, ra.get(), lda, rb.get(), ldb,
                    0.0, rc.get(), ldc);
      }, site);
    }
  }
  // Only the gradients an input needs: for x @ W with a data batch x, dx would be a whole
  // extra GEMM that backward() then drops.
  bool need_a = autograd::needs_grad({&a}), need_b = autograd::needs_grad({&b});
  autograd::record(op, y, {&a, &b},
                   [a = a.detach(), b = b.detach(), opt, need_a, need_b](const Tensor& g) {
    bool ta = opt.trans_a, tb = opt.trans_b;
    Tensor ga, gb;  // undefined: no gradient
    if (need_a) ga = ta ? matmul(b, g, {tb, true}) : matmul(g, b, {false, !tb});
    if (need_b) gb = tb ? matmul(g, a, {true, ta}) : matmul(a, g, {!ta, false});
    return Grads{ga, gb};
  });
  return y;
}

Tensor transpose(const Tensor& a, Site site) {
  const char* op = "transpose";
  check_defined(a, op);
  check_cpu(a, op);
  TIDE_CHECK(a.ndim() == 2, op, "needs a 2-D tensor, got ", describe(a));
  int64_t r = a.shape()[0], c = a.shape()[1];
  Tensor y = Tensor::empty({c, r}, a.dtype(), a.device(), op);
  dispatch_dtype(a.dtype(), [&](auto z) {
    using T = decltype(z);
    DataRef<T> ra = a.ref<T>(), ry = y.ref<T>();
    launch(op, y.device(), {a.storage()}, {y.storage()}, [=] {
      const T* pa = ra.get();
      T* py = ry.get();
      constexpr int64_t B = 32;  // cache blocks
      int64_t blocks = (r + B - 1) / B;
      parallel_for(blocks, std::max<int64_t>(1, kParallelGrain / (B * std::max<int64_t>(c, 1))),
                   [&](int64_t b0, int64_t b1) {
        for (int64_t i0 = b0 * B; i0 < std::min(r, b1 * B); i0 += B)
          for (int64_t j0 = 0; j0 < c; j0 += B)
            for (int64_t i = i0; i < std::min(r, i0 + B); ++i)
              for (int64_t j = j0; j < std::min(c, j0 + B); ++j) py[j * r + i] = pa[i * c + j];
      });
    }, site);
  });
  autograd::record(op, y, {&a}, [](const Tensor& g) { return Grads{transpose(g)}; });
  return y;
}

namespace {
template <class T>
void softmax_rows(const T* x, T* y, int64_t rows, int64_t n, bool log_out) {
  int64_t grain = std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(1, n));
  parallel_for(rows, grain, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const T* xr = x + r * n;
      T* yr = y + r * n;
      T m = xr[0];
      for (int64_t i = 1; i < n; ++i) m = xr[i] > m ? xr[i] : m;
      double s = 0;
      for (int64_t i = 0; i < n; ++i) s += std::exp(double(xr[i] - m));
      if (log_out) {
        T ls = T(std::log(s));
        for (int64_t i = 0; i < n; ++i) yr[i] = xr[i] - m - ls;
      } else {
        double inv = 1.0 / s;
        for (int64_t i = 0; i < n; ++i) yr[i] = T(std::exp(double(xr[i] - m)) * inv);
      }
    }
  });
}

Tensor softmax_impl(const Tensor& a, bool log_out, Site site) {
  const char* op = log_out ? "log_softmax" : "softmax";
  check_defined(a, op);
  check_cpu(a, op);
  check_floating(a, op);
  TIDE_CHECK(a.ndim() >= 1, op, "needs rank >= 1, got a 0-d tensor");
  int64_t n = a.shape()[a.ndim() - 1];
  int64_t rows = n ? a.numel() / n : 0;
  Tensor y = Tensor::empty(a.shape(), a.dtype(), a.device(), op);
  if (rows * n > 0) {
    dispatch_floating(a.dtype(), [&](auto z) {
      using T = decltype(z);
      DataRef<T> rx = a.ref<T>(), ry = y.ref<T>();
      launch(op, y.device(), {a.storage()}, {y.storage()},
             [=] { softmax_rows(rx.get(), ry.get(), rows, n, log_out); }, site);
    });
  }
  return y;
}
}  // namespace

Tensor softmax(const Tensor& a, Site site) {
  Tensor y = softmax_impl(a, false, site);
  autograd::record("softmax", y, {&a}, [y = y.detach()](const Tensor& g) {
    return Grads{y * (g - sum(g * y, -1, true))};
  });
  return y;
}

Tensor log_softmax(const Tensor& a, Site site) {
  Tensor y = softmax_impl(a, true, site);
  autograd::record("log_softmax", y, {&a}, [y = y.detach()](const Tensor& g) {
    return Grads{g - exp(y) * sum(g, -1, true)};
  });
  return y;
}

}  // namespace tide
