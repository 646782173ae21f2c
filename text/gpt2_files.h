// Readers of GPT-2's vocabulary files: encoder.json (a JSON object of token -> id, parsed
// with nlohmann::json, a Debian package the build requires: these are checksummed files
// from scripts/fetch_text_data.sh, not untrusted input whose limits need a parser of our
// own) and vocab.bpe (a "#version" line, then one merge "left right" per line).
// Not done here: other tokenizers' formats (tokenizer.json, tiktoken files).
#pragma once

#include <string>
#include <string_view>

#include "text/bpe.h"

namespace tide::text {

// The entries of encoder.json's text. `name` stands for the file in messages. Throws
// "[bpe] <name>: ..." for text that is not JSON, not an object, or an id that is not an
// integer in [0, 2^31).
BpeVocabulary parse_gpt2_encoder(std::string_view json, const std::string& name);
// The merges of vocab.bpe's text, in order: an optional first line starting with
// "#version", then lines of two symbols separated by one space; the last line may be
// empty (the final newline). Throws "[bpe] <name>: line N: ..." for any other line.
BpeMerges parse_gpt2_merges(std::string_view text, const std::string& name);

// The same from files; also throws "[bpe] <path>: ..." for a missing or unreadable file.
BpeVocabulary read_gpt2_encoder(const std::string& path);
BpeMerges read_gpt2_merges(const std::string& path);

}  // namespace tide::text
