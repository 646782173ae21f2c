// Data sources: SyntheticSource shapes and values; IdxSource on tiny IDX files written here
// (plain, and gzip when tide has zlib): decoding, normalisation, shuffling, batching and
// every error case.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "error_of.h"
#include "idx_files.h"
#include "tide.h"
#include "train/data.h"

#if defined(TIDE_HAVE_ZLIB) && __has_include(<zlib.h>)
#include <zlib.h>
#define TEST_GZIP 1
#else
#define TEST_GZIP 0
#endif

using namespace tide;
using namespace tide::train;
namespace fs = std::filesystem;

namespace {

using tide::test_util::error_of;
using tide::test_util::IdxFilesTest;
using tide::test_util::images_bytes;
using tide::test_util::labels_bytes;
using tide::test_util::put_be32;

class IdxTest : public IdxFilesTest {
 protected:
  // The standard pair of files for `split` in dir_.
  void write_split(const std::string& split, uint32_t n, uint32_t rows = 2, uint32_t cols = 3) {
    write(split + "-images-idx3-ubyte", images_bytes(n, rows, cols));
    write(split + "-labels-idx1-ubyte", labels_bytes(n));
  }
  IdxOptions opts() const { return IdxOptions().dir(dir_.string()); }
};

}  // namespace

// ---- SyntheticSource -----------------------------------------------------------------------

TEST(Synthetic, DefaultsAreTheTextbooks) {
  SyntheticSource src;
  EXPECT_EQ(src.size(), 1024);
  EXPECT_EQ(src.batch_size(), 1024);
  EXPECT_EQ(src.num_batches(), 1);
  auto b = src.next_batch();
  ASSERT_TRUE(b.has_value());
  EXPECT_EQ(b->x.shape(), (Shape{1024, 512}));
  EXPECT_EQ(b->y.shape(), (Shape{1024, 1}));
  EXPECT_EQ(b->x.dtype(), DType::float32);
  std::vector<float> y = b->y.to_vector<float>();
  for (float v : y) ASSERT_EQ(v, 1.0f);
  std::vector<double> x = b->x.to_vector<double>();
  double m = 0, s2 = 0;
  for (double v : x) m += v;
  m /= double(x.size());
  for (double v : x) s2 += (v - m) * (v - m);
  double sd = std::sqrt(s2 / double(x.size()));
  EXPECT_NEAR(m, 0.0, 0.01);  // 524288 samples: the standard error is ~0.0014
  EXPECT_NEAR(sd, 1.0, 0.01);
  EXPECT_FALSE(src.next_batch().has_value());
}

TEST(Synthetic, BatchingAndSeeding) {
  SyntheticSource a(SyntheticOptions().examples(10).features(4).batch_size(4).seed(7));
  EXPECT_EQ(a.num_batches(), 3);
  std::vector<int64_t> sizes;
  std::vector<float> first;
  while (auto b = a.next_batch()) {
    sizes.push_back(b->x.size(0));
    EXPECT_EQ(b->y.size(0), b->x.size(0));
    if (first.empty()) first = b->x.to_vector<float>();
  }
  EXPECT_EQ(sizes, (std::vector<int64_t>{4, 4, 2}));

  // Same seed and epoch: same numbers, even after other draws from the default generator.
  SyntheticSource b(SyntheticOptions().examples(10).features(4).batch_size(4).seed(7));
  (void)randn(Shape{100});
  EXPECT_EQ(b.next_batch()->x.to_vector<float>(), first);
  // Another epoch or seed: different numbers; back to epoch 0: the same again.
  b.reset(1);
  EXPECT_NE(b.next_batch()->x.to_vector<float>(), first);
  b.reset(0);
  EXPECT_EQ(b.next_batch()->x.to_vector<float>(), first);
  SyntheticSource c(SyntheticOptions().examples(10).features(4).batch_size(4).seed(8));
  EXPECT_NE(c.next_batch()->x.to_vector<float>(), first);
}

TEST(Synthetic, BadOptions) {
  EXPECT_NE(error_of([] { SyntheticSource(SyntheticOptions().batch_size(0)); }).find("[synthetic]"),
            std::string::npos);
  EXPECT_NE(error_of([] {
              SyntheticSource(SyntheticOptions().dtype(DType::int64));
            }).find("[synthetic] dtype int64"),
            std::string::npos);
}

// ---- IdxSource -----------------------------------------------------------------------------

