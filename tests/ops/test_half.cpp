// The 16-bit storage dtypes (bfloat16, float16) through the ops that accept them: cast between
// every pair of dtypes, fills, host data in and out, printing, copies between devices, and
// the clear error of the ops that do not accept them yet. Each device case runs on the CPU
// and on case_devices() (the recording fake GPU here; the real cuda:0 in tide_cuda_tests),
// and the results must agree bit for bit (a NaN as a NaN: see bits_nan_as_one).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <set>
#include <sstream>

#include "core/engine/engine.h"
#include "error_of.h"
#include "ops/attention.h"
#include "tests/ops/op_harness.h"
#include "tests/ops/runs_cpu_kernels.h"

namespace tide {
namespace {

using test::Check;

constexpr DType kAll[] = {DType::float32, DType::float64,  DType::int32,
                          DType::int64,   DType::bfloat16, DType::float16};

// The raw bytes of t (waits): equal bytes are equal bits, NaN payloads included.
std::vector<unsigned char> bytes_of(const Tensor& t) {
  Tensor c = t.device().is_cpu() ? t : t.to(Device::cpu());
  c.wait_to_read();
  std::vector<unsigned char> b(c.nbytes());
  if (!b.empty()) std::memcpy(b.data(), c.data<unsigned char>(), b.size());
  return b;
}

// Each element's bits, every NaN as one marker: a GPU's float64 <-> float32 conversion (PTX
// cvt) makes every NaN its canonical one, where the CPU keeps the payload. Conversions to and
// from the 16-bit types are bit manipulation and agree on payloads too, but a float64 source
// reaches them through that cvt.
std::vector<uint64_t> bits_nan_as_one(const Tensor& t) {
  const std::vector<unsigned char> b = bytes_of(t);
  const size_t w = size_of(t.dtype());
  std::vector<double> v = t.to_vector<double>();
  std::vector<uint64_t> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    if (is_floating(t.dtype()) && std::isnan(v[i])) {
      out[i] = ~uint64_t(0);
      continue;
    }
    std::memcpy(&out[i], b.data() + i * w, w);  // little-endian: the low bytes
  }
  return out;
}

// Values that test every conversion: ties of both 16-bit formats, their largest finite and
// overflow, subnormals, signed zero, infinities, NaN, integers past 2^24, fractions.
std::vector<double> edge_values() {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  return {0.0,
          -0.0,
          1.0,
          -1.5,
          0.1,
          1.0 + 0x1p-8,
          1.0 + 3 * 0x1p-8,
          65504.0,
          65520.0,
          -70000.,
          0x1p-24,
          0x1p-25,
          3 * 0x1p-25,
          0x1p-14,
          3e38,
          3.4e38,
          1e-40,
          INFINITY,
          -INFINITY,
          nan,
          16777217.0,
          2.5e9,
          -2147483649.0,
          123.456,
          -0.00042,
          1023.5 * 0x1p-24};
}

TIDE_OP_TEST(Half, CastBetweenEveryPairAgreesOnEveryDevice, {OpId::cast, Check::value}) {
  const std::vector<double> values = edge_values();
  const Shape shape{int64_t(values.size())};
  for (DType from : kAll) {
    // float64 holds every edge value; the source dtype takes them as cast would.
    Tensor src = cast(from_data(values, shape, DType::float64), from);
    for (DType to : kAll) {
      SCOPED_TRACE(std::string(name(from)) + " -> " + std::string(name(to)));
      Tensor y = cast(src, to);
      EXPECT_EQ(y.dtype(), to);
      const std::vector<uint64_t> want = bits_nan_as_one(y);
      // The element rule: every source value is exact as a double; to a 16-bit type it
      // rounds through float (float64 and int64 round twice, as documented); from one to
      // float64 it is exact.
      const std::vector<double> in = src.to_vector<double>(), got = y.to_vector<double>();
      for (size_t i = 0; i < values.size(); ++i) {
        SCOPED_TRACE("element " + std::to_string(i) + " = " + std::to_string(in[i]));
        if (to == DType::bfloat16) {
          EXPECT_EQ(y.to_vector<bfloat16>()[i].bits, bfloat16(float(in[i])).bits);
        } else if (to == DType::float16) {
          EXPECT_EQ(y.to_vector<float16>()[i].bits, float16(float(in[i])).bits);
        } else if (to == DType::float64 && is_half(from)) {
          if (std::isnan(in[i])) EXPECT_TRUE(std::isnan(got[i]));
          else EXPECT_EQ(got[i], in[i]);
        }
      }
      for (Device d : test::case_devices()) {
        if (!op_supported(d, OpId::cast)) continue;
        SCOPED_TRACE(d.str());
        Tensor yd = cast(src.to(d), to);
        EXPECT_EQ(yd.device(), d);
        EXPECT_EQ(bits_nan_as_one(yd), want);
      }
    }
  }
}

TEST(Half, CastRoundsToNearestEvenAndSaturatesIntegers) {
  Tensor x = from_data({1.0 + 0x1p-8, 1.0 + 3 * 0x1p-8, 65520.0, 0x1p-25, -0.0, 3.5e38}, {6});
  std::vector<float> b = cast(x, DType::bfloat16).to_vector<float>();
  EXPECT_EQ(b[0], 1.0f);            // tie to even
  EXPECT_EQ(b[1], 1.0f + 0x1p-6f);  // tie to even (up)
  EXPECT_EQ(b[2], 65536.0f);        // bfloat16's step at 2^16 is 512
  EXPECT_TRUE(std::signbit(b[4]));  // -0 stays -0
  EXPECT_EQ(b[5], INFINITY);        // past bfloat16's largest finite (3.39e38)
  std::vector<float> h = cast(x, DType::float16).to_vector<float>();
  EXPECT_EQ(h[2], INFINITY);  // 65520 is float16's tie with inf
  EXPECT_EQ(h[3], 0.0f);      // 2^-25 ties to the even zero
  // 16-bit to integer saturates as float does: NaN -> 0, inf -> the largest int32.
  Tensor s = from_data({NAN, INFINITY, -2.75, 300.5}, {4}, DType::bfloat16);
  EXPECT_EQ(cast(s, DType::int32).to_vector<int32_t>(),
            (std::vector<int32_t>{0, 2147483647, -2, 300}));
}

TIDE_OP_TEST(Half, FillsInEveryDevice, {OpId::zeros, Check::value}) {
  for (DType t : {DType::bfloat16, DType::float16}) {
    SCOPED_TRACE(std::string(name(t)));
    std::vector<Device> devices = test::case_devices();
    devices.insert(devices.begin(), Device::cpu());
    for (Device d : devices) {
      if (!op_supported(d, OpId::full)) continue;
      EXPECT_EQ(zeros({3}, t, d).to_vector<float>(), (std::vector<float>{0, 0, 0}));
      EXPECT_EQ(ones({2, 2}, t, d).to_vector<float>(), (std::vector<float>{1, 1, 1, 1}));
      Tensor f = full({2}, 0.1, t, d);
      EXPECT_EQ(f.dtype(), t);
      const float want = t == DType::bfloat16 ? float(bfloat16(0.1f)) : float(float16(0.1f));
      EXPECT_EQ(f.to_vector<float>(), (std::vector<float>{want, want}));
      EXPECT_EQ(arange(0.0, 4.0, 1.0, t, d).to_vector<float>(), (std::vector<float>{0, 1, 2, 3}));
    }
  }
}

TEST(Half, HostDataInAndOut) {
  // from_data rounds each double to the dtype; from_vector takes 16-bit values as they are.
  Tensor a = from_data({0.1, -2.0, 1e6}, {3}, DType::float16);
  EXPECT_EQ(a.dtype(), DType::float16);
  EXPECT_EQ(a.nbytes(), 6u);
  std::vector<float16> hv = a.to_vector<float16>();
  EXPECT_EQ(hv[0].bits, float16(0.1f).bits);
  EXPECT_EQ(hv[1].bits, 0xc000);
  EXPECT_EQ(hv[2].bits, 0x7c00);  // 1e6 is past float16's range: inf
  std::vector<bfloat16> bv = {bfloat16::from_bits(0x3f80), bfloat16::from_bits(0x7fc1),
                              bfloat16::from_bits(0x8001)};
  Tensor b = from_vector(bv, {3});
  EXPECT_EQ(b.dtype(), DType::bfloat16);
  std::vector<bfloat16> back = b.to_vector<bfloat16>();
  for (size_t i = 0; i < bv.size(); ++i) EXPECT_EQ(back[i].bits, bv[i].bits);
  EXPECT_EQ(b[0].item<float>(), 1.0f);
  EXPECT_EQ(b[0].item<double>(), 1.0);
  EXPECT_EQ(b[0].item<int32_t>(), 1);
  EXPECT_TRUE(std::isnan(b[1].item<float>()));
  // item<bfloat16> of a float32 tensor rounds to nearest even.
  EXPECT_EQ(full({1}, 1.0 + 0x1p-8).item<bfloat16>().bits, 0x3f80);
  // Typed vectors to and from a GPU keep the bits.
  for (Device d : test::case_devices()) {
    if (!op_supported(d, OpId::to)) continue;
    SCOPED_TRACE(d.str());
    Tensor g = from_vector(bv, {3}, d);
    EXPECT_EQ(g.device(), d);
    EXPECT_EQ(bytes_of(g), bytes_of(b));
    EXPECT_EQ(bytes_of(g.to(Device::cpu())), bytes_of(b));
    EXPECT_EQ(bytes_of(clone(g)), bytes_of(b));
  }
}

TEST(Half, PrintsValuesAsFloats) {
  std::ostringstream s;
  s << from_data({1.0, 0.1, -2.5}, {3}, DType::bfloat16);
  EXPECT_EQ(s.str(), "Tensor([1, 0.100098, -2.5], shape=(3,), dtype=bfloat16)");
  std::ostringstream h;
  h << full({}, 65504.0, DType::float16);
  EXPECT_EQ(h.str(), "Tensor(65504, shape=(), dtype=float16)");
}

TEST(Half, ViewsAndCastGradient) {
  Tensor x = from_data({1, 2, 3, 4, 5, 6}, {2, 3}, DType::bfloat16);
  EXPECT_EQ(x.reshape({3, 2})[1].to_vector<float>(), (std::vector<float>{3, 4}));
  EXPECT_EQ(x.slice(1, 2).to_vector<float>(), (std::vector<float>{4, 5, 6}));
  // cast is differentiable between floating types: through bfloat16 and back, the gradient
  // of a sum is cast to the 16-bit type and back, so it stays 1.
  Tensor w = from_data({0.5, -1.25, 3.0}, {3}).requires_grad_();
  Tensor y = sum(cast(cast(w, DType::bfloat16), DType::float32));
  y.backward();
  EXPECT_EQ(w.grad().to_vector<float>(), (std::vector<float>{1, 1, 1}));
}

TEST(Half, CopyIntoIsAByteCopyOfTheSameShapeAndBroadcasts) {
  std::vector<Device> devices = test::case_devices();
  devices.insert(devices.begin(), Device::cpu());
  for (Device d : devices) {
    SCOPED_TRACE(d.str());
    Tensor src = from_data({1.5, -0.0, NAN, 65504}, {2, 2}, DType::float16, d);
    Tensor dst = zeros({2, 2}, DType::float16, d);
    dst.copy_(src);
    EXPECT_EQ(dst.to_vector<float16>()[3].bits, 0x7bff);
    EXPECT_EQ(dst.to_vector<float16>()[1].bits, 0x8000);
    EXPECT_TRUE(std::isnan(dst.to_vector<float>()[2]));
    Tensor rows = zeros({3, 2}, DType::bfloat16, d);
    rows[1].copy_(cast(src[0], DType::bfloat16));  // into a view with an offset
    EXPECT_EQ(rows.to_vector<float>(), (std::vector<float>{0, 0, 1.5f, -0.0f, 0, 0}));
    // Broadcast: through float, every bit pattern kept (NaN payloads too).
    Tensor nan_row = from_data({-2.5, NAN}, {2}, DType::bfloat16, d);
    rows.copy_(nan_row);
    const std::vector<bfloat16> got = rows.to_vector<bfloat16>();
    const std::vector<bfloat16> want = nan_row.to_vector<bfloat16>();
    for (size_t i = 0; i < got.size(); ++i) EXPECT_EQ(got[i].bits, want[i % 2].bits) << i;
    EXPECT_TIDE_ERROR(dst.copy_(zeros({2, 2}, DType::float32, d)), "[copy_]", "dtypes differ");
  }
}

// The op table's `half` column lists exactly the ops that move or convert elements without
// arithmetic in the element type, and those that compute through their float32 path
// (ops/half_compute.h); a row that gains it must gain a test here too.
TEST(Half, TheTableNamesTheOpsThatAcceptThem) {
  const std::set<OpId> accept = {OpId::zeros,
                                 OpId::ones,
                                 OpId::full,
                                 OpId::arange,
                                 OpId::from_data,
                                 OpId::clone,
                                 OpId::cast,
                                 OpId::copy_,
                                 OpId::reshape,
                                 OpId::slice,
                                 OpId::select,
                                 OpId::flatten,
                                 OpId::to,
                                 OpId::add,
                                 OpId::sub,
                                 OpId::mul,
                                 OpId::div,
                                 OpId::maximum,
                                 OpId::eq,
                                 OpId::gt,
                                 OpId::lt,
                                 OpId::relu_grad,
                                 OpId::gelu_grad,
                                 OpId::gelu_tanh_grad,
                                 OpId::neg,
                                 OpId::exp,
                                 OpId::log,
                                 OpId::sqrt,
                                 OpId::abs,
                                 OpId::pow,
                                 OpId::relu,
                                 OpId::sigmoid,
                                 OpId::tanh,
                                 OpId::gelu,
                                 OpId::gelu_tanh,
                                 OpId::add_,
                                 OpId::sub_,
                                 OpId::mul_,
                                 OpId::sum,
                                 OpId::mean,
                                 OpId::max,
                                 OpId::argmax,
                                 OpId::sum_squares,
                                 OpId::matmul,
                                 OpId::transpose,
                                 OpId::swap_axes,
                                 OpId::softmax,
                                 OpId::log_softmax,
                                 OpId::linear,
                                 OpId::cross_entropy,
                                 OpId::take_rows,
                                 OpId::conv2d,
                                 OpId::conv2d_input_grad,
                                 OpId::conv2d_weight_grad,
                                 OpId::layer_norm,
                                 OpId::layer_norm_grad,
                                 OpId::scaled_dot_product_attention,
                                 OpId::scaled_dot_product_attention_grad};
  for (const OpTraits& t : all_ops()) {
    SCOPED_TRACE(std::string(t.name));
    EXPECT_EQ(t.half, accept.count(t.id) == 1);
    EXPECT_EQ(op_supports_dtype(t.id, DType::bfloat16), t.half);
    EXPECT_EQ(op_supports_dtype(t.id, DType::float16), t.half);
    EXPECT_TRUE(op_supports_dtype(t.id, DType::float32));
  }
}

TEST(Half, OpsWithoutAFloat32PathRefuseThemAtTheCall) {
  for (DType t : {DType::bfloat16, DType::float16}) {
    const std::string dt(name(t));
    Tensor a = ones({2, 2}, t);
    EXPECT_TIDE_ERROR(randn({2}, t), "[randn]", dt + " is not supported yet");
    EXPECT_TIDE_ERROR(one_hot(from_vector<int64_t>({0, 1}, {2}), 2, t), "[one_hot]",
                      dt + " is not supported yet", "cast to float32 first");
    // The refusal comes first, on the fake GPU too.
    for (Device d : test::case_devices())
      EXPECT_TIDE_ERROR(one_hot(from_vector<int64_t>({0, 1}, {2}).to(d), 2, t), "[one_hot]",
                        dt + " is not supported yet");
    // The op table says so before the call.
    EXPECT_FALSE(op_supports_dtype(OpId::one_hot, t));
    EXPECT_TRUE(op_supports_dtype(OpId::matmul, t));
    EXPECT_TRUE(op_supports_dtype(OpId::cast, t));
  }
}

// Elementwise ops and the sums on 16-bit tensors are one kernel each (load 16-bit, compute
// in float or double, store 16-bit): no casts are queued around them, and their outputs
// are 16-bit.
TEST(Half, ElementwiseOpsQueueOneKernelAndNoCasts) {
  for (DType t : {DType::bfloat16, DType::float16}) {
    Tensor a = from_data({1.0, -2.0, 3.5, 0.25}, {4}, t),
           b = from_data({0.5, 4.0, -1.0, 2.0}, {4}, t);
    Tensor out = zeros({4}, t);
    wait_all();
    const std::vector<std::function<Tensor()>> ops = {[&] { return add(a, b); },
                                                      [&] { return mul(a, 0.3); },
                                                      [&] { return gt(a, b); },
                                                      [&] { return gelu(a, GeluApprox::tanh); },
                                                      [&] { return relu_grad(b, a); },
                                                      [&] { return exp(a); },
                                                      [&] { return out.add_(a), out; },
                                                      [&] { return out.copy_(b), out; },
                                                      [&] { return sum(a); },
                                                      [&] { return mean(a, 0); },
                                                      [&] { return sum_squares(b); },
                                                      [&] { return max(a); },
                                                      [&] {
                                                        return swap_axes(a.reshape({2, 2}), 0, 1);
                                                      },
                                                      [&] {
                                                        return transpose(a.reshape({2, 2}));
                                                      }};
    for (size_t k = 0; k < ops.size(); ++k) {
      const uint64_t before = Engine::get().stats().queued;
      Tensor y = ops[k]();
      EXPECT_EQ(Engine::get().stats().queued - before, 1u) << name(t) << " op " << k;
      EXPECT_EQ(y.dtype(), t) << k;
    }
  }
}

// softmax and log_softmax read and write 16-bit rows in one kernel (no casts around them);
// their gradient is computed in float32 from the 16-bit output and rounded once: within the
// type's rounding of the float32 path's gradient.
TEST(Half, SoftmaxRowsAreOneKernelWithAFloat32Gradient) {
  std::vector<double> v(24), w(24);
  for (size_t i = 0; i < v.size(); ++i) {
    v[i] = std::sin(double(i) * 1.3) * 2.0;
    w[i] = std::cos(double(i) * 0.7);
  }
  for (DType t : {DType::bfloat16, DType::float16})
    for (bool log_out : {false, true})
      for (Device d : std::vector<Device>{Device::cpu(), test::case_devices().front()}) {
        SCOPED_TRACE(std::string(name(t)) + (log_out ? " log_softmax" : " softmax") + " on " +
                     d.str());
        auto op = [&](const Tensor& x) { return log_out ? log_softmax(x) : softmax(x); };
        Tensor x = from_data(v, {4, 6}, t).to(d);
        wait_all();
        const uint64_t before = Engine::get().stats().queued;
        Tensor y = op(x);
        EXPECT_EQ(Engine::get().stats().queued - before, 1u);
        EXPECT_EQ(y.dtype(), t);
        // The gradient against the float32 path's (the same weights, float32 all through).
        Tensor g = from_data(w, {4, 6}, t).to(d);
        Tensor xl = x.detach().requires_grad_();
        sum(mul(op(xl), g)).backward();
        ASSERT_EQ(xl.grad().dtype(), t);
        Tensor xf = cast(x, DType::float32).requires_grad_();
        sum(mul(op(xf), cast(g, DType::float32))).backward();
        const std::vector<float> got = xl.grad().to(Device::cpu()).to_vector<float>(),
                                 want = xf.grad().to(Device::cpu()).to_vector<float>();
        const double ulp = t == DType::bfloat16 ? 1.0 / 128 : 1.0 / 1024;
        for (size_t i = 0; i < got.size(); ++i)
          EXPECT_NEAR(got[i], want[i], 4 * ulp * (std::abs(want[i]) + 0.25)) << i;
      }
}

// layer_norm reads and writes 16-bit tensors in one kernel with float32 statistics: its
// output and its gradients (x, weight, bias) are the bits of the float32 op between casts.
TEST(Half, LayerNormIsOneKernelWithTheFloat32PathsBits) {
  std::vector<double> v(40), w(8), b(8), g(40);
  for (size_t i = 0; i < v.size(); ++i) {
    v[i] = std::sin(double(i) * 1.1) * 3.0 + 1.0;
    g[i] = std::cos(double(i) * 0.6);
  }
  for (size_t i = 0; i < w.size(); ++i) w[i] = 1.0 + 0.1 * double(i), b[i] = 0.05 * double(i);
  for (DType t : {DType::bfloat16, DType::float16})
    for (Device d : std::vector<Device>{Device::cpu(), test::case_devices().front()}) {
      SCOPED_TRACE(std::string(name(t)) + " on " + d.str());
      Tensor x = from_data(v, {5, 8}, t).to(d), wt = from_data(w, {8}, t).to(d),
             bt = from_data(b, {8}, t).to(d), gy = from_data(g, {5, 8}, t).to(d);
      wait_all();
      const uint64_t before = Engine::get().stats().queued;
      Tensor y = layer_norm(x, wt, bt);
      EXPECT_EQ(Engine::get().stats().queued - before, 1u);
      EXPECT_EQ(y.dtype(), t);
      // Forward and gradients, 16-bit against float32 between casts.
      Tensor xl = x.detach().requires_grad_(), wl = wt.detach().requires_grad_(),
             bl = bt.detach().requires_grad_();
      sum(mul(layer_norm(xl, wl, bl), gy)).backward();
      Tensor xf = cast(x, DType::float32).requires_grad_(),
             wf = cast(wt, DType::float32).requires_grad_(),
             bf = cast(bt, DType::float32).requires_grad_();
      Tensor yf = layer_norm(xf, wf, bf);
      sum(mul(yf, cast(gy, DType::float32))).backward();
      EXPECT_EQ(bytes_of(y), bytes_of(cast(yf, t)));
      EXPECT_EQ(xl.grad().dtype(), t);
      EXPECT_EQ(bytes_of(xl.grad()), bytes_of(cast(xf.grad(), t)));
      EXPECT_EQ(bytes_of(wl.grad()), bytes_of(cast(wf.grad(), t)));
      EXPECT_EQ(bytes_of(bl.grad()), bytes_of(cast(bf.grad(), t)));
    }
}

// Attention on 16-bit q, k, v is one kernel (float32 inside, lse in float32): its output is
// the float32 op's bits rounded once, and its gradient two kernels whose dq, dk and dv are
// the float32 path's within a 16-bit rounding or two (its delta reads the rounded output).
// The fake GPU runs the same entries, with the same bits.
TEST(Half, AttentionIsOneKernelWithTheFloat32Bits) {
  const Shape shape{2, 2, 70, 32};  // past one tile of queries and of keys, a compiled D
  std::vector<double> vq(size_t(shape.numel())), vk(vq.size()), vv(vq.size()), vg(vq.size());
  for (size_t i = 0; i < vq.size(); ++i) {
    vq[i] = std::sin(double(i) * 0.37);
    vk[i] = std::cos(double(i) * 0.21);
    vv[i] = std::sin(double(i) * 0.13 + 1.0);
    vg[i] = std::cos(double(i) * 0.05);
  }
  for (DType t : {DType::bfloat16, DType::float16}) {
    SCOPED_TRACE(name(t));
    const double eps = t == DType::bfloat16 ? 0x1p-8 : 0x1p-11;  // half an ulp at 1
    Tensor q = from_data(vq, shape, t), k = from_data(vk, shape, t), v = from_data(vv, shape, t),
           g = from_data(vg, shape, t);
    wait_all();
    uint64_t before = Engine::get().stats().queued;
    AttentionForward f = scaled_dot_product_attention_forward(q, k, v, true);
    EXPECT_EQ(Engine::get().stats().queued - before, 1u);
    EXPECT_EQ(f.out.dtype(), t);
    EXPECT_EQ(f.lse.dtype(), DType::float32);
    Tensor qf = cast(q, DType::float32).requires_grad_(),
           kf = cast(k, DType::float32).requires_grad_(),
           vf = cast(v, DType::float32).requires_grad_();
    Tensor yf = scaled_dot_product_attention(qf, kf, vf, true);
    EXPECT_EQ(bytes_of(f.out), bytes_of(cast(yf, t)));
    sum(mul(yf, cast(g, DType::float32))).backward();
    wait_all();
    before = Engine::get().stats().queued;
    AttentionGrads d = scaled_dot_product_attention_grad(g, q, k, v, f.out, f.lse, true);
    EXPECT_EQ(Engine::get().stats().queued - before, 2u);  // the statistics, the gradient
    const std::pair<Tensor, Tensor> pairs[] = {
        {d.q, qf.grad()}, {d.k, kf.grad()}, {d.v, vf.grad()}};
    for (const auto& [got16, want32] : pairs) {
      EXPECT_EQ(got16.dtype(), t);
      const std::vector<float> got = cast(got16, DType::float32).to_vector<float>(),
                               want = want32.to_vector<float>();
      double scale = 0;
      for (float w : want) scale = std::max(scale, std::abs(double(w)));
      for (size_t i = 0; i < got.size(); ++i)
        ASSERT_NEAR(got[i], want[i], 4 * eps * std::max(scale, std::abs(double(want[i])))) << i;
    }
    // Through autograd: the same kernels (the packed form in the GPT too).
    Tensor ql = q.detach().requires_grad_();
    sum(mul(scaled_dot_product_attention(ql, k, v, true), g)).backward();
    EXPECT_EQ(bytes_of(ql.grad()), bytes_of(d.q));
    // The case device: its 16-bit kernel entries, one kernel; on the fake GPU the CPU's bits,
    // on a real one within two 16-bit roundings of them.
    const Device gpu = test::case_devices().front();
    if (gpu.is_cpu()) continue;
    Tensor qg = q.to(gpu), kg = k.to(gpu), vg16 = v.to(gpu);
    wait_all();
    before = Engine::get().stats().queued;
    AttentionForward fg = scaled_dot_product_attention_forward(qg, kg, vg16, true);
    EXPECT_EQ(Engine::get().stats().queued - before, 1u);
    AttentionGrads dg =
        scaled_dot_product_attention_grad(g.to(gpu), qg, kg, vg16, fg.out, fg.lse, true);
    for (const auto& [on_gpu, on_cpu] : {std::pair{fg.out, f.out}, std::pair{dg.k, d.k}}) {
      const Tensor back = on_gpu.to(Device::cpu());
      if (test::runs_cpu_kernels(gpu)) {
        EXPECT_EQ(bytes_of(back), bytes_of(on_cpu));
        continue;
      }
      const std::vector<float> got = cast(back, DType::float32).to_vector<float>(),
                               want = cast(on_cpu, DType::float32).to_vector<float>();
      double scale = 0;
      for (float w : want) scale = std::max(scale, std::abs(double(w)));
      for (size_t i = 0; i < got.size(); ++i) ASSERT_NEAR(got[i], want[i], 4 * eps * scale) << i;
    }
  }
}

// conv2d on 16-bit x, w and bias is one CPU kernel computing in float32 (its columns widened
// as they are made) and rounding once: the bits of the float32 op between casts, for the
// output and the gradients of x, w and the bias; geometries with stride, padding, dilation,
// groups and a batch in several column chunks. On the fake GPU the same kernels and bits.
TEST(Half, Conv2dOnTheCpuIsOneKernelWithTheFloat32Bits) {
  struct Case {
    Shape x, w;
    Conv2dOptions opt;
  };
  const Case cases[] = {
      {{3, 4, 9, 11}, {6, 4, 3, 3}, Conv2dOptions().padding(1)},
      {{2, 4, 10, 9},
       {6, 2, 3, 2},
       Conv2dOptions().stride(2, 1).padding(1, 0).dilation(1, 2).groups(2)},
      {{2, 8, 64, 64}, {4, 8, 5, 5}, Conv2dOptions()},  // k * oh * ow past a chunk: one sample each
  };
  for (DType t : {DType::bfloat16, DType::float16})
    for (const Case& c : cases) {
      SCOPED_TRACE(std::string(name(t)) + " x " + c.x.str() + " w " + c.w.str());
      Generator gen(3);
      auto input = [&](const Shape& s) { return cast(randn(s, DType::float32, gen), t); };
      const Tensor x0 = input(c.x), w0 = input(c.w), b0 = input(Shape{c.w[0]});
      Tensor x = x0.detach().requires_grad_(), w = w0.detach().requires_grad_(),
             b = b0.detach().requires_grad_();
      wait_all();
      const uint64_t before = Engine::get().stats().queued;
      Tensor y = conv2d(x, w, b, c.opt);
      EXPECT_EQ(Engine::get().stats().queued - before, 1u);
      EXPECT_EQ(y.dtype(), t);
      const Tensor g = input(y.shape());
      sum(mul(y, g)).backward();
      // The float32 op between casts.
      Tensor xf = cast(x0, DType::float32).requires_grad_(),
             wf = cast(w0, DType::float32).requires_grad_(),
             bf = cast(b0, DType::float32).requires_grad_();
      Tensor yf = conv2d(xf, wf, bf, c.opt);
      sum(mul(yf, cast(g, DType::float32))).backward();
      EXPECT_EQ(bytes_of(y), bytes_of(cast(yf, t)));
      EXPECT_EQ(bytes_of(x.grad()), bytes_of(cast(xf.grad(), t))) << "dx";
      EXPECT_EQ(bytes_of(w.grad()), bytes_of(cast(wf.grad(), t))) << "dw";
      EXPECT_EQ(bytes_of(b.grad()), bytes_of(cast(bf.grad(), t))) << "db";
      // The case device: on the fake GPU the CPU's kernels, the same bits; a real one runs
      // cuDNN's 16-bit convolutions (float sums): within two ulps of the float32 op's
      // largest value, output and gradients.
      const Device gpu = test::case_devices().front();
      if (gpu.is_cpu()) continue;
      Tensor xg = x0.to(gpu).requires_grad_(), wg = w0.to(gpu).requires_grad_(),
             bg = b0.to(gpu).requires_grad_();
      wait_all();
      const uint64_t queued = Engine::get().stats().queued;
      Tensor yg = conv2d(xg, wg, bg, c.opt);
      EXPECT_EQ(Engine::get().stats().queued - queued, 1u) << "one kernel, no casts";
      EXPECT_EQ(yg.dtype(), t);
      sum(mul(yg, g.to(gpu))).backward();
      const std::pair<Tensor, Tensor> pairs[] = {
          {yg, yf}, {xg.grad(), xf.grad()}, {wg.grad(), wf.grad()}, {bg.grad(), bf.grad()}};
      for (const auto& [on_gpu, want_f] : pairs) {
        const Tensor back = on_gpu.to(Device::cpu());
        if (test::runs_cpu_kernels(gpu)) {
          EXPECT_EQ(bytes_of(back), bytes_of(cast(want_f, t)));
          continue;
        }
        const std::vector<float> got = cast(back, DType::float32).to_vector<float>(),
                                 want = want_f.to_vector<float>();
        const double ulp = t == DType::bfloat16 ? 0x1p-7 : 0x1p-10;
        double scale = 0;
        for (float w : want) scale = std::max(scale, std::abs(double(w)));
        for (size_t i = 0; i < got.size(); ++i) ASSERT_NEAR(got[i], want[i], 2 * ulp * scale) << i;
      }
    }
}

// take_rows on 16-bit rows is one kernel that moves them as they are (the float32 path's
// bits: a copy), on the CPU and the fake GPU; its gradient the float32 scatter-add between
// casts.
TEST(Half, TakeRowsMovesSixteenBitRows) {
  std::vector<double> v(24), g(15);
  for (size_t i = 0; i < v.size(); ++i) v[i] = std::sin(double(i) * 0.7) * 3.0;
  for (size_t i = 0; i < g.size(); ++i) g[i] = std::cos(double(i) * 0.3);
  const Tensor rows = from_vector<int64_t>({5, 0, 5, 2, 7}, {5});
  for (DType t : {DType::bfloat16, DType::float16})
    for (Device d : std::vector<Device>{Device::cpu(), test::case_devices().front()}) {
      SCOPED_TRACE(std::string(name(t)) + " on " + d.str());
      Tensor src = from_data(v, {8, 3}, t).to(d).requires_grad_(), r = rows.to(d),
             gy = from_data(g, {5, 3}, t).to(d);
      wait_all();
      const uint64_t before = Engine::get().stats().queued;
      Tensor y = take_rows(src, r);
      EXPECT_EQ(Engine::get().stats().queued - before, 1u);
      EXPECT_EQ(y.dtype(), t);
      sum(mul(y, gy)).backward();
      Tensor sf = cast(src.detach(), DType::float32).requires_grad_();
      Tensor yf = take_rows(sf, r);
      sum(mul(yf, cast(gy, DType::float32))).backward();
      EXPECT_EQ(bytes_of(y), bytes_of(cast(yf, t)));
      EXPECT_EQ(src.grad().dtype(), t);
      EXPECT_EQ(bytes_of(src.grad()), bytes_of(cast(sf.grad(), t)));
    }
}

// sum_to on 16-bit g: one sum reads it directly, the float32 path's bits; two sums take the
// float32 path (casts around them), with its bits too.
TEST(Half, SumToIsOneSumWhereOneSuffices) {
  std::vector<double> v(24);
  for (size_t i = 0; i < v.size(); ++i) v[i] = std::sin(double(i) * 0.9) * 2.0;
  for (DType t : {DType::bfloat16, DType::float16})
    for (Device d : std::vector<Device>{Device::cpu(), test::case_devices().front()}) {
      SCOPED_TRACE(std::string(name(t)) + " on " + d.str());
      Tensor g = from_data(v, {2, 4, 3}, t).to(d);
      Tensor gf = cast(g, DType::float32);
      for (const Shape& to : {Shape{4, 3}, Shape{3}, Shape{4, 1}, Shape{1, 3}}) {
        SCOPED_TRACE(to.str());
        wait_all();
        const uint64_t before = Engine::get().stats().queued;
        Tensor s = sum_to(g, to);
        const uint64_t queued = Engine::get().stats().queued - before;
        if (to == Shape{4, 3} || to == Shape{3}) EXPECT_EQ(queued, 1u);  // one sum, no casts
        EXPECT_EQ(s.dtype(), t);
        EXPECT_EQ(s.shape(), to);
        EXPECT_EQ(bytes_of(s), bytes_of(cast(sum_to(gf, to), t)));
      }
    }
}

// cross_entropy_rows reads 16-bit logits in one kernel (its log-sum-exp kept in float32):
// the losses and the logits' gradient are the float32 op's bits between casts.
TEST(Half, CrossEntropyRowsAreOneKernelWithTheFloat32PathsBits) {
  std::vector<double> v(30), w(5);
  for (size_t i = 0; i < v.size(); ++i) v[i] = std::sin(double(i) * 0.9) * 4.0;
  for (size_t i = 0; i < w.size(); ++i) w[i] = 0.5 + 0.25 * double(i);
  for (DType t : {DType::bfloat16, DType::float16})
    for (Device d : std::vector<Device>{Device::cpu(), test::case_devices().front()}) {
      SCOPED_TRACE(std::string(name(t)) + " on " + d.str());
      Tensor x = from_data(v, {5, 6}, t).to(d), g = from_data(w, {5}, t).to(d);
      Tensor labels = from_vector<int64_t>({0, 5, 2, 3, 1}, {5}).to(d);
      wait_all();
      const uint64_t before = Engine::get().stats().queued;
      Tensor loss = cross_entropy_rows(x, labels);
      EXPECT_EQ(Engine::get().stats().queued - before, 1u);
      EXPECT_EQ(loss.dtype(), t);
      Tensor xl = x.detach().requires_grad_();
      sum(mul(cross_entropy_rows(xl, labels), g)).backward();
      Tensor xf = cast(x, DType::float32).requires_grad_();
      Tensor lf = cross_entropy_rows(xf, labels);
      sum(mul(lf, cast(g, DType::float32))).backward();
      EXPECT_EQ(bytes_of(loss), bytes_of(cast(lf, t)));
      ASSERT_EQ(xl.grad().dtype(), t);
      EXPECT_EQ(bytes_of(xl.grad()), bytes_of(cast(xf.grad(), t)));
    }
}

// Each computing op on 16-bit tensors gives the bits of its float32 self between casts,
// cast(op(cast(x, float32)), dtype), on the CPU and the fake GPU: the elementwise ops compute
// in float natively, the others run their float32 kernels between casts. GEMMs take the
// 16-bit operands directly (tests/ops/test_half_gemm.cpp): within the type's rounding of the
// double result. Gradients reach 16-bit leaves in their dtype.
TEST(Half, OpsComputeThroughFloat32AndRoundOnce) {
  using Op = std::function<Tensor(const Tensor&, const Tensor&)>;
  const std::vector<std::pair<const char*, Op>> ops = {
      {"add", [](const Tensor& a, const Tensor& b) { return add(a, b); }},
      {"mul", [](const Tensor& a, const Tensor& b) { return mul(a, b); }},
      {"div", [](const Tensor& a, const Tensor& b) { return div(a, b); }},
      {"gt", [](const Tensor& a, const Tensor& b) { return gt(a, b); }},
      {"exp", [](const Tensor& a, const Tensor&) { return exp(a); }},
      {"gelu", [](const Tensor& a, const Tensor&) { return gelu(a, GeluApprox::tanh); }},
      {"relu", [](const Tensor& a, const Tensor&) { return relu(a); }},
      {"scalar mul", [](const Tensor& a, const Tensor&) { return mul(a, 0.3); }},
      {"sum", [](const Tensor& a, const Tensor&) { return sum(a); }},
      {"sum columns", [](const Tensor& a, const Tensor&) { return sum(a, 0, true); }},
      {"sum_squares", [](const Tensor& a, const Tensor&) { return sum_squares(a); }},
      {"mean", [](const Tensor& a, const Tensor&) { return mean(a); }},
      {"mean rows", [](const Tensor& a, const Tensor&) { return mean(a, 1); }},
      {"max rows", [](const Tensor& a, const Tensor&) { return max(a, 1); }},
      {"max columns", [](const Tensor& a, const Tensor&) { return max(a, 0); }},
      {"softmax", [](const Tensor& a, const Tensor&) { return softmax(a); }},
      {"log_softmax", [](const Tensor& a, const Tensor&) { return log_softmax(a); }},
      {"transpose", [](const Tensor& a, const Tensor&) { return transpose(a); }},
      {"swap_axes", [](const Tensor& a, const Tensor&) { return swap_axes(a, 0, 1); }},
  };
  std::vector<double> va(16), vb(16);
  for (size_t i = 0; i < va.size(); ++i) {
    va[i] = std::sin(double(i) * 1.7) * 3.0;
    vb[i] = std::cos(double(i) * 0.9) * 2.0 + 2.5;
  }
  for (DType t : {DType::bfloat16, DType::float16}) {
    for (Device d : std::vector<Device>{Device::cpu(), test::case_devices().front()}) {
      Tensor a = from_data(va, {4, 4}, t).to(d), b = from_data(vb, {4, 4}, t).to(d);
      Tensor fa = cast(a, DType::float32), fb = cast(b, DType::float32);
      for (const auto& [name, op] : ops) {
        SCOPED_TRACE(std::string(name) + " " + std::string(tide::name(t)) + " on " + d.str());
        Tensor got = op(a, b);
        EXPECT_EQ(got.dtype(), t);
        EXPECT_EQ(bytes_of(got), bytes_of(cast(op(fa, fb), t)));
      }
    }
    // argmax compares the 16-bit values exactly (one kernel, an int64 result).
    for (Device d : std::vector<Device>{Device::cpu(), test::case_devices().front()}) {
      Tensor a = from_data(va, {4, 4}, t).to(d);
      wait_all();
      const uint64_t before = Engine::get().stats().queued;
      Tensor got = argmax(a, 1);
      EXPECT_EQ(Engine::get().stats().queued - before, 1u);
      EXPECT_EQ(got.to(Device::cpu()).to_vector<int64_t>(),
                argmax(cast(a, DType::float32), 1).to(Device::cpu()).to_vector<int64_t>());
    }
    // Rounded once: matmul against the double product of the rounded inputs, within half an
    // ulp of the type at the result's magnitude (plus float32's summation error).
    Tensor a = from_data(va, {4, 4}, t), b = from_data(vb, {4, 4}, t);
    std::vector<float> ra = a.to_vector<float>(), rb = b.to_vector<float>();
    std::vector<float> got = matmul(a, b).to_vector<float>();
    const double ulp = t == DType::bfloat16 ? 1.0 / 128 : 1.0 / 1024;
    for (int i = 0; i < 4; ++i)
      for (int j = 0; j < 4; ++j) {
        double want = 0;
        for (int k = 0; k < 4; ++k) want += double(ra[size_t(i * 4 + k)]) * rb[size_t(k * 4 + j)];
        EXPECT_NEAR(got[size_t(i * 4 + j)], want, std::abs(want) * ulp * 0.5 + 1e-5)
            << i << "," << j;
      }
    // Gradients land on 16-bit leaves in their dtype.
    Tensor w = from_data(va, {4, 4}, t);
    w.requires_grad_();
    sum(mul(matmul(w, b), 0.5)).backward();
    ASSERT_TRUE(w.grad().defined());
    EXPECT_EQ(w.grad().dtype(), t);
    // d/dw sum(0.5 * w @ b) = 0.5 * rowsum(b) along each row.
    std::vector<float> g = w.grad().to_vector<float>();
    for (int k = 0; k < 4; ++k) {
      double want = 0;
      for (int j = 0; j < 4; ++j) want += 0.5 * rb[size_t(k * 4 + j)];
      EXPECT_NEAR(g[size_t(k)], want, std::abs(want) * ulp + 1e-5);
    }
  }
}

}  // namespace
}  // namespace tide
