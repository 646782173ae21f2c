// GPT-2's byte-level BPE (see bpe.h). Merging works on ids: every merge's parts and result
// are tokens, so a piece starts as the ids of its bytes and each merge replaces two ids by
// one. The reference's rounds (the lowest rank among the current pairs, all its occurrences
// left to right, then the next round) run over a heap of candidate pairs ordered by (rank,
// position): O(n log n) for a piece of n bytes where the reference loop is O(n^2), which
// matters for long runs of letters or spaces in arbitrary files.
#include "text/bpe.h"

#include <algorithm>
#include <cstdio>
#include <queue>

#include "core/error.h"
#include "text/gpt2_files.h"
#include "text/pretokenize.h"

namespace tide::text {

namespace {

constexpr const char* kOp = "bpe";

// Code point of byte b's symbol, and the inverse (-1 where no byte).
struct ByteAlphabet {
  std::array<char32_t, 256> cp{};
  std::array<int16_t, 0x144> byte{};
  ByteAlphabet() {
    byte.fill(-1);
    char32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
      cp[b] = printable ? char32_t(b) : next++;
      byte[cp[b]] = int16_t(b);
    }
  }
};
const ByteAlphabet& alphabet() {
  static const ByteAlphabet a;
  return a;
}

std::string utf8(char32_t cp) {  // cp < 0x800 here
  std::string s;
  if (cp < 0x80) {
    s.push_back(char(cp));
  } else {
    s.push_back(char(0xC0 | (cp >> 6)));
    s.push_back(char(0x80 | (cp & 0x3F)));
  }
  return s;
}

// The bytes a token in the byte alphabet stands for; nullopt when a character is not in it.
std::optional<std::string> token_to_bytes(std::string_view token) {
  std::string out;
  for (size_t i = 0; i < token.size();) {
    const auto b0 = static_cast<unsigned char>(token[i]);
    char32_t cp;
    if (b0 < 0x80) {
      cp = b0, i += 1;
    } else if ((b0 & 0xE0) == 0xC0 && i + 1 < token.size() &&
               (static_cast<unsigned char>(token[i + 1]) & 0xC0) == 0x80) {
      cp = char32_t(b0 & 0x1F) << 6 | (static_cast<unsigned char>(token[i + 1]) & 0x3F);
      i += 2;
    } else {
      return std::nullopt;
    }
    if (cp >= alphabet().byte.size() || alphabet().byte[cp] < 0) return std::nullopt;
    out.push_back(char(alphabet().byte[cp]));
  }
  return out;
}

// s in quotes, cut to 60 bytes.
std::string quoted(std::string_view s) {
  std::string q(1, '"');
  q.append(s.substr(0, s.size() <= 60 ? s.size() : 57));
  q.append(s.size() <= 60 ? "\"" : "...\"");
  return q;
}

uint64_t pair_key(int32_t left, int32_t right) {
  return uint64_t(uint32_t(left)) << 32 | uint32_t(right);
}

}  // namespace

std::string gpt2_byte_symbol(uint8_t b) { return utf8(alphabet().cp[b]); }

BpeTokenizer::BpeTokenizer(const BpeVocabulary& vocabulary, const BpeMerges& merges) {
  id_of_.reserve(vocabulary.size());
  for (const auto& [token, id] : vocabulary) {
    TIDE_CHECK(!token.empty(), kOp, "the vocabulary has an empty token (id ", id, ")");
    TIDE_CHECK(id >= 0, kOp, "token ", quoted(token), " has the negative id ", id);
    std::optional<std::string> bytes = token_to_bytes(token);
    TIDE_CHECK(bytes.has_value(), kOp, "token ", quoted(token), " (id ", id,
               ") has a character outside GPT-2's byte alphabet");
    if (size_t(id) >= bytes_of_.size()) bytes_of_.resize(size_t(id) + 1);
    TIDE_CHECK(bytes_of_[size_t(id)].empty(), kOp, "id ", id, " is given to two tokens");
    bytes_of_[size_t(id)] = std::move(*bytes);
    TIDE_CHECK(id_of_.emplace(token, id).second, kOp, "token ", quoted(token), " is listed twice");
  }
  for (int b = 0; b < 256; ++b) {
    auto it = id_of_.find(gpt2_byte_symbol(uint8_t(b)));
    TIDE_CHECK(it != id_of_.end(), kOp, "the vocabulary lacks the token of byte ", b, " (",
               quoted(gpt2_byte_symbol(uint8_t(b))), "), so some texts could not be encoded");
    byte_id_[size_t(b)] = it->second;
  }
  merges_.reserve(merges.size());
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const std::string& left = merges[rank].first;    // not a structured binding: the lambda
    const std::string& right = merges[rank].second;  // below captures them (Clang 14)
    auto id = [&](const std::string& t) {
      auto it = id_of_.find(t);
      TIDE_CHECK(it != id_of_.end(), kOp, "merge ", rank, " (", quoted(left), " ", quoted(right),
                 "): ", quoted(t), " is not in the vocabulary");
      return it->second;
    };
    const int32_t l = id(left), r = id(right), result = id(left + right);
    auto [it, fresh] = merges_.emplace(pair_key(l, r), Merge{int32_t(rank), result});
    TIDE_CHECK(fresh, kOp, "merge ", rank, " (", quoted(left), " ", quoted(right),
               ") repeats merge ", it->second.rank);
  }
}

