// Synthetic and IDX data sources (see data.h).
#include "train/data.h"

#include <algorithm>
#include <array>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>

#include "core/cuda/runtime.h"
#include "core/error.h"
#include "ops/creation.h"

// gzip support needs zlib linked into tide; CMake defines TIDE_HAVE_ZLIB when it is (the
// header alone being present is not enough to link).
#if defined(TIDE_HAVE_ZLIB) && __has_include(<zlib.h>)
#include <zlib.h>
#define TIDE_IDX_GZIP 1
#else
#define TIDE_IDX_GZIP 0
#endif

namespace tide::train {

namespace {

uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// Throws "[op] ..." saying why when d is a GPU this process cannot use (the runtime
// explains: no CUDA in this build, no such device, the driver's error); otherwise starts
// the GPU's runtime, so the batches' first op finds the device ready.
void check_device(Device d, const char* op) {
  if (d.is_cuda()) cuda::DeviceRuntime::get(d.index, op);
}

}  // namespace

// ---- SyntheticSource -----------------------------------------------------------------------

SyntheticSource::SyntheticSource(const SyntheticOptions& o) : opt_(o) {
  TIDE_CHECK(o.examples_ > 0 && o.features_ > 0 && o.batch_size_ > 0, "synthetic",
             "examples, features and batch size must be positive (got ", o.examples_, ", ",
             o.features_, ", ", o.batch_size_, ")");
  TIDE_CHECK(is_floating(o.dtype_), "synthetic", "dtype ", o.dtype_,
             " is not floating");
  check_device(o.device_, "synthetic");
  reset(0);
}

void SyntheticSource::reset(uint64_t epoch) {
  gen_.manual_seed(splitmix64(opt_.seed_ ^ splitmix64(epoch)));
  pos_ = 0;
}

std::optional<Batch> SyntheticSource::next_batch() {
  if (pos_ >= opt_.examples_) return std::nullopt;
  int64_t b = std::min(opt_.batch_size_, opt_.examples_ - pos_);
  pos_ += b;
  return Batch{randn(Shape{b, opt_.features_}, opt_.dtype_, gen_, opt_.device_),
               ones(Shape{b, 1}, opt_.dtype_, opt_.device_)};
}

// ---- IDX files -----------------------------------------------------------------------------

bool idx_gzip_supported() { return TIDE_IDX_GZIP != 0; }

namespace {

bool ends_with(const std::string& s, const char* suffix) {
  size_t n = std::strlen(suffix);
  return s.size() >= n && s.compare(s.size() - n, n, suffix) == 0;
}

std::vector<uint8_t> read_file(const std::string& path) {
  std::error_code ec;
  TIDE_CHECK(std::filesystem::exists(path, ec), "idx", "file not found: ", path);
  TIDE_CHECK(!std::filesystem::is_directory(path, ec), "idx", path, " is a directory");
  std::vector<uint8_t> out;
  if (ends_with(path, ".gz")) {
#if TIDE_IDX_GZIP
    gzFile f = gzopen(path.c_str(), "rb");
    TIDE_CHECK(f != nullptr, "idx", "cannot open ", path, ": ", std::strerror(errno));
    std::array<uint8_t, 1 << 16> chunk;
    for (;;) {
      int got = gzread(f, chunk.data(), unsigned(chunk.size()));
      if (got < 0) {
        int code = 0;
        std::string msg = gzerror(f, &code);
        gzclose(f);
        throw Error("idx", path + ": corrupt gzip data (" + msg + ")");
      }
      if (got == 0) break;
      out.insert(out.end(), chunk.data(), chunk.data() + got);
    }
    gzclose(f);
    return out;
#else
    throw Error("idx", path + ": gzip files need tide built with zlib (TIDE_HAVE_ZLIB); "
                              "gunzip the file or point the source at the plain file");
#endif
  }
  std::ifstream in(path, std::ios::binary);
  TIDE_CHECK(in.good(), "idx", "cannot open ", path, ": ", std::strerror(errno));
  in.seekg(0, std::ios::end);
  std::streamoff n = in.tellg();
  in.seekg(0, std::ios::beg);
  out.resize(size_t(std::max<std::streamoff>(n, 0)));
  if (!out.empty()) in.read(reinterpret_cast<char*>(out.data()), std::streamsize(out.size()));
  TIDE_CHECK(in.good() || in.eof(), "idx", "error reading ", path);
  return out;
}

uint32_t be32(const uint8_t* p) {
  return (uint32_t(p[0]) << 24) | (uint32_t(p[1]) << 16) | (uint32_t(p[2]) << 8) | p[3];
}

std::string hex32(uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%08x", v);
  return buf;
}

// Checks the header of a uint8 IDX file of `ndim` dimensions; returns the dimensions and
// removes the header from `bytes`.
std::vector<int64_t> parse_idx(std::vector<uint8_t>& bytes, int ndim, const std::string& path,
                               const char* what) {
  uint32_t want = 0x00000800u | uint32_t(ndim);
  TIDE_CHECK(bytes.size() >= 4, "idx", path, ": truncated header (", bytes.size(),
             " bytes; expected an IDX ", what, " file)");
  uint32_t magic = be32(bytes.data());
  TIDE_CHECK(magic == want, "idx", path, ": bad magic ", hex32(magic), " (expected ",
             hex32(want), " for uint8 ", what, ")");
  size_t header = 4 + 4 * size_t(ndim);
  TIDE_CHECK(bytes.size() >= header, "idx", path, ": truncated header (", bytes.size(),
             " bytes, expected ", header, ")");
  std::vector<int64_t> dims(ndim);
  uint64_t count = 1;
  bool overflow = false;
  for (int i = 0; i < ndim; ++i) {
    dims[i] = be32(bytes.data() + 4 + 4 * i);
    overflow |= __builtin_mul_overflow(count, uint64_t(dims[i]), &count);
  }
  TIDE_CHECK(!overflow, "idx", path, ": the header declares more elements than fit in 64 "
             "bits (a corrupt file)");
  uint64_t have = bytes.size() - header;
  TIDE_CHECK(have >= count, "idx", path, ": truncated data (", have, " bytes after the header, ",
             "expected ", count, ")");
  TIDE_CHECK(have == count, "idx", path, ": ", have - count,
             " unexpected trailing bytes after ", count, " bytes of data");
  bytes.erase(bytes.begin(), bytes.begin() + std::ptrdiff_t(header));
  return dims;
}

// <dir>/<base>.gz if it exists, else <dir>/<base> (which may not exist: read_file says so).
std::string resolve(const std::string& dir, const std::string& base) {
  std::filesystem::path p = std::filesystem::path(dir) / base;
  std::error_code ec;
  std::string gz = p.string() + ".gz";
  if (std::filesystem::exists(gz, ec)) return gz;
  return p.string();
}

}  // namespace

IdxSource::IdxSource(const IdxOptions& o) : opt_(o) {
  TIDE_CHECK(o.batch_size_ > 0, "idx", "batch size must be positive (got ", o.batch_size_, ")");
  TIDE_CHECK(std::isfinite(o.std_) && o.std_ > 0, "idx", "std must be positive (got ", o.std_,
             ")");
  TIDE_CHECK(o.limit_ >= 0, "idx", "limit must be >= 0 (got ", o.limit_, ")");
  TIDE_CHECK(o.images_.empty() == o.labels_.empty(), "idx",
             "give both the images and the labels file, or neither");
  check_device(o.device_, "idx");
  if (!o.images_.empty()) {
    images_path_ = o.images_;
    labels_path_ = o.labels_;
  } else {
    std::error_code ec;
    TIDE_CHECK(std::filesystem::is_directory(o.dir_, ec), "idx", "data directory not found: ",
               o.dir_, (o.dir_ == kFashionMnistDir
                            ? " (install Debian's dataset-fashion-mnist or pass another dir)"
                            : ""));
    images_path_ = resolve(o.dir_, o.split_ + "-images-idx3-ubyte");
    labels_path_ = resolve(o.dir_, o.split_ + "-labels-idx1-ubyte");
  }
  pixels_ = read_file(images_path_);
  std::vector<int64_t> idims = parse_idx(pixels_, 3, images_path_, "images");
  labels_ = read_file(labels_path_);
  std::vector<int64_t> ldims = parse_idx(labels_, 1, labels_path_, "labels");
  TIDE_CHECK(idims[0] == ldims[0], "idx", idims[0], " images in ", images_path_, " but ",
             ldims[0], " labels in ", labels_path_);
  n_ = idims[0];
  rows_ = idims[1];
  cols_ = idims[2];
  if (o.limit_ > 0 && o.limit_ < n_) {
    n_ = o.limit_;
    pixels_.resize(size_t(n_ * rows_ * cols_));
    labels_.resize(size_t(n_));
  }
  reset(0);
}

void IdxSource::reset(uint64_t epoch) {
  order_.resize(size_t(n_));
  for (int64_t i = 0; i < n_; ++i) order_[size_t(i)] = i;
  if (opt_.shuffle_ && n_ > 1) {
    // Our own Fisher-Yates over raw mt19937_64 output: std::shuffle and the standard
    // distributions differ between standard libraries, this does not.
    std::seed_seq seq{uint32_t(opt_.seed_), uint32_t(opt_.seed_ >> 32), uint32_t(epoch),
                      uint32_t(epoch >> 32)};
    std::mt19937_64 rng(seq);
    for (int64_t i = n_ - 1; i > 0; --i) {
      auto j = int64_t((unsigned __int128)rng() * uint64_t(i + 1) >> 64);
      std::swap(order_[size_t(i)], order_[size_t(j)]);
    }
  }
  pos_ = 0;
}

std::optional<Batch> IdxSource::next_batch() {
  if (pos_ >= n_) return std::nullopt;
  int64_t b = std::min(opt_.batch_size_, n_ - pos_);
  int64_t pix = rows_ * cols_;
  std::array<float, 256> lut;
  for (int v = 0; v < 256; ++v)
    lut[size_t(v)] = float((double(v) / 255.0 - opt_.mean_) / opt_.std_);
  Shape xs = opt_.flatten_ ? Shape{b, pix} : Shape{b, rows_, cols_};
  // Fresh tensors no queued op has touched yet: filling them on the host is safe.
  Tensor x = Tensor::empty(xs, DType::float32, Device::cpu(), "idx");
  Tensor y = Tensor::empty(Shape{b}, DType::int64, Device::cpu(), "idx");
  float* xd = x.data<float>();
  int64_t* yd = y.data<int64_t>();
  for (int64_t r = 0; r < b; ++r) {
    int64_t e = order_[size_t(pos_ + r)];
    const uint8_t* src = pixels_.data() + e * pix;
    float* dst = xd + r * pix;
    for (int64_t k = 0; k < pix; ++k) dst[k] = lut[src[k]];
    yd[r] = labels_[size_t(e)];
  }
  pos_ += b;
  if (!opt_.device_.is_cpu()) return Batch{x.to(opt_.device_), y.to(opt_.device_)};
  return Batch{x, y};
}

}  // namespace tide::train
