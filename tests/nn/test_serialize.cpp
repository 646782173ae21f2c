// save/load in the safetensors format: round trip and every kind of bad file.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>
#include <random>
#include <string_view>
#include <thread>

#include "fake_gpu.h"
#include "nn/serialize.h"
#include "tide.h"

namespace tide::nn {
namespace {

std::string tmp(const std::string& name) {
  return (std::filesystem::path(::testing::TempDir()) / ("tide_nn_" + name)).string();
}

std::string read_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

void write_bytes(const std::string& path, const std::string& b) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(b.data(), std::streamsize(b.size()));
}

// A file with the given header text and data; `len` overrides the stored header length.
std::string make_file(const std::string& header, const std::string& data,
                      std::optional<uint64_t> len = std::nullopt) {
  uint64_t n = len.value_or(header.size());
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[size_t(i)] = char((n >> (8 * i)) & 0xFF);
  return out + header + data;
}

std::shared_ptr<Sequential> mlp(DType dt = DType::float32) {
  auto s = std::make_shared<Sequential>();
  s->push_back(std::make_shared<Linear>(LinearOptions(3, 4).dtype(dt)));
  s->push_back(std::make_shared<ReLU>());
  s->push_back(std::make_shared<Linear>(LinearOptions(4, 2).dtype(dt).init(Init::kaiming_normal)));
  return s;
}

void expect_load_error(Module& m, const std::string& path, const std::vector<std::string>& parts) {
  try {
    load(m, path);
    ADD_FAILURE() << "expected tide::Error for " << path;
  } catch (const Error& e) {
    std::string w = e.what();
    EXPECT_NE(w.find("[load]"), std::string::npos) << w;
    EXPECT_NE(w.find(path), std::string::npos) << w;
    for (const auto& p : parts) EXPECT_NE(w.find(p), std::string::npos) << w << " lacks " << p;
  }
}

template <class T>
void expect_bitwise_equal(const Module& a, const Module& b) {
  auto pa = a.named_parameters(), pb = b.named_parameters();
  ASSERT_EQ(pa.size(), pb.size());
  for (size_t i = 0; i < pa.size(); ++i) {
    EXPECT_EQ(pa[i].first, pb[i].first);
    auto va = pa[i].second.template to_vector<T>(), vb = pb[i].second.template to_vector<T>();
    ASSERT_EQ(va.size(), vb.size());
    EXPECT_EQ(std::memcmp(va.data(), vb.data(), va.size() * sizeof(T)), 0) << pa[i].first;
  }
}

TEST(NnSerialize, RoundTripIsBitwise) {
  manual_seed(11);
  auto a = mlp();
  {
    NoGrad ng;  // a non-zero bias, so the test notices a bias that is not loaded
    a->named_parameters()[1].second.copy_(randn({4}));
  }
  const std::string path = tmp("roundtrip.safetensors");
  save(*a, path);
  std::string bytes = read_bytes(path);
  ASSERT_GE(bytes.size(), 8u);
  uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  EXPECT_EQ(n % 8, 0u);
  EXPECT_EQ(bytes.size(), 8 + n + (12 + 4 + 8 + 2) * 4);
  EXPECT_NE(bytes.find("\"0.weight\":{\"dtype\":\"F32\",\"shape\":[3,4]"), std::string::npos);

  manual_seed(99);
  auto b = mlp();
  uintptr_t id = b->named_parameters()[0].second.id();
  load(*b, path);
  EXPECT_EQ(b->named_parameters()[0].second.id(), id);  // copied in place
  EXPECT_TRUE(b->named_parameters()[0].second.requires_grad());
  expect_bitwise_equal<float>(*a, *b);
}

// Parameters on a GPU (the recording fake, cuda:8) save and load like CPU ones: load
// copies into the parameter on its device.
TEST(NnSerialize, RoundTripOnAGpu) {
  test_util::fake_gpu(8);
  manual_seed(13);
  auto a = mlp();
  a->to(Device::cuda(8));
  const std::string path = tmp("roundtrip_gpu.safetensors");
  save(*a, path);
  manual_seed(77);
  auto b = mlp();
  b->to(Device::cuda(8));
  load(*b, path);
  EXPECT_EQ(b->named_parameters()[0].second.device(), Device::cuda(8));
  expect_bitwise_equal<float>(*a, *b);
  auto c = mlp();  // and into a CPU module
  load(*c, path);
  expect_bitwise_equal<float>(*a, *c);
}

TEST(NnSerialize, RoundTripFloat64) {
  manual_seed(5);
  auto a = mlp(DType::float64);
  const std::string path = tmp("roundtrip64.safetensors");
  save(*a, path);
  auto b = mlp(DType::float64);
  load(*b, path);
  expect_bitwise_equal<double>(*a, *b);
  auto c = mlp(DType::float32);  // dtype mismatch
  expect_load_error(*c, path, {"'0.weight'", "F64", "float32"});
}

// A single (2, 2) float32 weight, no bias: "weight" with 16 bytes.
std::shared_ptr<Linear> small() {
  return std::make_shared<Linear>(LinearOptions(2, 2).bias(false));
}

TEST(NnSerialize, WrongName) {
  const std::string p = tmp("wrongname.safetensors");
  write_bytes(p, make_file(R"({"weigh":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]}})",
                           std::string(16, '\0')));
  auto m = small();
  expect_load_error(*m, p, {"missing from the file: 'weight'", "not in the module: 'weigh'"});
}

TEST(NnSerialize, WrongShape) {
  const std::string p = tmp("wrongshape.safetensors");
  write_bytes(p, make_file(R"({"weight":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]}})",
                           std::string(24, '\0')));
  auto m = small();
  expect_load_error(*m, p, {"'weight'", "(2, 3)", "(2, 2)"});
}

TEST(NnSerialize, WrongAndUnsupportedDtype) {
  const std::string p = tmp("wrongdtype.safetensors");
  write_bytes(p, make_file(R"({"weight":{"dtype":"I32","shape":[2,2],"data_offsets":[0,16]}})",
                           std::string(16, '\0')));
  auto m = small();
  expect_load_error(*m, p, {"'weight'", "I32", "float32"});
  write_bytes(p, make_file(R"({"weight":{"dtype":"U8","shape":[2,2],"data_offsets":[0,4]}})",
                           std::string(4, '\0')));
  expect_load_error(*m, p, {"unsupported dtype 'U8'", "BF16, F16"});
}

TEST(NnSerialize, TruncatedFile) {
  auto m = mlp();
  const std::string good = tmp("trunc_src.safetensors"), p = tmp("trunc.safetensors");
  save(*m, good);
  std::string bytes = read_bytes(good);
  write_bytes(p, bytes.substr(0, bytes.size() - 4));
  expect_load_error(*m, p, {"out of range", "truncated"});
  write_bytes(p, bytes.substr(0, 5));
  expect_load_error(*m, p, {"truncated"});
  write_bytes(p, "");
  expect_load_error(*m, p, {"truncated"});
  expect_load_error(*m, tmp("does_not_exist.safetensors"), {"cannot open"});
}

TEST(NnSerialize, BadJson) {
  auto m = small();
  const std::string p = tmp("badjson.safetensors");
  for (std::string h :
       {std::string(R"({"weight":{"dtype":"F32",)"), std::string("[1,2]"),
        std::string(R"({"weight":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]}}x)"),
        std::string(R"({"weight":{"dtype":F32}})"),
        std::string(R"({"weight":{"dtype":"F32","shape":[2.5,2],"data_offsets":[0,16]}})"),
        std::string(R"({"a":1,"a":2})"), std::string(2000, '['),
        std::string(R"({"weight":{"dtype":"F32","shape":[99999999999999999999]}})")}) {
    write_bytes(p, make_file(h, std::string(16, '\0')));
    try {
      load(*m, p);
      ADD_FAILURE() << "accepted header " << h.substr(0, 80);
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("[load]"), std::string::npos) << e.what();
    }
  }
  write_bytes(p, make_file(R"({"weight":{"dtype":"F32",)", ""));
  expect_load_error(*m, p, {"bad JSON"});
  write_bytes(p, make_file(R"({"weight":{"dtype":"F32","shape":[2,2]}})", ""));
  expect_load_error(*m, p, {"'weight'", "data_offsets"});
}

