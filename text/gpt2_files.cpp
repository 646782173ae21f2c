// Readers of encoder.json and vocab.bpe (see gpt2_files.h).
#include "text/gpt2_files.h"

#include <cstdint>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "text/read_file.h"

namespace tide::text {

namespace {

constexpr const char* kOp = "bpe";

// At most 80 bytes of `s` for a message.
std::string excerpt(std::string_view s) {
  return s.size() <= 80 ? std::string(s) : std::string(s.substr(0, 77)) + "...";
}

}  // namespace

BpeVocabulary parse_gpt2_encoder(std::string_view json, const std::string& name) {
  nlohmann::json doc;
  try {
    doc = nlohmann::json::parse(json.begin(), json.end());
  } catch (const nlohmann::json::exception& e) {
    throw Error(kOp, name + ": not JSON: " + e.what());
  }
  TIDE_CHECK(doc.is_object(), kOp, name,
             ": expected a JSON object of token -> id, not a value of type ", doc.type_name());
  BpeVocabulary vocab;
  vocab.reserve(doc.size());
  for (const auto& [token, value] : doc.items()) {
    bool ok = false;
    int64_t id = -1;
    if (value.is_number_unsigned()) {
      const uint64_t u = value.get<uint64_t>();
      ok = u <= uint64_t(INT32_MAX);
      id = ok ? int64_t(u) : -1;
    }
    TIDE_CHECK(ok, kOp, name, ": the id of \"", excerpt(token),
               "\" is not an integer in [0, 2^31): ", excerpt(value.dump()));
    vocab.emplace_back(token, int32_t(id));
  }
  return vocab;
}

BpeMerges parse_gpt2_merges(std::string_view text, const std::string& name) {
  BpeMerges merges;
  size_t line_no = 0;
  for (size_t pos = 0; pos < text.size();) {
    size_t nl = text.find('\n', pos);
    const bool last = nl == std::string_view::npos;
    if (last) nl = text.size();
    const std::string_view line = text.substr(pos, nl - pos);
    pos = nl + 1;
    ++line_no;
    if (line_no == 1 && line.starts_with("#version")) continue;
    const size_t sp = line.find(' ');
    TIDE_CHECK(sp != std::string_view::npos && sp > 0 && sp + 1 < line.size() &&
                   line.find(' ', sp + 1) == std::string_view::npos,
               kOp, name, ": line ", line_no,
               ": expected two symbols separated by one space, got \"", excerpt(line), "\"");
    merges.emplace_back(std::string(line.substr(0, sp)), std::string(line.substr(sp + 1)));
  }
  return merges;
}

BpeVocabulary read_gpt2_encoder(const std::string& path) {
  return parse_gpt2_encoder(read_file(path, kOp), path);
}

BpeMerges read_gpt2_merges(const std::string& path) {
  return parse_gpt2_merges(read_file(path, kOp), path);
}

}  // namespace tide::text
