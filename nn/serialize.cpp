// save/load of a module's parameters in the safetensors format (see serialize.h).
// The header is read by a small JSON reader that follows the format's schema and keeps only
// what load needs, so a hostile header costs memory in proportion to its entries, never to
// its arrays or nesting; a file is read only as far as its header declares, with every
// size checked against the file before it is allocated.
// Not done here: memory-mapping, dtypes beyond tide's four, writing "__metadata__".
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
#include "ops/ops.h"

namespace tide::nn {

namespace {

[[noreturn]] void load_fail(const std::string& path, const std::string& what) {
  throw Error("load", path + ": " + what);
}

// ---- dtypes and bytes ---------------------------------------------------------------------

const char* st_name(DType t) {
  switch (t) {
    case DType::float32: return "F32";
    case DType::float64: return "F64";
    case DType::int32: return "I32";
    case DType::int64: return "I64";
  }
  return "?";
}

bool st_dtype(const std::string& s, DType& out) {
  for (DType t : {DType::float32, DType::float64, DType::int32, DType::int64})
    if (s == st_name(t)) {
      out = t;
      return true;
    }
  return false;
}

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

struct Entry {
  std::string name;
  DType dtype = DType::float32;
  std::vector<int64_t> shape;
  int64_t begin = 0, end = 0;
};

// ---- the header: a JSON reader directed by the safetensors schema ---------------------------
// The top level is an object of entries {"dtype": "F32", "shape": [..], "data_offsets": [b, e]}
// and an optional "__metadata__" object. The metadata and an entry's unknown keys are checked
// as JSON (nesting at most 64 deep) and skipped without being stored. Where load reads a
// number it must be an integer; skipped numbers may have fractions and exponents.

class HeaderParser {
 public:
  HeaderParser(std::string_view text, const std::string& file) : s_(text), file_(file) {}

  // The entries in file order. Throws "[load] <file>: bad JSON header at byte i: ..." for
  // malformed JSON, and names the entry for a field of the wrong kind.
  std::vector<Entry> parse() {
    ws();
    if (peek() != '{') load_fail(file_, "header is not a JSON object");
    ++i_;
    std::vector<Entry> entries;
    bool metadata = false;
    members([&](std::string key) {
      if (key == "__metadata__") {
        if (metadata) fail("duplicate key \"__metadata__\"");
        metadata = true;
        if (peek() != '{') load_fail(file_, "__metadata__ is not an object");
        skip_value(1);
      } else {
        entries.push_back(entry(std::move(key)));
      }
    });
    ws();
    if (i_ != s_.size()) fail("unexpected trailing characters");
    return entries;
  }

 private:
  static constexpr int kMaxDepth = 64;

  [[noreturn]] void fail(const std::string& what) const {
    load_fail(file_, "bad JSON header at byte " + std::to_string(i_) + ": " + what);
  }
  void ws() {
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\t' || s_[i_] == '\n' || s_[i_] == '\r'))
      ++i_;
  }
  char peek() {
    if (i_ >= s_.size()) fail("unexpected end of header");
    return s_[i_];
  }
  void expect(char c) {
    if (peek() != c) fail(std::string("expected '") + c + "'");
    ++i_;
  }
  void literal(std::string_view word) {
    if (s_.substr(i_, word.size()) != word) fail("invalid literal");
    i_ += word.size();
  }
  static bool digit(char c) { return c >= '0' && c <= '9'; }

  // The members of the object whose '{' was just consumed: on_member(key) for each, with
  // the value next; through the closing '}'.
  template <class F>
  void members(F&& on_member) {
    ws();
    if (peek() == '}') {
      ++i_;
      return;
    }
    for (;;) {
      on_member(key_colon());
      ws();
      if (peek() == ',') {
        ++i_;
        continue;
      }
      expect('}');
      return;
    }
  }