TEST_F(IdxTest, DecodesAndNormalises) {
  write_split("train", 5);
  IdxSource src(opts().shuffle(false).batch_size(5));
  EXPECT_EQ(src.size(), 5);
  EXPECT_EQ(src.rows(), 2);
  EXPECT_EQ(src.cols(), 3);
  auto b = src.next_batch();
  ASSERT_TRUE(b.has_value());
  EXPECT_EQ(b->x.shape(), (Shape{5, 6}));
  EXPECT_EQ(b->x.dtype(), DType::float32);
  EXPECT_EQ(b->y.shape(), (Shape{5}));
  EXPECT_EQ(b->y.dtype(), DType::int64);
  std::vector<float> x = b->x.to_vector<float>();
  for (int e = 0; e < 5; ++e)
    for (int k = 0; k < 6; ++k)
      ASSERT_FLOAT_EQ(x[size_t(e * 6 + k)], float(((7 * e + k) % 256) / 255.0));
  EXPECT_EQ(b->y.to_vector<int64_t>(), (std::vector<int64_t>{0, 1, 2, 3, 4}));
  EXPECT_FALSE(src.next_batch().has_value());

  // Full 0..255 range maps to [0, 1]; mean/std normalisation.
  write_split("big", 40, 1, 7);  // pixels reach 7*39+6 = 279 → wraps through 0 and 255
  IdxSource big(opts().split("big").shuffle(false).batch_size(40).normalize(0.5, 0.25));
  std::vector<float> xb = big.next_batch()->x.to_vector<float>();
  for (int e = 0; e < 40; ++e)
    for (int k = 0; k < 7; ++k) {
      double v = ((7 * e + k) % 256) / 255.0;
      ASSERT_NEAR(xb[size_t(e * 7 + k)], (v - 0.5) / 0.25, 1e-6);
    }
}

TEST_F(IdxTest, UnflattenedShape) {
  write_split("train", 3);
  IdxSource src(opts().flatten(false).batch_size(2));
  EXPECT_EQ(src.next_batch()->x.shape(), (Shape{2, 2, 3}));
}

TEST_F(IdxTest, BatchingWithPartialLastBatch) {
  write_split("train", 10);
  IdxSource src(opts().batch_size(4).shuffle(false));
  EXPECT_EQ(src.num_batches(), 3);
  std::vector<int64_t> sizes, labels;
  while (auto b = src.next_batch()) {
    sizes.push_back(b->x.size(0));
    for (int64_t l : b->y.to_vector<int64_t>()) labels.push_back(l);
  }
  EXPECT_EQ(sizes, (std::vector<int64_t>{4, 4, 2}));
  EXPECT_EQ(labels, (std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}));
  src.reset(1);
  EXPECT_EQ(src.next_batch()->x.size(0), 4);
}

TEST_F(IdxTest, ShufflingIsSeededAndCoversEveryExample) {
  write_split("train", 36, 1, 1);  // 7*35 < 256: the pixel names the example
  IdxOptions o = opts().batch_size(8).seed(42);
  IdxSource a(o), b(o);
  EXPECT_EQ(a.order(), b.order());
  std::vector<int64_t> identity(36);
  for (int i = 0; i < 36; ++i) identity[size_t(i)] = i;
  EXPECT_NE(a.order(), identity);

  for (uint64_t epoch : {0, 1, 2}) {
    a.reset(epoch);
    b.reset(epoch);
    EXPECT_EQ(a.order(), b.order());
    // Each example exactly once; the batch contents follow order(). The pixel of example e
    // is 7e, so x identifies the example.
    std::multiset<int64_t> seen;
    std::vector<int64_t> visited;
    while (auto batch = a.next_batch()) {
      std::vector<float> x = batch->x.to_vector<float>();
      std::vector<int64_t> y = batch->y.to_vector<int64_t>();
      for (size_t r = 0; r < x.size(); ++r) {
        int64_t e = std::lround(x[r] * 255.0f) / 7;
        seen.insert(e);
        visited.push_back(e);
        EXPECT_EQ(y[r], e % 10);
      }
    }
    EXPECT_EQ(visited, a.order());
    EXPECT_EQ(seen.size(), 36u);
    EXPECT_EQ(std::set<int64_t>(seen.begin(), seen.end()).size(), 36u);
  }
  a.reset(0);
  std::vector<int64_t> e0 = a.order();
  a.reset(1);
  EXPECT_NE(a.order(), e0);
  IdxSource c(opts().batch_size(8).seed(43));
  EXPECT_NE(c.order(), e0);
}

