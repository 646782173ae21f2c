#include "nn/serialize.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <fstream>
#include <limits>
#include <map>
#include <sstream>

#include "core/error.h"
#include "ops/ops.h"

namespace tide::nn {

namespace {

// ---- a minimal JSON reader: objects, arrays, strings, integers, true/false/null -----------

struct Json {
  enum Kind { null, boolean, integer, string, array, object } kind = null;
  bool b = false;
  int64_t num = 0;
  std::string str;
  std::vector<Json> arr;
  std::vector<std::pair<std::string, Json>> obj;
};

class JsonParser {
 public:
  JsonParser(const std::string& text, const std::string& file) : s_(text), file_(file) {}

  Json parse_document() {
    Json v = value(0);
    ws();
    if (i_ != s_.size()) fail("unexpected trailing characters");
    return v;
  }

 private:
  static constexpr int kMaxDepth = 64;

  [[noreturn]] void fail(const std::string& what) const {
    throw Error("load", file_ + ": bad JSON header at byte " + std::to_string(i_) + ": " + what);
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
  void literal(const char* word) {
    size_t n = std::strlen(word);
    if (s_.compare(i_, n, word) != 0) fail("invalid literal");
    i_ += n;
  }

  Json value(int depth) {
    if (depth > kMaxDepth) fail("nesting deeper than 64");
    ws();
    Json v;
    char c = peek();
    if (c == '{') {
      v.kind = Json::object;
      ++i_;
      ws();
      if (peek() == '}') { ++i_; return v; }
      for (;;) {
        ws();
        if (peek() != '"') fail("expected a string key");
        std::string key = string_body();
        for (const auto& [k, x] : v.obj)
          if (k == key) fail("duplicate key \"" + key + "\"");
        ws();
        expect(':');
        v.obj.emplace_back(std::move(key), value(depth + 1));
        ws();
        if (peek() == ',') { ++i_; continue; }
        expect('}');
        return v;
      }
    }
    if (c == '[') {
      v.kind = Json::array;
      ++i_;
      ws();
      if (peek() == ']') { ++i_; return v; }
      for (;;) {
        v.arr.push_back(value(depth + 1));
        ws();
        if (peek() == ',') { ++i_; continue; }
        expect(']');
        return v;
      }
    }
    if (c == '"') {
      v.kind = Json::string;
      v.str = string_body();
      return v;
    }
    if (c == 't') { literal("true"); v.kind = Json::boolean; v.b = true; return v; }
    if (c == 'f') { literal("false"); v.kind = Json::boolean; return v; }
    if (c == 'n') { literal("null"); return v; }
    if (c == '-' || (c >= '0' && c <= '9')) {
      v.kind = Json::integer;
      v.num = integer();
      return v;
    }
    fail(std::string("unexpected character '") + c + "'");
  }

  int64_t integer() {
    bool neg = false;
    if (peek() == '-') { neg = true; ++i_; }
    if (i_ >= s_.size() || !(s_[i_] >= '0' && s_[i_] <= '9')) fail("expected a digit");
    uint64_t n = 0;
    const uint64_t limit = uint64_t(std::numeric_limits<int64_t>::max());
    while (i_ < s_.size() && s_[i_] >= '0' && s_[i_] <= '9') {
      uint64_t d = uint64_t(s_[i_] - '0');
      if (n > (limit - d) / 10) fail("integer out of range");
      n = n * 10 + d;
      ++i_;
    }
    if (i_ < s_.size() && (s_[i_] == '.' || s_[i_] == 'e' || s_[i_] == 'E'))
      fail("non-integer numbers are not supported");
    return neg ? -int64_t(n) : int64_t(n);
  }

  static void put_utf8(std::string& out, uint32_t cp) {
    if (cp < 0x80) {
      out += char(cp);
    } else if (cp < 0x800) {
      out += char(0xC0 | (cp >> 6));
      out += char(0x80 | (cp & 0x3F));
    } else {
      out += char(0xE0 | (cp >> 12));
      out += char(0x80 | ((cp >> 6) & 0x3F));
      out += char(0x80 | (cp & 0x3F));
    }
  }

  std::string string_body() {
    expect('"');
    std::string out;
    for (;;) {
      char c = peek();
      ++i_;
      if (c == '"') return out;
      if (static_cast<unsigned char>(c) < 0x20) fail("control character in string");
      if (c != '\\') { out += c; continue; }
      char e = peek();
      ++i_;
      switch (e) {
        case '"': out += '"'; break;
        case '\\': out += '\\'; break;
        case '/': out += '/'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'n': out += '\n'; break;
        case 'r': out += '\r'; break;
        case 't': out += '\t'; break;
        case 'u': {
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
          put_utf8(out, cp);
          break;
        }
        default: fail("bad escape");
      }
    }
  }

  const std::string& s_;
  const std::string& file_;
  size_t i_ = 0;
};

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

[[noreturn]] void load_fail(const std::string& path, const std::string& what) {
  throw Error("load", path + ": " + what);
}

}  // namespace

// ---- save -----------------------------------------------------------------------------------

void save(const Module& module, const std::string& path) {
  std::string data;
  std::ostringstream hdr;
  hdr << '{';
  bool first = true;
  for (const auto& [name, t] : module.named_parameters()) {
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

  std::ifstream f(path, std::ios::binary);
  if (!f.good()) load_fail(path, "cannot open file");
  std::string bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  if (f.bad()) load_fail(path, "read error");
  const uint64_t size = bytes.size();
  if (size < 8)
    load_fail(path, "file truncated: " + std::to_string(size) + " bytes, shorter than the 8-byte header length");
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= uint64_t(static_cast<unsigned char>(bytes[size_t(i)])) << (8 * i);
  if (n > size - 8)
    load_fail(path, "header length " + std::to_string(n) + " exceeds the file (" + std::to_string(size) +
         " bytes): file truncated or corrupt");
  const std::string header = bytes.substr(8, size_t(n));
  const uint64_t data_begin = 8 + n, data_len = size - data_begin;

  Json doc = JsonParser(header, path).parse_document();
  if (doc.kind != Json::object) load_fail(path, "header is not a JSON object");

  std::vector<Entry> entries;
  for (const auto& [name, v] : doc.obj) {
    if (name == "__metadata__") {
      if (v.kind != Json::object) load_fail(path, "__metadata__ is not an object");
      continue;
    }
    const std::string where = "entry '" + name + "': ";
    if (v.kind != Json::object) load_fail(path, where + "not an object");
    const Json *dt = nullptr, *sh = nullptr, *off = nullptr;
    for (const auto& [k, x] : v.obj) {
      if (k == "dtype") dt = &x;
      else if (k == "shape") sh = &x;
      else if (k == "data_offsets") off = &x;
    }
    if (!dt || !sh || !off) load_fail(path, where + "needs dtype, shape and data_offsets");
    Entry e;
    e.name = name;
    if (dt->kind != Json::string) load_fail(path, where + "dtype is not a string");
    if (!st_dtype(dt->str, e.dtype))
      load_fail(path, where + "unsupported dtype '" + dt->str + "' (tide reads F32, F64, I32, I64)");
    if (sh->kind != Json::array) load_fail(path, where + "shape is not an array");
    if (sh->arr.size() > size_t(kMaxDims)) load_fail(path, where + "shape has more than 8 dims");
    uint64_t numel = 1;
    for (const Json& d : sh->arr) {
      if (d.kind != Json::integer || d.num < 0) load_fail(path, where + "shape extents must be integers >= 0");
      e.shape.push_back(d.num);
      if (d.num != 0 && numel > (uint64_t(1) << 59) / uint64_t(d.num))
        load_fail(path, where + "shape is too large");
      numel *= uint64_t(d.num);
    }
    if (off->kind != Json::array || off->arr.size() != 2 || off->arr[0].kind != Json::integer ||
        off->arr[1].kind != Json::integer)
      load_fail(path, where + "data_offsets must be [begin, end]");
    e.begin = off->arr[0].num;
    e.end = off->arr[1].num;
    if (e.begin < 0 || e.end < e.begin)
      load_fail(path, where + "bad data_offsets [" + std::to_string(e.begin) + ", " + std::to_string(e.end) + "]");
    if (uint64_t(e.end) > data_len)
      load_fail(path, where + "data_offsets [" + std::to_string(e.begin) + ", " + std::to_string(e.end) +
           "] out of range: the data section has " + std::to_string(data_len) +
           " bytes (file truncated?)");
    if (uint64_t(e.end - e.begin) != numel * size_of(e.dtype))
      load_fail(path, where + "data_offsets span " + std::to_string(e.end - e.begin) + " bytes but shape " +
           Shape(e.shape).str() + " of " + st_name(e.dtype) + " needs " +
           std::to_string(numel * size_of(e.dtype)));
    entries.push_back(std::move(e));
  }

  std::vector<const Entry*> by_offset;
  for (const Entry& e : entries) by_offset.push_back(&e);
  std::sort(by_offset.begin(), by_offset.end(),
            [](const Entry* a, const Entry* b) { return a->begin < b->begin; });
  for (size_t i = 1; i < by_offset.size(); ++i)
    if (by_offset[i]->begin < by_offset[i - 1]->end)
      load_fail(path, "entries '" + by_offset[i - 1]->name + "' and '" + by_offset[i]->name +
           "' overlap in the data section");

  // Names, shapes, dtypes against the module.
  auto params = module.named_parameters();
  std::map<std::string, const Entry*> by_name;
  for (const Entry& e : entries) by_name[e.name] = &e;
  std::string missing, unexpected;
  for (const auto& [name, t] : params)
    if (!by_name.count(name)) missing += (missing.empty() ? "'" : ", '") + name + "'";
  for (const Entry& e : entries) {
    bool found = false;
    for (const auto& [name, t] : params) found = found || name == e.name;
    if (!found) unexpected += (unexpected.empty() ? "'" : ", '") + e.name + "'";
  }
  if (!missing.empty() || !unexpected.empty()) {
    std::string msg = "parameter names do not match the module:";
    if (!missing.empty()) msg += " missing from the file: " + missing + ";";
    if (!unexpected.empty()) msg += " not in the module: " + unexpected + ";";
    load_fail(path, msg);
  }
  for (const auto& [name, t] : params) {
    const Entry& e = *by_name[name];
    if (e.dtype != t.dtype())
      load_fail(path, "'" + name + "' has dtype " + st_name(e.dtype) + " in the file but " +
           std::string(tide::name(t.dtype())) + " in the module");
    if (!(Shape(e.shape) == t.shape()))
      load_fail(path, "'" + name + "' has shape " + Shape(e.shape).str() + " in the file but " +
           t.shape().str() + " in the module");
  }

  // All checked: copy in place.
  NoGrad ng;
  for (auto& [name, t] : params) {
    const Entry& e = *by_name[name];
    char* src = bytes.data() + data_begin + e.begin;
    const size_t nb = size_t(e.end - e.begin);
    swap_to_le(src, nb, size_of(e.dtype));
    dispatch_dtype(e.dtype, [&](auto zero) {
      using T = decltype(zero);
      std::vector<T> v(nb / sizeof(T));
      if (nb) std::memcpy(v.data(), src, nb);
      t.copy_(from_vector<T>(v, t.shape(), t.device()));  // on the parameter's device
    });
  }
}

}  // namespace tide::nn