TEST(NnSerialize, HeaderLengthBeyondFile) {
  auto m = small();
  const std::string p = tmp("hdrlen.safetensors");
  std::string h = R"({"weight":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]}})";
  write_bytes(p, make_file(h, std::string(16, '\0'), 1000000));
  expect_load_error(*m, p, {"header length 1000000 exceeds"});
  write_bytes(p, make_file(h, std::string(16, '\0'), ~uint64_t(1)));  // 2^64 - 2
  expect_load_error(*m, p, {"exceeds"});
  write_bytes(p, make_file(h, std::string(16, '\0'), uint64_t(1) << 63));
  expect_load_error(*m, p, {"header length 9223372036854775808 exceeds the file (86 bytes)"});
}

// Issue 11: load read a device such as /dev/zero until memory ran out. Now it reads the
// 8-byte length (0), then a header of that length, and refuses the empty header.
TEST(NnSerialize, DevZeroIsRefusedAtOnce) {
  if (!std::filesystem::exists("/dev/zero")) GTEST_SKIP() << "no /dev/zero";
  auto m = small();
  expect_load_error(*m, "/dev/zero", {"bad JSON header at byte 0", "unexpected end of header"});
  expect_load_error(*m, ::testing::TempDir(), {"is a directory"});
}

// A header length within the file but beyond 100 MB is refused before it is allocated (a
// sparse file: no disk is used).
TEST(NnSerialize, HeaderLengthBeyondTheLimit) {
  auto m = small();
  const std::string p = tmp("hdrlimit.safetensors");
  write_bytes(p, make_file("", "", 150'000'000));
  std::filesystem::resize_file(p, 200'000'000);
  expect_load_error(*m, p, {"header length 150000000 exceeds the limit of 100000000 bytes"});
  std::filesystem::remove(p);
  // In memory: the same checks, with the buffer's size for the file's.
  std::string bytes = make_file("", "", uint64_t(1) << 63);
  try {
    load_bytes(*m, bytes, "mem");
    ADD_FAILURE() << "accepted a header length of 2^63";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("[load] mem: header length 9223372036854775808 exceeds"),
              std::string::npos)
        << e.what();
  }
}

