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
#include <new>
#include <optional>
#include <random>
#include <span>
#include <stdexcept>

#include "core/cuda/runtime.h"
#include "core/error.h"
#include "ops/creation.h"
#include "ops/gather.h"

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
  TIDE_CHECK(is_floating(o.dtype_), "synthetic", "dtype ", o.dtype_, " is not floating");
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

// Bytes in order from memory, a file or a gzip stream. read() returns fewer bytes than
// asked only at the end, and throws "[idx]" on a read error or corrupt compressed data.
class ByteSource {
 public:
  virtual ~ByteSource() = default;
  virtual size_t read(uint8_t* dst, size_t n) = 0;
  // The bytes left, where known (memory, a plain regular file): sizes are checked against
  // it before anything is allocated. A gzip stream, a device or a pipe has none.
  virtual std::optional<uint64_t> remaining() const { return std::nullopt; }
};

class MemorySource : public ByteSource {
 public:
  explicit MemorySource(std::span<const uint8_t> b) : b_(b) {}
  size_t read(uint8_t* dst, size_t n) override {
    n = std::min(n, b_.size() - pos_);
    if (n) std::memcpy(dst, b_.data() + pos_, n);
    pos_ += n;
    return n;
  }
  std::optional<uint64_t> remaining() const override { return b_.size() - pos_; }

 private:
  std::span<const uint8_t> b_;
  size_t pos_ = 0;
};

class FileSource : public ByteSource {
 public:
  explicit FileSource(const std::string& path) : path_(path), in_(path, std::ios::binary) {
    TIDE_CHECK(in_.good(), "idx", "cannot open ", path, ": ", std::strerror(errno));
    std::error_code ec;
    if (std::filesystem::is_regular_file(path, ec)) {
      uintmax_t n = std::filesystem::file_size(path, ec);
      if (!ec) left_ = uint64_t(n);
    }
  }
  size_t read(uint8_t* dst, size_t n) override {
    if (n == 0) return 0;
    in_.read(reinterpret_cast<char*>(dst), std::streamsize(n));
    TIDE_CHECK(!in_.bad(), "idx", "error reading ", path_);
    size_t got = size_t(in_.gcount());
    if (left_) *left_ -= std::min<uint64_t>(*left_, got);
    return got;
  }
  std::optional<uint64_t> remaining() const override { return left_; }

 private:
  std::string path_;
  std::ifstream in_;
  std::optional<uint64_t> left_;
};

#if TIDE_IDX_GZIP
class GzFileSource : public ByteSource {
 public:
  explicit GzFileSource(const std::string& path) : path_(path), f_(gzopen(path.c_str(), "rb")) {
    TIDE_CHECK(f_ != nullptr, "idx", "cannot open ", path, ": ", std::strerror(errno));
  }
  ~GzFileSource() override { gzclose(f_); }
  GzFileSource(const GzFileSource&) = delete;
  GzFileSource& operator=(const GzFileSource&) = delete;
  size_t read(uint8_t* dst, size_t n) override {
    size_t done = 0;
    while (done < n) {
      int got = gzread(f_, dst + done, unsigned(std::min<size_t>(n - done, size_t(1) << 30)));
      if (got < 0) {
        int code = 0;
        throw Error("idx", path_ + ": corrupt gzip data (" + gzerror(f_, &code) + ")");
      }
      if (got == 0) break;
      done += size_t(got);
    }
    return done;
  }

 private:
  std::string path_;
  gzFile f_;
};

