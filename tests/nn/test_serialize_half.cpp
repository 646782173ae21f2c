// save/load of bfloat16 and float16 tensors (safetensors BF16 and F16): a golden file written
// by PyTorch's safetensors package (tests/nn/gen_half_golden.py, checked in; no Python at test
// time), round trips on the CPU and the fake GPU, and the refusal of a dtype mismatch.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include "error_of.h"
#include "fake_gpu.h"
#include "nn/serialize.h"
#include "tide.h"

namespace tide::nn {
namespace {

const std::string kGolden = std::string(TIDE_TEST_DATA_DIR) + "/half_golden.safetensors";
constexpr int64_t kValues = 32;  // the golden file's 1-D tensors

std::string tmp(const std::string& name) {
  return (std::filesystem::path(::testing::TempDir()) / ("tide_nn_half_" + name)).string();
}

template <class H>
std::vector<uint16_t> bits_of(const Tensor& t) {
  std::vector<uint16_t> b;
  for (H h : t.to_vector<H>()) b.push_back(h.bits);
  return b;
}

// The bits of t, every NaN written as one pattern: PyTorch's vectorised CPU conversion writes a
// bfloat16 NaN as 0xffff where its scalar one (and tide) write 0x7fc0; both are NaN.
template <class H>
std::vector<uint16_t> bits_nan_as_one(const Tensor& t) {
  std::vector<uint16_t> b;
  for (H h : t.to_vector<H>()) b.push_back(std::isnan(float(h)) ? uint16_t(0x7fff) : h.bits);
  return b;
}

// The golden file's tensors, as buffers of a plain module (zeros until loaded).
struct Golden : Module {
  Tensor src, bf16, f16, bf16_matrix, f16_matrix;
  explicit Golden(Device d = Device::cpu()) {
    src = register_buffer("src", zeros({kValues}, DType::float32, d));
    bf16 = register_buffer("bf16", zeros({kValues}, DType::bfloat16, d));
    f16 = register_buffer("f16", zeros({kValues}, DType::float16, d));
    bf16_matrix = register_buffer("bf16_matrix", zeros({3, 4}, DType::bfloat16, d));
    f16_matrix = register_buffer("f16_matrix", zeros({3, 4}, DType::float16, d));
  }
};

TEST(NnSerializeHalf, GoldenFileFromPyTorch) {
  Golden g;
  load(g, kGolden);
  // PyTorch's conversions of the edge values are tide's, bit for bit but for NaN's payload.
  EXPECT_EQ(bits_nan_as_one<bfloat16>(g.bf16),
            bits_nan_as_one<bfloat16>(cast(g.src, DType::bfloat16)));
  EXPECT_EQ(bits_of<float16>(g.f16), bits_of<float16>(cast(g.src, DType::float16)));
  // A few read as values, so the check above cannot pass on two wrong readings.
  const std::vector<float> src = g.src.to_vector<float>(), b = g.bf16.to_vector<float>(),
                           h = g.f16.to_vector<float>();
  EXPECT_EQ(src[2], 1.0f);
  EXPECT_EQ(b[2], 1.0f);
  EXPECT_EQ(h[13], 65504.0f);               // float16's largest finite
  EXPECT_EQ(h[15], INFINITY);               // 65520: its tie with inf
  EXPECT_EQ(h[20], 0x1p-24f);               // the smallest subnormal
  EXPECT_EQ(b[18], INFINITY);               // bfloat16's tie with inf
  EXPECT_TRUE(std::isnan(b[kValues - 1]));  // NaN stays NaN
  EXPECT_TRUE(std::isnan(h[kValues - 1]));
  std::vector<float> want_b, want_h;
  for (int i = -6; i < 6; ++i) {
    want_b.push_back(float(bfloat16(float(i) / 7.0f)));
    want_h.push_back(float(float16(float(i) / 7.0f)));
  }
  EXPECT_EQ(g.bf16_matrix.to_vector<float>(), want_b);
  EXPECT_EQ(g.f16_matrix.to_vector<float>(), want_h);
}

TEST(NnSerializeHalf, RoundTripKeepsEveryBit) {
  Golden a;
  load(a, kGolden);
  const std::string path = tmp("roundtrip.safetensors");
  save(a, path);
  Golden b;
  load(b, path);
  const auto sa = a.named_state(), sb = b.named_state();  // by value: keep them alive
  ASSERT_EQ(sa.size(), sb.size());
  for (size_t i = 0; i < sa.size(); ++i) {
    const Tensor &x = sa[i].second, &y = sb[i].second;
    SCOPED_TRACE(sa[i].first);
    EXPECT_EQ(y.dtype(), x.dtype());
    if (x.dtype() == DType::bfloat16) EXPECT_EQ(bits_of<bfloat16>(y), bits_of<bfloat16>(x));
    else if (x.dtype() == DType::float16) EXPECT_EQ(bits_of<float16>(y), bits_of<float16>(x));
  }
  // Every 16-bit pattern, NaNs and subnormals included, survives save and load.
  struct All : Module {
    Tensor b, h;
    All() {
      std::vector<bfloat16> vb;
      std::vector<float16> vh;
      for (uint32_t i = 0; i < 65536; ++i) {
        vb.push_back(bfloat16::from_bits(uint16_t(i)));
        vh.push_back(float16::from_bits(uint16_t(i)));
      }
      b = register_buffer("b", from_vector(vb, {65536}));
      h = register_buffer("h", from_vector(vh, {256, 256}));
    }
  } all;
  save(all, path);
  struct Empty : Module {
    Tensor b, h;
    Empty() {
      b = register_buffer("b", zeros({65536}, DType::bfloat16));
      h = register_buffer("h", zeros({256, 256}, DType::float16));
    }
  } back;
  load(back, path);
  EXPECT_EQ(bits_of<bfloat16>(back.b), bits_of<bfloat16>(all.b));
  EXPECT_EQ(bits_of<float16>(back.h), bits_of<float16>(all.h));
}

// A module on a GPU (the recording fake, cuda:8) loads the 16-bit tensors on its device.
TEST(NnSerializeHalf, LoadsOntoAGpu) {
  test_util::fake_gpu(8);
  Golden cpu;
  load(cpu, kGolden);
  Golden gpu(Device::cuda(8));
  load(gpu, kGolden);
  EXPECT_EQ(gpu.bf16.device(), Device::cuda(8));
  EXPECT_EQ(bits_of<bfloat16>(gpu.bf16), bits_of<bfloat16>(cpu.bf16));
  EXPECT_EQ(bits_of<float16>(gpu.f16_matrix), bits_of<float16>(cpu.f16_matrix));
  const std::string path = tmp("gpu.safetensors");
  save(gpu, path);
  Golden again;
  load(again, path);
  EXPECT_EQ(bits_of<float16>(again.f16), bits_of<float16>(cpu.f16));
}

// A BF16 file is not converted into a float32 module (nor the reverse): the load is refused
// before anything is copied, naming the tensor and both dtypes.
TEST(NnSerializeHalf, DtypeMismatchIsRefused) {
  struct AsFloat : Module {
    Tensor src, bf16, f16, bf16_matrix, f16_matrix;
    AsFloat() {
      src = register_buffer("src", zeros({kValues}));
      bf16 = register_buffer("bf16", full({kValues}, 7.0));
      f16 = register_buffer("f16", zeros({kValues}, DType::float16));
      bf16_matrix = register_buffer("bf16_matrix", zeros({3, 4}, DType::bfloat16));
      f16_matrix = register_buffer("f16_matrix", zeros({3, 4}, DType::float16));
    }
  } m;
  EXPECT_TIDE_ERROR(load(m, kGolden), "[load]", "'bf16'", "BF16 in the file", "float32");
  EXPECT_EQ(m.bf16.to_vector<float>(), std::vector<float>(kValues, 7.0f));  // unchanged
  // A 16-bit tensor in the module and a float32 one in the file: refused too.
  struct Narrow : Module {
    Tensor w;
    Narrow() { w = register_buffer("w", zeros({2}, DType::float16)); }
  } narrow;
  struct Wide : Module {
    Tensor w;
    Wide() { w = register_buffer("w", ones({2})); }
  } wide;
  const std::string path = tmp("wide.safetensors");
  save(wide, path);
  EXPECT_TIDE_ERROR(load(narrow, path), "[load]", "'w'", "F32 in the file", "float16");
}

}  // namespace
}  // namespace tide::nn