  // `"key" :` and the whitespace after it; returns the key.
  std::string key_colon() {
    ws();
    if (peek() != '"') fail("expected a string key");
    std::string key;
    string_body(&key);
    ws();
    expect(':');
    ws();
    return key;
  }

  // One entry's object; `where` prefixes its errors.
  Entry entry(std::string name) {
    const std::string where = "entry '" + name + "': ";
    if (peek() != '{') load_fail(file_, where + "not an object");
    ++i_;
    Entry e;
    e.name = std::move(name);
    bool dt = false, sh = false, off = false;
    members([&](std::string key) {
      if (key == "dtype") {
        once(dt, key);
        if (peek() != '"') load_fail(file_, where + "dtype is not a string");
        std::string s;
        string_body(&s);
        if (!st_dtype(s, e.dtype))
          load_fail(file_, where + "unsupported dtype '" + s + "' (tide reads F32, F64, I32, I64)");
      } else if (key == "shape") {
        once(sh, key);
        if (peek() != '[') load_fail(file_, where + "shape is not an array");
        e.shape = integers(size_t(kMaxDims), where + "shape has more than 8 dims",
                           where + "shape extents must be integers >= 0");
        for (int64_t d : e.shape)
          if (d < 0) load_fail(file_, where + "shape extents must be integers >= 0");
      } else if (key == "data_offsets") {
        once(off, key);
        const std::string bad = where + "data_offsets must be [begin, end]";
        if (peek() != '[') load_fail(file_, bad);
        std::vector<int64_t> o = integers(2, bad, bad);
        if (o.size() != 2) load_fail(file_, bad);
        e.begin = o[0];
        e.end = o[1];
      } else {
        skip_value(2);
      }
    });
    if (!dt || !sh || !off) load_fail(file_, where + "needs dtype, shape and data_offsets");
    return e;
  }

  void once(bool& seen, const std::string& key) {
    if (seen) fail("duplicate key \"" + key + "\"");
    seen = true;
  }

  // An array of at most `max` integers: `too_many` when longer, `not_int` for an element
  // that is not a number.
  std::vector<int64_t> integers(size_t max, const std::string& too_many,
                                const std::string& not_int) {
    expect('[');
    std::vector<int64_t> out;
    ws();
    if (peek() == ']') {
      ++i_;
      return out;
    }
    for (;;) {
      ws();
      char c = peek();
      if (c != '-' && !digit(c)) load_fail(file_, not_int);
      if (out.size() == max) load_fail(file_, too_many);
      out.push_back(integer());
      ws();
      if (peek() == ',') {
        ++i_;
        continue;
      }
      expect(']');
      return out;
    }
  }

  int64_t integer() {
    bool neg = false;
    if (peek() == '-') {
      neg = true;
      ++i_;
    }
    if (!digit(peek())) fail("expected a digit");
    uint64_t n = 0;
    const uint64_t limit = uint64_t(std::numeric_limits<int64_t>::max());
    while (i_ < s_.size() && digit(s_[i_])) {
      uint64_t d = uint64_t(s_[i_] - '0');
      if (n > (limit - d) / 10) fail("integer out of range");
      n = n * 10 + d;
      ++i_;
    }
    if (i_ < s_.size() && (s_[i_] == '.' || s_[i_] == 'e' || s_[i_] == 'E'))
      fail("non-integer numbers are not supported here");
    return neg ? -int64_t(n) : int64_t(n);
  }