// A gzip stream in memory; members follow one another as in a .gz file, and what follows
// the last one is ignored, as gzread does.
class GzMemorySource : public ByteSource {
 public:
  GzMemorySource(std::span<const uint8_t> b, const std::string& name) : b_(b), name_(name) {
    zs_.zalloc = Z_NULL;
    zs_.zfree = Z_NULL;
    zs_.opaque = Z_NULL;
    if (inflateInit2(&zs_, 16 + MAX_WBITS) != Z_OK) throw std::bad_alloc();
  }
  ~GzMemorySource() override { inflateEnd(&zs_); }
  GzMemorySource(const GzMemorySource&) = delete;
  GzMemorySource& operator=(const GzMemorySource&) = delete;
  size_t read(uint8_t* dst, size_t n) override {
    size_t done = 0;
    while (done < n && !end_) {
      if (zs_.avail_in == 0) {
        size_t take = std::min<size_t>(b_.size() - pos_, size_t(1) << 30);
        zs_.next_in = const_cast<Bytef*>(b_.data() + pos_);
        zs_.avail_in = uInt(take);
        pos_ += take;
      }
      zs_.next_out = dst + done;
      zs_.avail_out = uInt(std::min<size_t>(n - done, size_t(1) << 30));
      const uInt before = zs_.avail_out;
      int rc = inflate(&zs_, Z_NO_FLUSH);
      done += size_t(before - zs_.avail_out);
      if (rc == Z_STREAM_END) {
        // Another member follows when the next bytes are gzip's magic (what is left of
        // the buffer is contiguous from next_in).
        const uint8_t* next = zs_.next_in;
        const size_t left = zs_.avail_in + (b_.size() - pos_);
        if (left >= 2 && next[0] == 0x1f && next[1] == 0x8b) inflateReset(&zs_);
        else end_ = true;
      } else if (rc == Z_BUF_ERROR && zs_.avail_in == 0 && pos_ == b_.size()) {
        throw Error("idx", name_ + ": corrupt gzip data (unexpected end of file)");
      } else if (rc == Z_MEM_ERROR) {
        throw std::bad_alloc();
      } else if (rc != Z_OK && rc != Z_BUF_ERROR) {
        throw Error("idx", name_ + ": corrupt gzip data (" +
                               (zs_.msg ? zs_.msg : "inflate error " + std::to_string(rc)) + ")");
      }
    }
    return done;
  }

 private:
  std::span<const uint8_t> b_;
  std::string name_;
  size_t pos_ = 0;
  z_stream zs_{};
  bool end_ = false;
};
#endif

uint32_t be32(const uint8_t* p) {
  return (uint32_t(p[0]) << 24) | (uint32_t(p[1]) << 16) | (uint32_t(p[2]) << 8) | p[3];
}

std::string hex32(uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%08x", v);
  return buf;
}

// Most trailing bytes counted after the data, where the size is not known in advance.
constexpr uint64_t kTrailingCountLimit = uint64_t(1) << 20;

// Reads a uint8 IDX array of `ndim` dimensions: the header first, then exactly the
// elements it declares, checked against the bytes left (where known) before they are
// allocated, and read in growing steps where not, so that memory grows only with what is
// there.
IdxArray decode(ByteSource& src, int ndim, const std::string& name) {
  TIDE_CHECK(ndim >= 1 && ndim <= kMaxDims, "idx", name, ": ", ndim, " dimensions asked for (1 to ",
             kMaxDims, ")");
  const char* what = ndim == 3 ? "images" : ndim == 1 ? "labels" : "data";
  const uint32_t want = 0x00000800u | uint32_t(ndim);
  uint8_t head[4 + 4 * kMaxDims];
  size_t got = src.read(head, 4);
  TIDE_CHECK(got == 4, "idx", name, ": truncated header (", got, " bytes; expected an IDX ", what,
             " file)");
  const uint32_t magic = be32(head);
  TIDE_CHECK(magic == want, "idx", name, ": bad magic ", hex32(magic), " (expected ", hex32(want),
             " for uint8 ", what, ")");
  const size_t header = 4 + 4 * size_t(ndim);
  got = src.read(head + 4, header - 4);
  TIDE_CHECK(4 + got == header, "idx", name, ": truncated header (", 4 + got, " bytes, expected ",
             header, ")");
  IdxArray a;
  a.dims.resize(size_t(ndim));
  uint64_t count = 1;
  bool overflow = false;
  for (int i = 0; i < ndim; ++i) {
    a.dims[size_t(i)] = be32(head + 4 + 4 * i);
    overflow |= __builtin_mul_overflow(count, uint64_t(a.dims[size_t(i)]), &count);
  }
  TIDE_CHECK(!overflow, "idx", name,
             ": the header declares more elements than fit in 64 "
             "bits (a corrupt file)");
  if (std::optional<uint64_t> have = src.remaining()) {
    TIDE_CHECK(*have >= count, "idx", name, ": truncated data (", *have,
               " bytes after the header, expected ", count, ")");
    TIDE_CHECK(*have == count, "idx", name, ": ", *have - count,
               " unexpected trailing bytes after ", count, " bytes of data");
    a.data.resize(size_t(count));
    got = src.read(a.data.data(), a.data.size());
    TIDE_CHECK(got == count, "idx", name, ": truncated data (", got,
               " bytes after the header, expected ", count, "; did the file change?)");
    return a;
  }
  while (a.data.size() < count) {
    // Steps that double from 64 KiB up to 64 MiB: a stream shorter than its header says
    // costs at most about twice what it holds.
    const size_t old = a.data.size();
    const size_t step = size_t(std::min<uint64_t>(
        count - old, std::clamp<uint64_t>(old, uint64_t(64) << 10, uint64_t(64) << 20)));
    a.data.resize(old + step);
    got = src.read(a.data.data() + old, step);
    TIDE_CHECK(got == step, "idx", name, ": truncated data (", old + got,
               " bytes after the header, expected ", count, ")");
  }
  // Counts what follows, up to a limit: an endless stream is not read to its end.
  uint64_t extra = 0;
  std::array<uint8_t, 4096> sink;
  while (extra <= kTrailingCountLimit) {
    got = src.read(sink.data(), sink.size());
    if (got == 0) break;
    extra += got;
  }
  TIDE_CHECK(extra == 0, "idx", name, ": ", (extra > kTrailingCountLimit ? "more than " : ""),
             std::min(extra, kTrailingCountLimit), " unexpected trailing bytes after ", count,
             " bytes of data");
  return a;
}