BpeTokenizer BpeTokenizer::from_files(const std::string& encoder_json,
                                      const std::string& vocab_bpe) {
  BpeVocabulary vocabulary = read_gpt2_encoder(encoder_json);  // first: its errors first
  return BpeTokenizer(vocabulary, read_gpt2_merges(vocab_bpe));
}

BpeTokenizer BpeTokenizer::from_dir(const std::string& dir) {
  return from_files(dir + "/encoder.json", dir + "/vocab.bpe");
}

std::optional<int32_t> BpeTokenizer::token_id(std::string_view token) const {
  auto it = id_of_.find(std::string(token));
  if (it == id_of_.end()) return std::nullopt;
  return it->second;
}

std::vector<int32_t> BpeTokenizer::merge_piece(std::string_view piece) const {
  const int32_t n = int32_t(piece.size());
  struct Symbol {
    int32_t id;  // -1 once merged into its left neighbour
    int32_t prev, next;
  };
  std::vector<Symbol> sym(static_cast<size_t>(n));
  for (int32_t i = 0; i < n; ++i)
    sym[size_t(i)] = {byte_id_[static_cast<unsigned char>(piece[size_t(i)])], i - 1,
                      i + 1 < n ? i + 1 : -1};

  // A candidate: the pair at `pos` and its successor, valid while both still hold these ids.
  struct Candidate {
    int32_t rank, pos, left, right;
    bool operator>(const Candidate& o) const {
      return rank != o.rank ? rank > o.rank : pos > o.pos;
    }
  };
  std::vector<Candidate> heap;
  bool heaped = false;  // false while the first candidates are collected for make_heap
  auto candidate = [&](int32_t pos) {
    const int32_t next = sym[size_t(pos)].next;
    if (next < 0) return;
    const int32_t l = sym[size_t(pos)].id, r = sym[size_t(next)].id;
    auto it = merges_.find(pair_key(l, r));
    if (it == merges_.end()) return;
    heap.push_back({it->second.rank, pos, l, r});
    if (heaped) std::push_heap(heap.begin(), heap.end(), std::greater<>());
  };
  for (int32_t i = 0; i + 1 < n; ++i) candidate(i);
  std::make_heap(heap.begin(), heap.end(), std::greater<>());
  heaped = true;

  std::vector<int32_t> merged;  // positions whose symbol changed in this round
  while (!heap.empty()) {
    // One round: every occurrence of the lowest-ranked pair, left to right (the heap's
    // order within a rank). The pairs it makes wait for the next round, as in the
    // reference: a pair made with the new token may rank lower than the current one when
    // an earlier merge also made that token.
    const int32_t round = heap.front().rank;
    merged.clear();
    while (!heap.empty() && heap.front().rank == round) {
      std::pop_heap(heap.begin(), heap.end(), std::greater<>());
      const Candidate c = heap.back();
      heap.pop_back();
      Symbol& s = sym[size_t(c.pos)];
      if (s.id != c.left || s.next < 0 || sym[size_t(s.next)].id != c.right) continue;  // stale
      Symbol& t = sym[size_t(s.next)];
      s.id = merges_.find(pair_key(c.left, c.right))->second.result;
      t.id = -1;
      s.next = t.next;
      if (s.next >= 0) sym[size_t(s.next)].prev = c.pos;
      merged.push_back(c.pos);
    }
    for (int32_t pos : merged) {
      if (sym[size_t(pos)].prev >= 0) candidate(sym[size_t(pos)].prev);
      candidate(pos);
    }
  }
  std::vector<int32_t> ids;
  for (int32_t i = n > 0 ? 0 : -1; i >= 0; i = sym[size_t(i)].next)
    ids.push_back(sym[size_t(i)].id);
  return ids;
}

void BpeTokenizer::append_piece(std::string_view piece, std::vector<int32_t>& out) const {
  if (piece.size() == 1) {
    out.push_back(byte_id_[static_cast<unsigned char>(piece[0])]);
    return;
  }
  const bool cacheable = piece.size() <= kCacheMaxPiece;
  if (cacheable) {
    std::lock_guard<std::mutex> lock(cache_->mutex);
    auto it = cache_->pieces.find(std::string(piece));
    if (it != cache_->pieces.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  std::vector<int32_t> ids = merge_piece(piece);
  out.insert(out.end(), ids.begin(), ids.end());
  if (cacheable) {
    std::lock_guard<std::mutex> lock(cache_->mutex);
    if (cache_->pieces.size() >= kCacheEntries) cache_->pieces.clear();
    cache_->pieces.emplace(std::string(piece), std::move(ids));
  }
}

std::vector<int32_t> BpeTokenizer::encode(std::string_view text) const {
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3);
  for_each_gpt2_piece(text, [&](std::string_view piece) { append_piece(piece, ids); });
  return ids;
}

std::string BpeTokenizer::decode(std::span<const int32_t> ids) const {
  std::string out;
  for (size_t i = 0; i < ids.size(); ++i) {
    const int32_t id = ids[i];
    TIDE_CHECK(id >= 0 && size_t(id) < bytes_of_.size() && !bytes_of_[size_t(id)].empty(), kOp,
               "id ", id, " at index ", i, " names no token (the vocabulary has ", bytes_of_.size(),
               " ids)");
    out += bytes_of_[size_t(id)];
  }
  return out;
}

size_t BpeTokenizer::cache_size() const {
  std::lock_guard<std::mutex> lock(cache_->mutex);
  return cache_->pieces.size();
}

}  // namespace tide::text