  // Any JSON value, checked and dropped.
  void skip_value(int depth) {
    if (depth > kMaxDepth) fail("nesting deeper than 64");
    ws();
    char c = peek();
    if (c == '{') {
      ++i_;
      ws();
      if (peek() == '}') {
        ++i_;
        return;
      }
      for (;;) {
        ws();
        if (peek() != '"') fail("expected a string key");
        string_body(nullptr);
        ws();
        expect(':');
        skip_value(depth + 1);
        ws();
        if (peek() == ',') {
          ++i_;
          continue;
        }
        expect('}');
        return;
      }
    }
    if (c == '[') {
      ++i_;
      ws();
      if (peek() == ']') {
        ++i_;
        return;
      }
      for (;;) {
        skip_value(depth + 1);
        ws();
        if (peek() == ',') {
          ++i_;
          continue;
        }
        expect(']');
        return;
      }
    }
    if (c == '"') return string_body(nullptr);
    if (c == 't') return literal("true");
    if (c == 'f') return literal("false");
    if (c == 'n') return literal("null");
    if (c == '-' || digit(c)) return skip_number();
    fail(std::string("unexpected character '") + c + "'");
  }

  // -?digits(.digits)?([eE][+-]?digits)?
  void skip_number() {
    auto digits = [&] {
      if (!digit(peek())) fail("expected a digit");
      while (i_ < s_.size() && digit(s_[i_])) ++i_;
    };
    if (peek() == '-') ++i_;
    digits();
    if (i_ < s_.size() && s_[i_] == '.') {
      ++i_;
      digits();
    }
    if (i_ < s_.size() && (s_[i_] == 'e' || s_[i_] == 'E')) {
      ++i_;
      if (peek() == '+' || peek() == '-') ++i_;
      digits();
    }
  }