// Runs fn, turning an allocation failure (a machine short of memory) into "[idx]" naming
// the file: nothing but tide::Error leaves the loader.
template <class Fn>
auto guarded(const std::string& name, Fn&& fn) -> decltype(fn()) {
  try {
    return fn();
  } catch (const std::bad_alloc&) {
    throw Error("idx", name + ": out of memory while reading");
  } catch (const std::length_error&) {
    throw Error("idx", name + ": a size in the file is too large to hold in memory");
  }
}

// <dir>/<base>.gz if it exists, else <dir>/<base> (which may not exist: read_idx says so).
std::string resolve(const std::string& dir, const std::string& base) {
  std::filesystem::path p = std::filesystem::path(dir) / base;
  std::error_code ec;
  std::string gz = p.string() + ".gz";
  if (std::filesystem::exists(gz, ec)) return gz;
  return p.string();
}

}  // namespace

IdxArray decode_idx(std::span<const uint8_t> bytes, int ndim, const std::string& name) {
  return guarded(name, [&] {
    if (bytes.size() >= 2 && bytes[0] == 0x1f && bytes[1] == 0x8b) {
#if TIDE_IDX_GZIP
      GzMemorySource src(bytes, name);
      return decode(src, ndim, name);
#else
      throw Error("idx", name + ": gzip data needs tide built with zlib (TIDE_HAVE_ZLIB)");
#endif
    }
    MemorySource src(bytes);
    return decode(src, ndim, name);
  });
}

IdxArray read_idx(const std::string& path, int ndim) {
  return guarded(path, [&] {
    std::error_code ec;
    TIDE_CHECK(std::filesystem::exists(path, ec), "idx", "file not found: ", path);
    TIDE_CHECK(!std::filesystem::is_directory(path, ec), "idx", path, " is a directory");
    if (ends_with(path, ".gz")) {
#if TIDE_IDX_GZIP
      GzFileSource src(path);
      return decode(src, ndim, path);
#else
      throw Error("idx", path + ": gzip files need tide built with zlib (TIDE_HAVE_ZLIB); "
                                "gunzip the file or point the source at the plain file");
#endif
    }
    FileSource src(path);
    return decode(src, ndim, path);
  });
}

IdxSource::IdxSource(const IdxOptions& o) : opt_(o) {
  check_options();
  TIDE_CHECK(o.images_.empty() == o.labels_.empty(), "idx",
             "give both the images and the labels file, or neither");
  if (!o.images_.empty()) {
    images_path_ = o.images_;
    labels_path_ = o.labels_;
  } else {
    std::error_code ec;
    TIDE_CHECK(std::filesystem::is_directory(o.dir_, ec), "idx",
               "data directory not found: ", o.dir_,
               (o.dir_ == kFashionMnistDir
                    ? " (install Debian's dataset-fashion-mnist or pass another dir)"
                    : ""));
    images_path_ = resolve(o.dir_, o.split_ + "-images-idx3-ubyte");
    labels_path_ = resolve(o.dir_, o.split_ + "-labels-idx1-ubyte");
  }
  IdxArray images = read_idx(images_path_, 3);
  IdxArray labels = read_idx(labels_path_, 1);
  init(std::move(images), std::move(labels));
}