// Data-parallel shards: with the same seed, the ranks' slices of an epoch are disjoint,
// equal in size, cover the unsharded order but for the remainder, and reshuffle together.
TEST_F(IdxTest, ShardsCutEachEpochIntoEqualDisjointSlices) {
  write_split("train", 37, 1, 1);  // 37 = 3 * 12 + 1: one example left over each epoch
  IdxOptions o = opts().batch_size(5).seed(9);
  IdxSource whole(o);
  std::vector<IdxSource> shards;
  shards.reserve(3);
  for (int r = 0; r < 3; ++r) shards.emplace_back(IdxOptions(o).shard(r, 3));
  for (uint64_t epoch : {0, 1}) {
    whole.reset(epoch);
    std::vector<int64_t> joined;
    for (auto& s : shards) {
      s.reset(epoch);
      EXPECT_EQ(s.size(), 12);
      EXPECT_EQ(s.num_batches(), 3);  // 5 + 5 + 2 on every rank
      std::vector<int64_t> visited;
      while (auto b = s.next_batch())
        for (float x : b->x.to_vector<float>()) visited.push_back(std::lround(x * 255.0f) / 7);
      EXPECT_EQ(visited, s.order());
      joined.insert(joined.end(), visited.begin(), visited.end());
    }
    EXPECT_EQ(joined, std::vector<int64_t>(whole.order().begin(), whole.order().begin() + 36));
  }
  shards[0].reset(0);
  std::vector<int64_t> e0 = shards[0].order();
  shards[0].reset(1);
  EXPECT_NE(shards[0].order(), e0);

  EXPECT_NE(error_of([&] { IdxSource(IdxOptions(o).shard(3, 3)); }).find("[idx] shard 3 of 3"),
            std::string::npos);
  EXPECT_NE(error_of([&] { IdxSource(IdxOptions(o).shard(0, 0)); }).find("[idx] shard 0 of 0"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              IdxSource(IdxOptions(o).shard(0, 40));
            }).find("cannot cut 37 examples into 40 shards"),
            std::string::npos);
}

TEST_F(IdxTest, LimitKeepsTheFirstExamples) {
  write_split("train", 20);
  IdxSource src(opts().limit(6).batch_size(100));
  EXPECT_EQ(src.size(), 6);
  std::vector<int64_t> y = src.next_batch()->y.to_vector<int64_t>();
  std::sort(y.begin(), y.end());
  EXPECT_EQ(y, (std::vector<int64_t>{0, 1, 2, 3, 4, 5}));
}

TEST_F(IdxTest, ExplicitFiles) {
  std::string im = write("a.idx", images_bytes(3, 2, 2));
  std::string lb = write("b.idx", labels_bytes(3));
  IdxSource src(IdxOptions().files(im, lb).shuffle(false));
  EXPECT_EQ(src.size(), 3);
  EXPECT_EQ(src.images_path(), im);
}

