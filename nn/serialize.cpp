// save/load of a module's parameters in the safetensors format (see serialize.h). The header
// is read by nn/safetensors_header.h; a file is read only as far as its header declares, with
// every size checked against the file before it is allocated.
// Not done here: memory-mapping, dtypes tide lacks (I8, U8, F8, ...), writing "__metadata__".
#include "nn/serialize.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <new>
#include <optional>
#include <set>
#include <sstream>
#include <stdexcept>

#include "core/error.h"
#include "nn/safetensors_header.h"
#include "ops/ops.h"

namespace tide::nn {

namespace {

using safetensors::check_header_length;
using safetensors::Entry;
using safetensors::load_fail;
using safetensors::parse_header;
using safetensors::st_name;

// Converts between host order and little-endian in place (a no-op on little-endian hosts).
void swap_to_le(char* p, size_t n, size_t elem) {
  if constexpr (std::endian::native == std::endian::little) {
    (void)p, (void)n, (void)elem;
  } else {
    for (size_t i = 0; i + elem <= n; i += elem) std::reverse(p + i, p + i + elem);
  }
}

uint64_t le64(const char* p) {
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= uint64_t(static_cast<unsigned char>(p[i])) << (8 * i);
  return n;
}

void json_string(std::ostringstream& os, const std::string& s) {
  os << '"';
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') os << '\\' << char(c);
    else if (c < 0x20) {
      static const char* hex = "0123456789abcdef";
      os << "\\u00" << hex[c >> 4] << hex[c & 15];
    } else os << char(c);
  }
  os << '"';
}

using Params = std::vector<std::pair<std::string, Tensor>>;

// For each parameter, its entry; throws for names on one side only and for shape or dtype
// mismatches.
std::vector<const Entry*> match(const Params& params, const std::vector<Entry>& entries,
                                const std::string& path) {
  std::map<std::string_view, const Entry*> by_name;
  for (const Entry& e : entries) by_name.emplace(e.name, &e);
  std::set<std::string_view> in_module;
  for (const auto& [name, t] : params) in_module.insert(name);
  std::string missing, unexpected;
  for (const auto& [name, t] : params)
    if (!by_name.count(name)) missing += (missing.empty() ? "'" : ", '") + name + "'";
  for (const Entry& e : entries)
    if (!in_module.count(e.name)) unexpected += (unexpected.empty() ? "'" : ", '") + e.name + "'";
  if (!missing.empty() || !unexpected.empty()) {
    std::string msg = "parameter names do not match the module:";
    if (!missing.empty()) msg += " missing from the file: " + missing + ";";
    if (!unexpected.empty()) msg += " not in the module: " + unexpected + ";";
    load_fail(path, msg);
  }
  std::vector<const Entry*> out;
  for (const auto& [name, t] : params) {
    const Entry& e = *by_name.at(name);
    if (e.dtype != t.dtype())
      load_fail(path, "'" + name + "' has dtype " + st_name(e.dtype) + " in the file but " +
                          std::string(tide::name(t.dtype())) + " in the module");
    if (!(Shape(e.shape) == t.shape()))
      load_fail(path, "'" + name + "' has shape " + Shape(e.shape).str() + " in the file but " +
                          t.shape().str() + " in the module");
    out.push_back(&e);
  }
  return out;
}

// Bytes of the data section the entries use.
uint64_t data_needed(const std::vector<Entry>& entries) {
  uint64_t need = 0;
  for (const Entry& e : entries) need = std::max(need, uint64_t(e.end));
  return need;
}

// All checked: copies each entry's bytes (data + its offsets) into its parameter, in place.
void copy_in(Params& params, const std::vector<const Entry*>& entries, const char* data) {
  NoGrad ng;
  for (size_t i = 0; i < params.size(); ++i) {
    const Entry& e = *entries[i];
    Tensor& t = params[i].second;
    const size_t nb = size_t(e.end - e.begin);
    dispatch_storage(e.dtype, [&](auto zero) {
      using T = decltype(zero);
      std::vector<T> v(nb / sizeof(T));
      if (nb) std::memcpy(v.data(), data + e.begin, nb);
      swap_to_le(reinterpret_cast<char*>(v.data()), nb, sizeof(T));
      t.copy_(from_vector<T>(v, t.shape(), t.device()));  // on the parameter's device
    });
  }
}

// Runs fn, turning an allocation failure (a size no check caught, or a machine short of
// memory) into tide::Error naming the file.
template <class Fn>
void guarded(const std::string& path, Fn&& fn) {
  try {
    fn();
  } catch (const std::bad_alloc&) {
    load_fail(path, "out of memory while loading");
  } catch (const std::length_error&) {
    load_fail(path, "a size in the file is too large to hold in memory");
  }
}

// Reads up to n bytes; returns how many it got (fewer only at the end of the file).
size_t read_up_to(std::ifstream& f, char* dst, size_t n, const std::string& path) {
  if (n == 0) return 0;
  f.read(dst, std::streamsize(n));
  if (f.bad()) load_fail(path, "read error");
  return size_t(f.gcount());
}

void load_file(Module& module, const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::is_directory(path, ec)) load_fail(path, "is a directory");
  std::ifstream f(path, std::ios::binary);
  if (!f.good()) load_fail(path, "cannot open file");
  // A regular file's size bounds what its header may declare. A device or a pipe
  // (/dev/zero) has none: it is read only as far as the header says, and no further.
  std::optional<uint64_t> size;
  if (fs::is_regular_file(path, ec)) {
    uintmax_t s = fs::file_size(path, ec);
    if (!ec) size = uint64_t(s);
  }
  char len[8];
  size_t got = read_up_to(f, len, 8, path);
  if (got < 8)
    load_fail(path, "file truncated: " + std::to_string(got) +
                        " bytes, shorter than the 8-byte header length");
  const uint64_t n = le64(len);
  check_header_length(n, size, path);
  std::string header(size_t(n), '\0');
  got = read_up_to(f, header.data(), header.size(), path);
  if (got < n)
    load_fail(path, "file truncated: header length " + std::to_string(n) + " but only " +
                        std::to_string(got) + " bytes follow");
  std::optional<uint64_t> data_len;
  if (size) data_len = *size - 8 - n;
  const std::vector<Entry> entries = parse_header(header, data_len, path);
  Params params = module.named_state();
  const std::vector<const Entry*> matched = match(params, entries, path);