  static void put_utf8(std::string& out, uint32_t cp) {
    if (cp < 0x80) {
      out += char(cp);
    } else if (cp < 0x800) {
      out += char(0xC0 | (cp >> 6));
      out += char(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
      out += char(0xE0 | (cp >> 12));
      out += char(0x80 | ((cp >> 6) & 0x3F));
      out += char(0x80 | (cp & 0x3F));
    } else {
      out += char(0xF0 | (cp >> 18));
      out += char(0x80 | ((cp >> 12) & 0x3F));
      out += char(0x80 | ((cp >> 6) & 0x3F));
      out += char(0x80 | (cp & 0x3F));
    }
  }

  uint32_t hex4() {
    uint32_t cp = 0;
    for (int k = 0; k < 4; ++k) {
      char h = peek();
      ++i_;
      cp <<= 4;
      if (h >= '0' && h <= '9') cp |= uint32_t(h - '0');
      else if (h >= 'a' && h <= 'f') cp |= uint32_t(h - 'a' + 10);
      else if (h >= 'A' && h <= 'F') cp |= uint32_t(h - 'A' + 10);
      else fail("bad \\u escape");
    }
    return cp;
  }

  // A string from its opening quote; appended to *out unless out is null.
  void string_body(std::string* out) {
    expect('"');
    std::string sink;
    std::string& o = out ? *out : sink;
    for (;;) {
      char c = peek();
      ++i_;
      if (c == '"') return;
      if (static_cast<unsigned char>(c) < 0x20) fail("control character in string");
      if (c != '\\') {
        if (out) o += c;
        continue;
      }
      char e = peek();
      ++i_;
      char plain = 0;
      switch (e) {
        case '"': plain = '"'; break;
        case '\\': plain = '\\'; break;
        case '/': plain = '/'; break;
        case 'b': plain = '\b'; break;
        case 'f': plain = '\f'; break;
        case 'n': plain = '\n'; break;
        case 'r': plain = '\r'; break;
        case 't': plain = '\t'; break;
        case 'u': {
          uint32_t cp = hex4();
          // A surrogate pair is one code point; a lone surrogate is kept as it is.
          if (cp >= 0xD800 && cp < 0xDC00 && s_.substr(i_, 2) == "\\u") {
            size_t back = i_;
            i_ += 2;
            uint32_t lo = hex4();
            if (lo >= 0xDC00 && lo < 0xE000) cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
            else i_ = back;
          }
          if (out) put_utf8(o, cp);
          continue;
        }
        default: fail("bad escape");
      }
      if (out) o += plain;
    }
  }

  std::string_view s_;
  const std::string& file_;
  size_t i_ = 0;
};

// ---- checks ---------------------------------------------------------------------------------

// Largest header a file may declare, as in the reference implementation: a corrupt length
// is refused before anything of that size is allocated.
constexpr uint64_t kMaxHeaderBytes = 100'000'000;

// The header length against the file's size (when known: a device or pipe has none) and
// the limit.
void check_header_length(uint64_t n, std::optional<uint64_t> size, const std::string& path) {
  if (size && (*size < 8 || n > *size - 8))
    load_fail(path, "header length " + std::to_string(n) + " exceeds the file (" +
                        std::to_string(*size) + " bytes): file truncated or corrupt");
  if (n > kMaxHeaderBytes)
    load_fail(path, "header length " + std::to_string(n) + " exceeds the limit of " +
                        std::to_string(kMaxHeaderBytes) + " bytes: file corrupt");
}

// Parses the header and checks every entry on its own and against the others: shape,
// offsets within the data section (of data_len bytes, when known) and matching the shape,
// no two names alike, no two entries overlapping.
std::vector<Entry> parse_header(std::string_view header, std::optional<uint64_t> data_len,
                                const std::string& path) {
  std::vector<Entry> entries = HeaderParser(header, path).parse();
  for (const Entry& e : entries) {
    const std::string where = "entry '" + e.name + "': ";
    uint64_t numel = 1;
    for (int64_t d : e.shape) {
      if (d != 0 && numel > (uint64_t(1) << 59) / uint64_t(d))
        load_fail(path, where + "shape is too large");
      numel *= uint64_t(d);
    }
    // Appended, not "[" + ...: GCC 12 warns falsely (-Wrestrict) about the latter.
    std::string offsets = std::string(1, '[');
    offsets += std::to_string(e.begin) + ", " + std::to_string(e.end) + "]";
    if (e.begin < 0 || e.end < e.begin) load_fail(path, where + "bad data_offsets " + offsets);
    if (data_len && uint64_t(e.end) > *data_len)
      load_fail(path, where + "data_offsets " + offsets + " out of range: the data section has " +
                          std::to_string(*data_len) + " bytes (file truncated?)");
    // numel <= 2^59 and an element is at most 8 bytes: the product fits.
    const uint64_t need = numel * size_of(e.dtype);
    if (uint64_t(e.end - e.begin) != need)
      load_fail(path, where + "data_offsets span " + std::to_string(e.end - e.begin) +
                          " bytes but shape " + Shape(e.shape).str() + " of " + st_name(e.dtype) +
                          " needs " + std::to_string(need));
  }

  std::vector<const Entry*> sorted;
  sorted.reserve(entries.size());
  for (const Entry& e : entries) sorted.push_back(&e);
  std::sort(sorted.begin(), sorted.end(),
            [](const Entry* a, const Entry* b) { return a->name < b->name; });
  for (size_t i = 1; i < sorted.size(); ++i)
    if (sorted[i]->name == sorted[i - 1]->name)
      load_fail(path, "bad JSON header: duplicate key \"" + sorted[i]->name + "\"");

  // By (begin, end): an empty entry at the offset where the next one starts sorts first
  // and overlaps nothing.
  std::sort(sorted.begin(), sorted.end(), [](const Entry* a, const Entry* b) {
    return a->begin != b->begin ? a->begin < b->begin : a->end < b->end;
  });
  const Entry* last = nullptr;  // the entry reaching furthest so far
  for (const Entry* e : sorted) {
    if (e->begin == e->end) continue;
    if (last && e->begin < last->end)
      load_fail(path,
                "entries '" + last->name + "' and '" + e->name + "' overlap in the data section");
    if (!last || e->end > last->end) last = e;
  }
  return entries;
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
    dispatch_dtype(e.dtype, [&](auto zero) {
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
    dispatch_dtype(t.dtype(), [&](auto zero) {
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