// A file whose header is cut short, and one whose data is: named as truncated.
TEST(NnSerialize, TruncatedHeaderAndData) {
  auto m = small();
  const std::string p = tmp("trunc2.safetensors");
  std::string h = R"({"weight":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]}})";
  std::string whole = make_file(h, std::string(16, '\0'));
  write_bytes(p, whole.substr(0, 8 + h.size() / 2));
  expect_load_error(*m, p, {"header length 62 exceeds the file (39 bytes)"});
  write_bytes(p, whole.substr(0, whole.size() - 1));
  expect_load_error(*m, p, {"'weight'", "[0, 16] out of range", "has 15 bytes"});
}

// Through a pipe the size is unknown: the loader reads as far as the header says, and
// names a pipe that ends early as truncated.
TEST(NnSerialize, LoadsFromAPipe) {
  signal(SIGPIPE, SIG_IGN);  // the writer must not be killed if the reader stops early
  const std::string fifo = tmp("pipe_" + std::to_string(::getpid()));
  std::filesystem::remove(fifo);
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  auto a = small(), b = small();
  const std::string good = tmp("pipe_src.safetensors");
  save(*a, good);
  const std::string bytes = read_bytes(good);
  auto through_pipe = [&](const std::string& content, const std::function<void()>& reader) {
    std::thread w([&] { write_bytes(fifo, content); });
    reader();
    w.join();
  };
  through_pipe(bytes + "ignored trailing bytes", [&] { load(*b, fifo); });
  expect_bitwise_equal<float>(*a, *b);
  through_pipe(bytes.substr(0, bytes.size() - 3), [&] {
    expect_load_error(*b, fifo,
                      {"file truncated: the entries need 16 bytes of data, the file has 13"});
  });
  through_pipe(bytes.substr(0, 20),
               [&] { expect_load_error(*b, fifo, {"file truncated: header length"}); });
  std::filesystem::remove(fifo);
}

TEST(NnSerialize, LoadBytesMatchesLoad) {
  manual_seed(21);
  auto a = mlp();
  const std::string path = tmp("bytes.safetensors");
  save(*a, path);
  const std::string bytes = read_bytes(path);
  auto b = mlp();
  load_bytes(*b, bytes, "buffer");
  expect_bitwise_equal<float>(*a, *b);
  try {
    load_bytes(*b, std::string_view(bytes).substr(0, bytes.size() - 1), "buffer");
    ADD_FAILURE() << "accepted a truncated buffer";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("[load] buffer: entry '2.bias'"), std::string::npos)
        << e.what();
  }
}