TEST_F(IdxTest, Errors) {
  auto err = [&](IdxOptions o) { return error_of([&] { IdxSource s(o); }); };
  // Missing directory and files.
  EXPECT_NE(err(IdxOptions().dir((dir_ / "nope").string())).find("[idx] data directory not found"),
            std::string::npos);
  EXPECT_NE(err(opts()).find("[idx] file not found: "), std::string::npos);
  write("train-images-idx3-ubyte", images_bytes(4, 2, 2));
  EXPECT_NE(err(opts()).find("train-labels-idx1-ubyte"), std::string::npos);

  // Bad magic: labels where images are expected, and garbage.
  std::string lb = write("l", labels_bytes(4));
  std::string im = write("i", images_bytes(4, 2, 2));
  std::string msg = err(IdxOptions().files(lb, lb));
  EXPECT_NE(msg.find("[idx] "), std::string::npos) << msg;
  EXPECT_NE(msg.find("bad magic 0x00000801 (expected 0x00000803"), std::string::npos) << msg;
  msg = err(IdxOptions().files(im, im));
  EXPECT_NE(msg.find("bad magic 0x00000803 (expected 0x00000801"), std::string::npos) << msg;
  std::string junk = write("junk", {'P', 'K', 3, 4, 0, 0, 0, 0});
  EXPECT_NE(err(IdxOptions().files(junk, lb)).find("bad magic 0x504b0304"), std::string::npos);

  // Truncated header, truncated data, trailing bytes.
  std::string tiny = write("tiny", {0, 0});
  EXPECT_NE(err(IdxOptions().files(tiny, lb)).find("truncated header"), std::string::npos);
  std::vector<uint8_t> half = images_bytes(4, 2, 2);
  half.resize(10);
  EXPECT_NE(err(IdxOptions().files(write("h", half), lb)).find("truncated header"),
            std::string::npos);
  std::vector<uint8_t> cut = images_bytes(4, 2, 2);
  cut.pop_back();
  msg = err(IdxOptions().files(write("c", cut), lb));
  EXPECT_NE(msg.find("truncated data (15 bytes after the header, expected 16)"), std::string::npos)
      << msg;
  std::vector<uint8_t> cut_labels = labels_bytes(4);
  cut_labels.pop_back();
  EXPECT_NE(err(IdxOptions().files(im, write("cl", cut_labels))).find("truncated data"),
            std::string::npos);
  std::vector<uint8_t> extra = images_bytes(4, 2, 2);
  extra.push_back(0);
  EXPECT_NE(err(IdxOptions().files(write("x", extra), lb)).find("1 unexpected trailing bytes"),
            std::string::npos);

  // Count mismatch.
  msg = err(IdxOptions().files(im, write("l5", labels_bytes(5))));
  EXPECT_NE(msg.find("[idx] 4 images in "), std::string::npos) << msg;
  EXPECT_NE(msg.find("but 5 labels in "), std::string::npos) << msg;

  // Bad options.
  EXPECT_NE(err(IdxOptions().files(im, lb).batch_size(0)).find("[idx] batch size"),
            std::string::npos);
  EXPECT_NE(err(IdxOptions().files(im, lb).normalize(0, 0)).find("[idx] std"), std::string::npos);
  EXPECT_NE(err(IdxOptions().files(im, "")).find("[idx] give both"), std::string::npos);
}

// A header whose element count wraps in 64 bits (4 x 2^31 x 2^31 = 2^64): once it passed the
// size check with a small file and crashed in next_batch().
TEST_F(IdxTest, AHeaderWhoseSizeWrapsIsRefused) {
  std::vector<uint8_t> wrap;
  for (uint32_t v : {0x00000803u, 4u, 0x80000000u, 0x80000000u}) put_be32(wrap, v);
  std::string msg = error_of([&] {
    IdxSource s(IdxOptions().files(write("wrap", wrap), write("l3", labels_bytes(3))).limit(2));
  });
  EXPECT_NE(msg.find("[idx] "), std::string::npos) << msg;
  EXPECT_NE(msg.find("more elements than fit in 64 bits"), std::string::npos) << msg;
}

// Issue 11: a device or pipe has no size to check the header against; the loader reads
// only what the header declares. /dev/zero has a magic of 0.
TEST_F(IdxTest, DevZeroIsRefusedAtOnce) {
  if (!fs::exists("/dev/zero")) GTEST_SKIP() << "no /dev/zero";
  std::string lb = write("l", labels_bytes(2));
  std::string msg = error_of([&] { IdxSource s(IdxOptions().files("/dev/zero", lb)); });
  EXPECT_NE(msg.find("[idx] /dev/zero: bad magic 0x00000000"), std::string::npos) << msg;
}

// A header declaring far more data than the file holds is refused before the data is
// allocated: 2^31 x 2^31 x 1 bytes, read from a file, from memory and (gzipped) in steps.
TEST_F(IdxTest, AHugeDeclaredSizeIsNotAllocated) {
  std::vector<uint8_t> huge;
  for (uint32_t v : {0x00000803u, 0x80000000u, 0x80000000u, 1u, 0x01020304u}) put_be32(huge, v);
  std::string msg = error_of([&] { read_idx(write("huge", huge), 3); });
  EXPECT_NE(msg.find("truncated data (4 bytes after the header, expected 4611686018427387904)"),
            std::string::npos)
      << msg;
  msg = error_of([&] { decode_idx(huge, 3, "mem"); });
  EXPECT_NE(msg.find("[idx] mem: truncated data (4 bytes"), std::string::npos) << msg;
}

