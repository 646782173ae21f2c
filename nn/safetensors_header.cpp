// The safetensors header reader (see safetensors_header.h).
#include "nn/safetensors_header.h"

#include <algorithm>
#include <limits>
#include <utility>

#include "core/error.h"
#include "core/shape.h"

namespace tide::nn::safetensors {

void load_fail(const std::string& path, const std::string& what) {
  throw Error("load", path + ": " + what);
}

const char* st_name(DType t) {
  switch (t) {
    case DType::float32: return "F32";
    case DType::float64: return "F64";
    case DType::int32: return "I32";
    case DType::int64: return "I64";
    case DType::bfloat16: return "BF16";
    case DType::float16: return "F16";
  }
  return "?";
}

bool st_dtype(const std::string& s, DType& out) {
  for (DType t : {DType::float32, DType::float64, DType::int32, DType::int64, DType::bfloat16,
                  DType::float16})
    if (s == st_name(t)) {
      out = t;
      return true;
    }
  return false;
}

namespace {

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
          load_fail(file_, where + "unsupported dtype '" + s +
                               "' (tide reads F32, F64, I32, I64, BF16, F16)");
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

}  // namespace

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

}  // namespace tide::nn::safetensors