// Three parameters, the middle one empty: saved at [8, 8], where the next one starts.
struct WithEmpty : Module {
  WithEmpty() {
    register_parameter("a", full({2}, 1.0));
    register_parameter("empty", zeros({0}));
    register_parameter("b", full({3}, 2.0));
  }
};

// An empty tensor at the offset where the next one starts does not overlap it, whatever
// order the header lists them in (the overlap check sorted by begin only, so an empty
// entry sorted after its neighbour was reported as overlapping it).
TEST(NnSerialize, EmptyTensorsOverlapNothing) {
  WithEmpty a;
  const std::string p = tmp("empty.safetensors");
  save(a, p);
  WithEmpty b;
  load(b, p);
  std::vector<float> data = {5, 6, 7, 8, 9};
  std::string raw(reinterpret_cast<const char*>(data.data()), 20);
  write_bytes(p, make_file(R"({"b":{"dtype":"F32","shape":[3],"data_offsets":[8,20]},)"
                           R"("empty":{"dtype":"F32","shape":[0],"data_offsets":[8,8]},)"
                           R"("a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})",
                           raw));
  load(b, p);
  auto ps = b.named_parameters();
  EXPECT_EQ(ps[0].second.to_vector<float>(), (std::vector<float>{5, 6}));
  EXPECT_EQ(ps[2].second.to_vector<float>(), (std::vector<float>{7, 8, 9}));
  // A real overlap is still found, behind an empty entry and a longer one.
  write_bytes(p, make_file(R"({"b":{"dtype":"F32","shape":[3],"data_offsets":[0,12]},)"
                           R"("empty":{"dtype":"F32","shape":[0],"data_offsets":[4,4]},)"
                           R"("a":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                           raw));
  expect_load_error(b, p, {"entries 'b' and 'a' overlap"});
}

// What the schema-directed reader accepts and skips, and what it refuses.
TEST(NnSerialize, HeaderJsonDetails) {
  auto m = small();
  const std::string p = tmp("json.safetensors");
  std::vector<float> vals = {1, 2, 3, 4};
  std::string data(reinterpret_cast<const char*>(vals.data()), 16);
  // Metadata of any JSON (skipped), unknown keys in an entry (skipped), escapes in names.
  write_bytes(p, make_file(R"({"__metadata__":{"n":[1.5e3,-2,{"x":[true,false,null]}],)"
                           R"("s":"\ud83d\ude00 \ud800"},)"
                           R"("w\u0065ight":{"extra":{"a":[[]]},"dtype":"F32","shape":[2,2],)"
                           R"("data_offsets":[0,16]}})",
                           data));
  load(*m, p);
  EXPECT_EQ(m->weight().to_vector<float>(), vals);
  struct Case {
    std::string header, message;
  };
  const std::string e = R"("weight":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]})";
  for (const Case& c : std::vector<Case>{
           {"{" + e + "," + e + "}", "duplicate key \"weight\""},
           {R"({"weight":{"dtype":"F32","dtype":"F32","shape":[2,2],"data_offsets":[0,16]}})",
            "duplicate key \"dtype\""},
           {R"({"weight":{"dtype":"F32","shape":[1,1,1,1,1,1,1,1,4],"data_offsets":[0,16]}})",
            "shape has more than 8 dims"},
           {R"({"weight":{"dtype":"F32","shape":[2,-2],"data_offsets":[0,16]}})",
            "shape extents must be integers >= 0"},
           {R"({"weight":{"dtype":"F32","shape":[2,"2"],"data_offsets":[0,16]}})",
            "shape extents must be integers >= 0"},
           {R"({"weight":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16,32]}})",
            "data_offsets must be [begin, end]"},
           {R"({"weight":{"dtype":"F32","shape":[2,2],"data_offsets":[-16,0]}})",
            "bad data_offsets [-16, 0]"},
           {R"({"__metadata__":{"a":)" + std::string(100, '[') + "}", "nesting deeper than 64"},
           {R"({"__metadata__":[]})", "__metadata__ is not an object"},
           {"{" + e + "} {}", "unexpected trailing characters"},
           {"{\"w\x01\":1}", "control character in string"},
           {R"({"weight\q":1})", "bad escape"},
           {R"({"__metadata__":{"x":1.}})", "expected a digit"},
       }) {
    write_bytes(p, make_file(c.header, data));
    expect_load_error(*m, p, {c.message});
  }
}

TEST(NnSerialize, OffsetsOutOfRangeOrOverlapping) {
  auto m = small();
  const std::string p = tmp("offsets.safetensors");
  write_bytes(p, make_file(R"({"weight":{"dtype":"F32","shape":[2,2],"data_offsets":[8,24]}})",
                           std::string(16, '\0')));
  expect_load_error(*m, p, {"'weight'", "[8, 24] out of range"});
  write_bytes(p, make_file(R"({"weight":{"dtype":"F32","shape":[2,2],"data_offsets":[8,4]}})",
                           std::string(16, '\0')));
  expect_load_error(*m, p, {"bad data_offsets"});
  write_bytes(p, make_file(R"({"weight":{"dtype":"F32","shape":[2,2],"data_offsets":[0,12]}})",
                           std::string(16, '\0')));
  expect_load_error(*m, p, {"needs 16"});
  write_bytes(p, make_file(R"({"weight":{"dtype":"F64","shape":[4294967296,4294967296],)"
                           R"("data_offsets":[0,0]}})",
                           ""));
  expect_load_error(*m, p, {"'weight'", "too large"});
  auto lb = std::make_shared<Linear>(2, 2);
  write_bytes(p, make_file(R"({"weight":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]},)"
                           R"("bias":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})",
                           std::string(16, '\0')));
  expect_load_error(*lb, p, {"overlap"});
}

TEST(NnSerialize, MetadataAcceptedAndFailedLoadLeavesModuleUnchanged) {
  auto m = small();
  std::vector<float> before = m->weight().to_vector<float>();
  const std::string p = tmp("meta.safetensors");
  std::vector<float> vals = {1, 2, 3, 4};
  std::string data(reinterpret_cast<const char*>(vals.data()), 16);
  write_bytes(p, make_file(R"({"__metadata__":{"format":"pt","x":"a\"\u00e9"},)"
                           R"( "weight" : {"dtype":"F32","shape":[2,2],"data_offsets":[0,16]}}   )",
                           data));
  load(*m, p);
  EXPECT_EQ(m->weight().to_vector<float>(), vals);
  // A file whose second tensor is bad must not change the first.
  auto lb = std::make_shared<Linear>(2, 2);
  before = lb->weight().to_vector<float>();
  write_bytes(p, make_file(R"({"weight":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]},)"
                           R"("bias":{"dtype":"F32","shape":[3],"data_offsets":[16,28]}})",
                           data + std::string(12, '\0')));
  expect_load_error(*lb, p, {"'bias'"});
  EXPECT_EQ(lb->weight().to_vector<float>(), before);
}

TEST(NnSerialize, FuzzedFilesThrowOrLoadNeverCrash) {
  manual_seed(1);
  auto m = mlp();
  const std::string good = tmp("fuzz_src.safetensors"), p = tmp("fuzz.safetensors");
  save(*m, good);
  const std::string bytes = read_bytes(good);
  std::mt19937 rng(42);
  int loaded = 0, errors = 0;
  auto attempt = [&](const std::string& b) {
    write_bytes(p, b);
    try {
      load(*m, p);
      ++loaded;
    } catch (const Error&) {
      ++errors;
    }
  };
  for (size_t len = 0; len < bytes.size(); len += 7) attempt(bytes.substr(0, len));
  for (int it = 0; it < 400; ++it) {
    std::string b = bytes;
    int flips = 1 + int(rng() % 3);
    for (int k = 0; k < flips; ++k) {
      size_t pos = rng() % std::min<size_t>(b.size(), 8 + 200);  // mostly the header
      b[pos] = char(rng() & 0xFF);
    }
    attempt(b);
  }
  EXPECT_GT(errors, 0);
  EXPECT_EQ(loaded + errors, int((bytes.size() + 6) / 7) + 400);
}

}  // namespace
}  // namespace tide::nn