IdxSource::IdxSource(IdxArray images, IdxArray labels, const IdxOptions& o)
    : opt_(o), images_path_("(images in memory)"), labels_path_("(labels in memory)") {
  check_options();
  init(std::move(images), std::move(labels));
}

void IdxSource::check_options() const {
  const IdxOptions& o = opt_;
  TIDE_CHECK(o.batch_size_ > 0, "idx", "batch size must be positive (got ", o.batch_size_, ")");
  TIDE_CHECK(std::isfinite(o.std_) && o.std_ > 0, "idx", "std must be positive (got ", o.std_, ")");
  TIDE_CHECK(o.limit_ >= 0, "idx", "limit must be >= 0 (got ", o.limit_, ")");
  TIDE_CHECK(o.shard_count_ >= 1 && o.shard_index_ >= 0 && o.shard_index_ < o.shard_count_, "idx",
             "shard ", o.shard_index_, " of ", o.shard_count_,
             " does not exist (want 0 <= index < count)");
  check_device(o.device_, "idx");
}

void IdxSource::init(IdxArray images, IdxArray labels) {
  auto numel = [](const IdxArray& a) {
    uint64_t n = 1;
    for (int64_t d : a.dims)
      if (d < 0 || __builtin_mul_overflow(n, uint64_t(d), &n)) return ~uint64_t(0);
    return n;
  };
  TIDE_CHECK(images.dims.size() == 3 && numel(images) == images.data.size(), "idx", images_path_,
             ": images must be (n, rows, cols) with n*rows*cols bytes");
  TIDE_CHECK(labels.dims.size() == 1 && numel(labels) == labels.data.size(), "idx", labels_path_,
             ": labels must be (n) with n bytes");
  TIDE_CHECK(images.dims[0] == labels.dims[0], "idx", images.dims[0], " images in ", images_path_,
             " but ", labels.dims[0], " labels in ", labels_path_);
  n_ = images.dims[0];
  rows_ = images.dims[1];
  cols_ = images.dims[2];
  pixels_ = std::move(images.data);
  labels_ = std::move(labels.data);
  if (opt_.limit_ > 0 && opt_.limit_ < n_) {
    n_ = opt_.limit_;
    pixels_.resize(size_t(n_ * rows_ * cols_));
    labels_.resize(size_t(n_));
  }
  TIDE_CHECK(n_ >= opt_.shard_count_, "idx", "cannot cut ", n_, " examples into ",
             opt_.shard_count_, " shards: every shard needs one at least");
  guarded(labels_path_, [&] { reset(0); });
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
  if (opt_.shard_count_ > 1) {  // this shard's slice of the whole epoch's order
    const int64_t per = n_ / opt_.shard_count_, first = per * opt_.shard_index_;
    order_.erase(order_.begin() + first + per, order_.end());
    order_.erase(order_.begin(), order_.begin() + first);
  }
  pos_ = 0;
}

std::array<float, 256> IdxSource::pixel_values() const {
  std::array<float, 256> lut;
  for (int v = 0; v < 256; ++v)
    lut[size_t(v)] = float((double(v) / 255.0 - opt_.mean_) / opt_.std_);
  return lut;
}

void IdxSource::upload() {
  const std::array<float, 256> lut = pixel_values();
  std::vector<float> x(pixels_.size());
  for (size_t i = 0; i < x.size(); ++i) x[i] = lut[pixels_[i]];
  x_all_ = from_vector(x, Shape{n_, rows_ * cols_}, opt_.device_);
  y_all_ =
      from_vector(std::vector<int64_t>(labels_.begin(), labels_.end()), Shape{n_}, opt_.device_);
}

std::optional<Batch> IdxSource::next_batch() {
  const int64_t n = size();
  if (pos_ >= n) return std::nullopt;
  int64_t b = std::min(opt_.batch_size_, n - pos_);
  int64_t pix = rows_ * cols_;
  Shape xs = opt_.flatten_ ? Shape{b, pix} : Shape{b, rows_, cols_};
  if (!opt_.device_.is_cpu() && opt_.resident_) {
    if (!x_all_.defined()) upload();
    Tensor idx = from_vector(std::vector<int64_t>(order_.begin() + pos_, order_.begin() + pos_ + b),
                             Shape{b}, opt_.device_);
    pos_ += b;
    return Batch{take_rows(x_all_, idx).reshape(xs.vec()), take_rows(y_all_, idx)};
  }
  const std::array<float, 256> lut = pixel_values();
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