  // Only the declared bytes. Without a size to check them against, in steps that double
  // from 64 KiB up to 64 MiB: a pipe shorter than its header says costs at most about
  // twice what it holds.
  const uint64_t need = data_needed(entries);
  std::string data;
  if (size) data.reserve(size_t(need));  // need <= data_len: checked above
  while (data.size() < need) {
    const size_t old = data.size();
    const size_t step =
        size ? size_t(need - old)
             : size_t(std::min<uint64_t>(
                   need - old, std::clamp<uint64_t>(old, uint64_t(64) << 10, uint64_t(64) << 20)));
    data.resize(old + step);
    got = read_up_to(f, data.data() + old, step, path);
    if (got < step)
      load_fail(path, "file truncated: the entries need " + std::to_string(need) +
                          " bytes of data, the file has " + std::to_string(old + got));
  }
  copy_in(params, matched, data.data());
}

void load_memory(Module& module, std::string_view bytes, const std::string& name) {
  if (bytes.size() < 8)
    load_fail(name, "file truncated: " + std::to_string(bytes.size()) +
                        " bytes, shorter than the 8-byte header length");
  const uint64_t n = le64(bytes.data());
  check_header_length(n, bytes.size(), name);
  const std::vector<Entry> entries =
      parse_header(bytes.substr(8, size_t(n)), bytes.size() - 8 - n, name);
  Params params = module.named_state();
  const std::vector<const Entry*> matched = match(params, entries, name);
  copy_in(params, matched, bytes.data() + 8 + n);
}

}  // namespace

// ---- save -----------------------------------------------------------------------------------

void save(const Module& module, const std::string& path) {
  std::string data;
  std::ostringstream hdr;
  hdr << '{';
  bool first = true;
  for (const auto& [name, param] : module.named_state()) {
    const Tensor& t = param;  // Clang before 16 cannot capture a structured binding
    size_t begin = data.size();
    dispatch_storage(t.dtype(), [&](auto zero) {
      using T = decltype(zero);
      std::vector<T> v = t.template to_vector<T>();  // waits
      data.append(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));
    });
    swap_to_le(data.data() + begin, data.size() - begin, size_of(t.dtype()));
    if (!first) hdr << ',';
    first = false;
    json_string(hdr, name);
    hdr << ":{\"dtype\":\"" << st_name(t.dtype()) << "\",\"shape\":[";
    for (int i = 0; i < t.ndim(); ++i) hdr << (i ? "," : "") << t.size(i);
    hdr << "],\"data_offsets\":[" << begin << ',' << data.size() << "]}";
  }
  hdr << '}';
  std::string header = hdr.str();
  while (header.size() % 8 != 0) header += ' ';  // keeps the data 8-byte aligned
  char len[8];
  uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) len[i] = char((n >> (8 * i)) & 0xFF);

  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  TIDE_CHECK(f.good(), "save", path, ": cannot open for writing");
  f.write(len, 8);
  f.write(header.data(), std::streamsize(header.size()));
  f.write(data.data(), std::streamsize(data.size()));
  f.close();
  TIDE_CHECK(!f.fail(), "save", path, ": write failed");
}

// ---- load -----------------------------------------------------------------------------------

void load(Module& module, const std::string& path) {
  guarded(path, [&] { load_file(module, path); });
}

void load_bytes(Module& module, std::string_view bytes, const std::string& name) {
  guarded(name, [&] { load_memory(module, bytes, name); });
}

}  // namespace tide::nn