// Through a pipe: the same decoding, truncation and trailing bytes found by reading.
TEST_F(IdxTest, ReadsFromAPipe) {
  signal(SIGPIPE, SIG_IGN);  // the writer must not be killed if the reader stops early
  const std::string fifo = (dir_ / "pipe").string();
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  auto through_pipe = [&](const std::vector<uint8_t>& content) {
    IdxArray a;
    std::string msg;
    std::thread w([&] {
      std::ofstream(fifo, std::ios::binary)
          .write(reinterpret_cast<const char*>(content.data()), std::streamsize(content.size()));
    });
    try {
      a = read_idx(fifo, 1);
    } catch (const Error& e) {
      msg = e.what();
    }
    w.join();
    return std::make_pair(a, msg);
  };
  auto [a, msg] = through_pipe(labels_bytes(12));
  EXPECT_EQ(msg, "");
  EXPECT_EQ(a.dims, (std::vector<int64_t>{12}));
  EXPECT_EQ(a.data.size(), 12u);
  EXPECT_EQ(a.data[11], 1);
  std::vector<uint8_t> cut = labels_bytes(12);
  cut.resize(cut.size() - 2);
  msg = through_pipe(cut).second;
  EXPECT_NE(msg.find("truncated data (10 bytes after the header, expected 12)"), std::string::npos)
      << msg;
  std::vector<uint8_t> extra = labels_bytes(12);
  extra.resize(extra.size() + 3);
  msg = through_pipe(extra).second;
  EXPECT_NE(msg.find("3 unexpected trailing bytes after 12 bytes of data"), std::string::npos)
      << msg;
}

// decode_idx on bytes in memory gives what the file gives; IdxSource takes its arrays.
TEST_F(IdxTest, DecodeFromMemoryAndSourceFromArrays) {
  IdxArray im = decode_idx(images_bytes(5, 2, 3), 3, "im");
  EXPECT_EQ(im.dims, (std::vector<int64_t>{5, 2, 3}));
  EXPECT_EQ(im.data.size(), 30u);
  EXPECT_EQ(im.data[7], 8);  // example 1, pixel 1
  IdxArray lb = decode_idx(labels_bytes(5), 1, "lb");
  IdxSource src(im, lb, IdxOptions().shuffle(false).batch_size(5));
  EXPECT_EQ(src.size(), 5);
  EXPECT_EQ(src.next_batch()->y.to_vector<int64_t>(), (std::vector<int64_t>{0, 1, 2, 3, 4}));
  std::vector<uint8_t> extra = labels_bytes(5);
  extra.push_back(0);
  EXPECT_NE(
      error_of([&] { decode_idx(extra, 1, "lb"); }).find("[idx] lb: 1 unexpected trailing bytes"),
      std::string::npos);
  EXPECT_NE(error_of([&] {
              decode_idx(labels_bytes(5), 3, "lb");
            }).find("[idx] lb: bad magic 0x00000801 (expected 0x00000803"),
            std::string::npos);
  // Arrays that do not agree with their dims, or with each other.
  IdxArray bad = im;
  bad.data.pop_back();
  EXPECT_NE(error_of([&] { IdxSource s(bad, lb); }).find("images must be (n, rows, cols)"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              IdxSource s(im, decode_idx(labels_bytes(4), 1, "l4"));
            }).find("[idx] 5 images in "),
            std::string::npos);
}

// Images of no pixels (rows or cols 0) make batches of shape (b, 0).
TEST_F(IdxTest, ZeroPixelImages) {
  IdxSource src(decode_idx(images_bytes(3, 0, 4), 3, "im"), decode_idx(labels_bytes(3), 1, "lb"),
                IdxOptions().shuffle(false).batch_size(2).flatten(false));
  auto b = src.next_batch();
  ASSERT_TRUE(b.has_value());
  EXPECT_EQ(b->x.shape(), (Shape{2, 0, 4}));
  EXPECT_EQ(b->y.to_vector<int64_t>(), (std::vector<int64_t>{0, 1}));
}

TEST_F(IdxTest, Gzip) {
#if TEST_GZIP
  ASSERT_TRUE(idx_gzip_supported());
  auto write_gz = [&](const std::string& name, const std::vector<uint8_t>& bytes) {
    std::string path = (dir_ / name).string();
    gzFile f = gzopen(path.c_str(), "wb");
    ASSERT_NE(f, nullptr);
    ASSERT_EQ(gzwrite(f, bytes.data(), unsigned(bytes.size())), int(bytes.size()));
    gzclose(f);
  };
  write_gz("train-images-idx3-ubyte.gz", images_bytes(6, 2, 3));
  write_gz("train-labels-idx1-ubyte.gz", labels_bytes(6));
  // A plain file beside it with other contents: the .gz one is preferred.
  write("train-labels-idx1-ubyte", labels_bytes(2));
  IdxSource src(opts().shuffle(false).batch_size(6));
  EXPECT_EQ(src.size(), 6);
  EXPECT_EQ(src.next_batch()->y.to_vector<int64_t>(), (std::vector<int64_t>{0, 1, 2, 3, 4, 5}));

  // Truncated gzip stream.
  std::vector<uint8_t> gz;
  {
    std::ifstream in((dir_ / "train-images-idx3-ubyte.gz").string(), std::ios::binary);
    gz.assign(std::istreambuf_iterator<char>(in), {});
  }
  gz.resize(gz.size() / 2);
  std::string bad = write("bad.gz", gz);
  std::string msg = error_of([&] {
    IdxSource s(IdxOptions().files(bad, (dir_ / "train-labels-idx1-ubyte.gz").string()));
  });
  EXPECT_NE(msg.find("[idx] "), std::string::npos) << msg;
  EXPECT_NE(msg.find("bad.gz"), std::string::npos) << msg;

  // The same bytes in memory; a gzip member followed by another, and garbage after the last.
  std::vector<uint8_t> whole;
  {
    std::ifstream in((dir_ / "train-images-idx3-ubyte.gz").string(), std::ios::binary);
    whole.assign(std::istreambuf_iterator<char>(in), {});
  }
  IdxArray a = decode_idx(whole, 3, "mem.gz");
  EXPECT_EQ(a.dims, (std::vector<int64_t>{6, 2, 3}));
  EXPECT_EQ(a.data, decode_idx(images_bytes(6, 2, 3), 3, "plain").data);
  msg = error_of([&] { decode_idx(gz, 3, "half.gz"); });
  EXPECT_NE(msg.find("[idx] half.gz: corrupt gzip data"), std::string::npos) << msg;
  std::vector<uint8_t> labels = labels_bytes(6), first(labels.begin(), labels.begin() + 9),
                       second(labels.begin() + 9, labels.end());
  auto gzip = [](const std::vector<uint8_t>& raw) {
    std::vector<uint8_t> out(compressBound(uLong(raw.size())) + 32);
    z_stream zs{};
    EXPECT_EQ(deflateInit2(&zs, 6, Z_DEFLATED, 16 + MAX_WBITS, 8, Z_DEFAULT_STRATEGY), Z_OK);
    zs.next_in = const_cast<Bytef*>(raw.data());
    zs.avail_in = uInt(raw.size());
    zs.next_out = out.data();
    zs.avail_out = uInt(out.size());
    EXPECT_EQ(deflate(&zs, Z_FINISH), Z_STREAM_END);
    out.resize(zs.total_out);
    deflateEnd(&zs);
    return out;
  };
  std::vector<uint8_t> two = gzip(first), tail = gzip(second);
  two.insert(two.end(), tail.begin(), tail.end());
  two.push_back('x');
  EXPECT_EQ(decode_idx(two, 1, "two.gz").data, decode_idx(labels, 1, "plain").data);
  // A gzipped header that declares 2^62 bytes is read in steps and found truncated.
  std::vector<uint8_t> huge;
  for (uint32_t v : {0x00000803u, 0x80000000u, 0x80000000u, 1u}) put_be32(huge, v);
  msg = error_of([&] { decode_idx(gzip(huge), 3, "huge.gz"); });
  EXPECT_NE(msg.find("truncated data (0 bytes after the header, expected 4611686018427387904)"),
            std::string::npos)
      << msg;
#else
  EXPECT_FALSE(idx_gzip_supported());
  std::string path = write("x.gz", {0x1f, 0x8b});
  EXPECT_NE(error_of([&] {
              IdxSource s(IdxOptions().files(path, path));
            }).find("[idx] " + path + ": gzip files need tide built with zlib"),
            std::string::npos);
  GTEST_SKIP() << "tide built without zlib (TIDE_HAVE_ZLIB): .gz reading not tested";
#endif
}

TEST(FashionMnist, DefaultDirectoryIfInstalled) {
  if (!fs::exists(kFashionMnistDir))
    GTEST_SKIP() << kFashionMnistDir << " not found (Debian package dataset-fashion-mnist)";
  IdxSource test(IdxOptions().split("t10k").batch_size(1000).limit(2000));
  EXPECT_EQ(test.rows(), 28);
  EXPECT_EQ(test.cols(), 28);
  EXPECT_EQ(test.size(), 2000);
  auto b = test.next_batch();
  EXPECT_EQ(b->x.shape(), (Shape{1000, 784}));
}
