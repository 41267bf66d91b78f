// sampan::BertTokenizer(text, vocab[, text_pair]) -> (input_ids, attention_mask, token_type_ids):
// Hugging Face's BERT tokenizer as an op, so a served BERT model takes text (#18). It reproduces
// the `tokenizers` package (0.23) running a BERT tokenizer.json: the special tokens cut out of the
// raw text, BertNormalizer, BertPreTokenizer, WordPiece, the [CLS] A [SEP] (B [SEP]) template,
// 'longest_first' truncation and right padding.
//   text:      string [N], [N, 1] or a scalar (one row); UTF-8, invalid UTF-8 is an error naming the row
//   vocab:     string [V], token i has id i (vocab.txt's lines; an initializer in practice)
//   text_pair: optional string, as many rows as text: segment B of sentence pairs (token type 1)
//   input_ids, attention_mask, token_type_ids: int64 [N, L]; L = the longest row (padding
//              "longest") or max_length (padding "max_length"); padding is pad_token's id, mask 0,
//              type 0
// Attributes: do_lower_case (1), strip_accents (-1: as do_lower_case), tokenize_chinese_chars (1),
// max_length (512, special tokens included), padding ("longest"), max_input_chars_per_word (100),
// unk_token, cls_token, sep_token, pad_token ("[UNK]", "[CLS]", "[SEP]", "[PAD]": each must be in
// the vocabulary), mask_token ("[MASK]"; "" or a token not in the vocabulary: none).
// A special token that occurs in the raw text is that token, as Hugging Face's added tokens are.
// The vocab's index (two hash tables: ~1 ms to build for 30k tokens) is built once per constant
// vocab and kept (VocabCache); a vocab fed as a graph input is indexed on every call.
//
// Unicode comes from utf8proc (Debian's libutf8proc, Unicode 15): general categories, canonical
// decompositions with their combining classes, and lower-case mappings are exactly what this op
// needs, in a 300 kB C library with a stable API; ICU would bring 30 MB of data and symbols
// versioned per release for the same three lookups. Where utf8proc's tables and those `tokenizers`
// uses differ (its categories predate Unicode 10, its lower-casing is Rust's, Unicode 16), the
// tables below give tokenizers' answer: tests/models/test_tokenizer.py compares every code point.
#include <utf8proc.h>

#include <algorithm>
#include <array>
#include <initializer_list>
#include <limits>
#include <list>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include "base/utf8.h"
#include "ops/common.h"

namespace sampan::ops {
namespace {

// ---------------------------------------------------------------- character classes

struct Range {
  char32_t lo, hi;
};

bool InRanges(std::span<const Range> ranges, char32_t c) {
  auto it = std::upper_bound(ranges.begin(), ranges.end(), c, [](char32_t v, const Range& r) { return v < r.lo; });
  return it != ranges.begin() && c <= std::prev(it)->hi;
}

// Format characters (Cf in Unicode 15) that tokenizers' tables do not have: kept, not removed.
constexpr Range kNotOther[] = {{0x890, 0x891}, {0x8E2, 0x8E2}, {0x110CD, 0x110CD}, {0x13430, 0x1343F}};
// Punctuation (P*) tokenizers has that Unicode 15 does not (now So and Mn), and P* of Unicode 15
// that tokenizers does not split on.
constexpr Range kPunct[] = {{0x166D, 0x166D}, {0x111C9, 0x111C9}};
constexpr Range kNotPunct[] = {{0x61D, 0x61D},     {0x9FD, 0x9FD},     {0xA76, 0xA76},     {0xC77, 0xC77},
                               {0xC84, 0xC84},     {0x1B7D, 0x1B7E},   {0x2E43, 0x2E4F},   {0x2E52, 0x2E5D},
                               {0x10EAD, 0x10EAD}, {0x10F55, 0x10F59}, {0x10F86, 0x10F89}, {0x1144B, 0x1144F},
                               {0x1145A, 0x1145B}, {0x1145D, 0x1145D}, {0x11660, 0x1166C}, {0x116B9, 0x116B9},
                               {0x1183B, 0x1183B}, {0x11944, 0x11946}, {0x119E2, 0x119E2}, {0x11A3F, 0x11A46},
                               {0x11A9A, 0x11A9C}, {0x11A9E, 0x11AA2}, {0x11B00, 0x11B09}, {0x11C41, 0x11C45},
                               {0x11C70, 0x11C71}, {0x11EF7, 0x11EF8}, {0x11F43, 0x11F4F}, {0x11FFF, 0x11FFF},
                               {0x12FF1, 0x12FF2}, {0x16E97, 0x16E9A}, {0x16FE2, 0x16FE2}, {0x1E95E, 0x1E95F}};
// Non-spacing marks (the accents stripped): tokenizers' Mn has U+1734 (Mc since Unicode 14) and
// lacks these Mn of Unicode 15.
constexpr Range kMn[] = {{0x1734, 0x1734}};
constexpr Range kNotMn[] = {
    {0x7FD, 0x7FD},     {0x898, 0x89F},     {0x8CA, 0x8E1},     {0x9FE, 0x9FE},     {0xAFA, 0xAFF},
    {0xB55, 0xB55},     {0xC04, 0xC04},     {0xC3C, 0xC3C},     {0xD00, 0xD00},     {0xD3B, 0xD3C},
    {0xD81, 0xD81},     {0xEBA, 0xEBA},     {0xECE, 0xECE},     {0x180F, 0x180F},   {0x1885, 0x1886},
    {0x1ABF, 0x1ACE},   {0x1DF6, 0x1DFB},   {0xA82C, 0xA82C},   {0xA8C5, 0xA8C5},   {0xA8FF, 0xA8FF},
    {0xA9BD, 0xA9BD},   {0x10D24, 0x10D27}, {0x10EAB, 0x10EAC}, {0x10EFD, 0x10EFF}, {0x10F46, 0x10F50},
    {0x10F82, 0x10F85}, {0x11070, 0x11070}, {0x11073, 0x11074}, {0x110C2, 0x110C2}, {0x111C9, 0x111C9},
    {0x111CF, 0x111CF}, {0x1123E, 0x1123E}, {0x11241, 0x11241}, {0x1133B, 0x1133B}, {0x11438, 0x1143F},
    {0x11442, 0x11444}, {0x11446, 0x11446}, {0x1145E, 0x1145E}, {0x1182F, 0x11837}, {0x11839, 0x1183A},
    {0x1193B, 0x1193C}, {0x1193E, 0x1193E}, {0x11943, 0x11943}, {0x119D4, 0x119D7}, {0x119DA, 0x119DB},
    {0x119E0, 0x119E0}, {0x11A01, 0x11A0A}, {0x11A33, 0x11A38}, {0x11A3B, 0x11A3E}, {0x11A47, 0x11A47},
    {0x11A51, 0x11A56}, {0x11A59, 0x11A5B}, {0x11A8A, 0x11A96}, {0x11A98, 0x11A99}, {0x11C30, 0x11C36},
    {0x11C38, 0x11C3D}, {0x11C3F, 0x11C3F}, {0x11C92, 0x11CA7}, {0x11CAA, 0x11CB0}, {0x11CB2, 0x11CB3},
    {0x11CB5, 0x11CB6}, {0x11D31, 0x11D36}, {0x11D3A, 0x11D3A}, {0x11D3C, 0x11D3D}, {0x11D3F, 0x11D45},
    {0x11D47, 0x11D47}, {0x11D90, 0x11D91}, {0x11D95, 0x11D95}, {0x11D97, 0x11D97}, {0x11EF3, 0x11EF4},
    {0x11F00, 0x11F01}, {0x11F36, 0x11F3A}, {0x11F40, 0x11F40}, {0x11F42, 0x11F42}, {0x13440, 0x13440},
    {0x13447, 0x13455}, {0x16F4F, 0x16F4F}, {0x16FE4, 0x16FE4}, {0x1CF00, 0x1CF2D}, {0x1CF30, 0x1CF46},
    {0x1E000, 0x1E006}, {0x1E008, 0x1E018}, {0x1E01B, 0x1E021}, {0x1E023, 0x1E024}, {0x1E026, 0x1E02A},
    {0x1E08F, 0x1E08F}, {0x1E130, 0x1E136}, {0x1E2AE, 0x1E2AE}, {0x1E2EC, 0x1E2EF}, {0x1E4EC, 0x1E4EF},
    {0x1E944, 0x1E94A}};
// Lower-case mappings new in Unicode 16 (Rust's): [lo, hi] maps to lo + delta ... hi + delta.
struct CaseRange {
  char32_t lo, hi;
  int32_t delta;
};
constexpr CaseRange kLower16[] = {{0x1C89, 0x1C89, 1},      {0xA7CB, 0xA7CB, 0x264 - 0xA7CB},
                                  {0xA7CC, 0xA7CC, 1},      {0xA7CE, 0xA7CE, 1},
                                  {0xA7D2, 0xA7D2, 1},      {0xA7D4, 0xA7D4, 1},
                                  {0xA7DA, 0xA7DA, 1},      {0xA7DC, 0xA7DC, 0x19B - 0xA7DC},
                                  {0x10D50, 0x10D65, 0x20}, {0x16EA0, 0x16EB8, 0x1B}};

// The ASCII characters BERT splits off as punctuation (Rust's is_ascii_punctuation).
constexpr bool IsAsciiPunct(char32_t c) {
  return (c >= 0x21 && c <= 0x2F) || (c >= 0x3A && c <= 0x40) || (c >= 0x5B && c <= 0x60) || (c >= 0x7B && c <= 0x7E);
}

bool IsPunct(char32_t c) {
  if (c < 0x80) return IsAsciiPunct(c);
  const auto cat = utf8proc_category(static_cast<utf8proc_int32_t>(c));
  if (cat >= UTF8PROC_CATEGORY_PC && cat <= UTF8PROC_CATEGORY_PO) return !InRanges(kNotPunct, c);
  return InRanges(kPunct, c);
}

// BertNormalizer's clean_text removes these: NUL, U+FFFD and "other" (Cc, Cf, Cs, Co; not Cn).
bool IsRemoved(char32_t c) {
  if (c == 0xFFFD) return true;
  const auto cat = utf8proc_category(static_cast<utf8proc_int32_t>(c));
  return cat >= UTF8PROC_CATEGORY_CC && cat <= UTF8PROC_CATEGORY_CO && !InRanges(kNotOther, c);
}

// Rust's char::is_whitespace beyond ASCII (U+0085 is a control: removed before this is asked).
bool IsWhitespace(char32_t c) {
  return c == 0xA0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F ||
         c == 0x205F || c == 0x3000;
}

// tokenizers' is_chinese_char (it lacks 0x2B820-0x2B91F, which Google's BERT has).
bool IsCjk(char32_t c) {
  return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) || (c >= 0x20000 && c <= 0x2A6DF) ||
         (c >= 0x2A700 && c <= 0x2B81F) || (c >= 0x2B920 && c <= 0x2CEAF) || (c >= 0xF900 && c <= 0xFAFF) ||
         (c >= 0x2F800 && c <= 0x2FA1F);
}

bool IsMn(char32_t c) {
  if (utf8proc_category(static_cast<utf8proc_int32_t>(c)) == UTF8PROC_CATEGORY_MN) return !InRanges(kNotMn, c);
  return InRanges(kMn, c);
}

int CombiningClass(char32_t c) {
  return utf8proc_get_property(static_cast<utf8proc_int32_t>(c))->combining_class;
}

// Rust's char::to_lowercase for a non-ASCII c; U+0130 is the one that becomes two code points.
void AppendLower(char32_t c, std::u32string* out) {
  if (c == 0x130) {
    out->push_back(U'i');
    out->push_back(0x307);
    return;
  }
  for (const CaseRange& r : kLower16)
    if (c >= r.lo && c <= r.hi) {
      out->push_back(static_cast<char32_t>(static_cast<int32_t>(c) + r.delta));
      return;
    }
  out->push_back(static_cast<char32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(c))));
}

// Appends c's canonical decomposition (NFD, not yet reordered). U+11938 has none in tokenizers.
void AppendDecomposed(char32_t c, std::u32string* out) {
  utf8proc_int32_t buf[8];
  int boundclass = 0;
  const utf8proc_ssize_t n =
      c == 0x11938 ? -1
                   : utf8proc_decompose_char(static_cast<utf8proc_int32_t>(c), buf, 8, UTF8PROC_DECOMPOSE, &boundclass);
  if (n <= 0 || n > 8) {
    out->push_back(c);
    return;
  }
  for (utf8proc_ssize_t k = 0; k < n; ++k) out->push_back(static_cast<char32_t>(buf[k]));
}

// NFD's canonical ordering: each run of combining marks stably sorted by combining class.
void CanonicalOrder(std::u32string& s) {
  for (size_t i = 0; i < s.size();) {
    if (CombiningClass(s[i]) == 0) {
      ++i;
      continue;
    }
    size_t j = i;
    while (j < s.size() && CombiningClass(s[j]) != 0) ++j;
    std::stable_sort(s.begin() + static_cast<std::ptrdiff_t>(i), s.begin() + static_cast<std::ptrdiff_t>(j),
                     [](char32_t a, char32_t b) { return CombiningClass(a) < CombiningClass(b); });
    i = j;
  }
}

// Decodes the code point at s[i] of validated UTF-8 and advances i.
char32_t NextCodePoint(std::string_view s, size_t& i) {
  const auto b = static_cast<unsigned char>(s[i]);
  if (b < 0x80) {
    ++i;
    return b;
  }
  const int n = b >= 0xF0 ? 4 : b >= 0xE0 ? 3 : 2;
  char32_t c = b & (n == 2 ? 0x1F : n == 3 ? 0x0F : 0x07);
  for (int k = 1; k < n; ++k) c = (c << 6) | (static_cast<unsigned char>(s[i + static_cast<size_t>(k)]) & 0x3F);
  i += static_cast<size_t>(n);
  return c;
}

// ---------------------------------------------------------------- vocabulary

// string -> id, open addressing over views into the vocab tensor's strings (one allocation).
class TokenTable {
 public:
  void Reserve(size_t n) {
    size_t cap = 16;
    while (cap < 2 * n) cap *= 2;
    slots_.assign(cap, Slot{});
  }
  //! A key given twice keeps its last id, as a vocab.txt read by tokenizers does.
  void Put(std::string_view key, int64_t id) {
    const uint64_t h = Hash(key);
    size_t i = h & (slots_.size() - 1);
    while (slots_[i].id >= 0 && !(slots_[i].hash == h && slots_[i].key == key)) i = (i + 1) & (slots_.size() - 1);
    slots_[i] = Slot{h, key, id};
    max_bytes_ = std::max(max_bytes_, key.size());
  }
  //! The id of key, or -1.
  int64_t Find(std::string_view key) const {
    if (key.size() > max_bytes_) return -1;
    const uint64_t h = Hash(key);
    for (size_t i = h & (slots_.size() - 1);; i = (i + 1) & (slots_.size() - 1)) {
      const Slot& s = slots_[i];
      if (s.id < 0) return -1;
      if (s.hash == h && s.key == key) return s.id;
    }
  }
  size_t max_bytes() const { return max_bytes_; }

 private:
  static uint64_t Hash(std::string_view s) {  // FNV-1a, then a multiply to spread the low bits
    uint64_t h = 0xcbf29ce484222325ull;
    for (char c : s) h = (h ^ static_cast<unsigned char>(c)) * 0x100000001b3ull;
    return (h ^ (h >> 29)) * 0xbf58476d1ce4e5b9ull;
  }
  struct Slot {
    uint64_t hash = 0;
    std::string_view key;
    int64_t id = -1;
  };
  std::vector<Slot> slots_;
  size_t max_bytes_ = 0;
};

// The vocab's two lookups: whole tokens, and "##" continuations by what follows the "##".
struct Vocab {
  Tensor strings;  // the views below point into it
  TokenTable whole, continuation;
};

std::shared_ptr<const Vocab> BuildVocab(const Tensor& strings) {
  auto v = std::make_shared<Vocab>();
  v->strings = strings;
  const int64_t n = strings.numel();
  size_t cont = 0;
  for (int64_t i = 0; i < n; ++i) cont += strings.strings()[i].starts_with("##");
  v->whole.Reserve(static_cast<size_t>(n));
  v->continuation.Reserve(cont);
  for (int64_t i = 0; i < n; ++i) {
    const std::string_view s = strings.strings()[i];
    v->whole.Put(s, i);
    if (s.starts_with("##")) v->continuation.Put(s.substr(2), i);
  }
  return v;
}

// Indexes of constant vocab inputs, so a served model builds its index once, not every call. An
// entry holds the vocab tensor, so the storage its key names cannot be freed and reused while the
// entry lives; a constant is never written. A few models' worth are kept, least recently used last.
class VocabCache {
 public:
  std::shared_ptr<const Vocab> Get(const Tensor& strings) {
    const std::string* key = strings.strings();
    const int64_t n = strings.numel();
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (auto it = entries_.begin(); it != entries_.end(); ++it)
        if (it->first == key && it->second->strings.numel() == n) {
          entries_.splice(entries_.begin(), entries_, it);
          return entries_.front().second;
        }
    }
    auto built = BuildVocab(strings);  // outside the lock: another model's calls go on meanwhile
    std::lock_guard<std::mutex> lock(mu_);
    entries_.emplace_front(key, built);
    if (entries_.size() > kCapacity) entries_.pop_back();
    return built;
  }

 private:
  static constexpr size_t kCapacity = 8;
  std::mutex mu_;
  std::list<std::pair<const std::string*, std::shared_ptr<const Vocab>>> entries_;
};

//! The vocab index of node input 1: cached when the node's vocab is a constant, else built here.
std::shared_ptr<const Vocab> VocabOf(const ir::Node& node, const Tensor& strings) {
  static VocabCache* cache = new VocabCache();  // never destroyed: kernels may run until exit
  const ir::Value* v = node.input(1);
  return v != nullptr && v->is_constant() ? cache->Get(strings) : BuildVocab(strings);
}

// ---------------------------------------------------------------- attributes

struct Options {
  bool lower = true, strip = true, cjk = true, pad_to_max = false;
  int64_t max_length = 512, max_chars = 100;
  std::string unk = "[UNK]", cls = "[CLS]", sep = "[SEP]", pad = "[PAD]", mask = "[MASK]";
};

constexpr int64_t kMaxLength = int64_t{1} << 20;  // tokens a row: bounds what padding allocates

Result<Options> ParseOptions(const ir::Node& node) {
  static constexpr std::string_view kInts[] = {"do_lower_case", "strip_accents", "tokenize_chinese_chars", "max_length",
                                               "max_input_chars_per_word"};
  static constexpr std::string_view kStrings[] = {"padding",   "unk_token", "cls_token",
                                                  "sep_token", "pad_token", "mask_token"};
  for (const auto& [name, a] : node.attrs) {
    const bool is_int = std::find(std::begin(kInts), std::end(kInts), name) != std::end(kInts);
    const bool is_str = std::find(std::begin(kStrings), std::end(kStrings), name) != std::end(kStrings);
    if (!is_int && !is_str) return InvalidArgument(node.Label(), ": unknown attribute '", name, "'");
    if (a.type != (is_int ? ir::AttrType::kInt : ir::AttrType::kString))
      return InvalidArgument(node.Label(), ": attribute '", name, "' must be ", is_int ? "an integer" : "a string",
                             ", got ", ir::AttrTypeName(a.type));
  }
  Options o;
  auto flag = [&](const char* name, int64_t dflt, int64_t lo) -> Result<int64_t> {
    const int64_t v = node.attr_int(name, dflt);
    if (v < lo || v > 1)
      return InvalidArgument(node.Label(), ": ", name, " must be ", lo < 0 ? "-1, " : "", "0 or 1, got ", v);
    return v;
  };
  SP_ASSIGN_OR_RETURN(int64_t lower, flag("do_lower_case", 1, 0));
  SP_ASSIGN_OR_RETURN(int64_t strip, flag("strip_accents", -1, -1));
  SP_ASSIGN_OR_RETURN(int64_t cjk, flag("tokenize_chinese_chars", 1, 0));
  o.lower = lower != 0;
  o.strip = strip < 0 ? o.lower : strip != 0;  // unset: follows lower-casing, as tokenizers does
  o.cjk = cjk != 0;
  o.max_length = node.attr_int("max_length", 512);
  if (o.max_length < 2 || o.max_length > kMaxLength)
    return InvalidArgument(node.Label(), ": max_length must be in [2, ", kMaxLength,
                           "] (it counts [CLS] and [SEP]), got ", o.max_length);
  o.max_chars = node.attr_int("max_input_chars_per_word", 100);
  if (o.max_chars < 0)
    return InvalidArgument(node.Label(), ": max_input_chars_per_word must be >= 0, got ", o.max_chars);
  const std::string padding = node.attr_string("padding", "longest");
  if (padding != "longest" && padding != "max_length")
    return InvalidArgument(node.Label(), ": padding must be \"longest\" or \"max_length\", got \"", padding, "\"");
  o.pad_to_max = padding == "max_length";
  using Field = std::pair<const char*, std::string*>;
  for (auto [name, field] : std::initializer_list<Field>{{"unk_token", &o.unk},
                                                         {"cls_token", &o.cls},
                                                         {"sep_token", &o.sep},
                                                         {"pad_token", &o.pad},
                                                         {"mask_token", &o.mask}}) {
    *field = node.attr_string(name, *field);
    if (!IsUtf8(*field)) return InvalidArgument(node.Label(), ": ", name, " is not valid UTF-8");
    if (field->empty() && field != &o.mask) return InvalidArgument(node.Label(), ": ", name, " must not be empty");
  }
  return o;
}

// The ids of the special tokens; an error names the first one the vocab lacks.
struct SpecialIds {
  int64_t unk, cls, sep, pad;
  // The special tokens recognised in raw text, longest first (leftmost-longest matching).
  std::vector<std::pair<std::string_view, int64_t>> in_text;
};

Result<SpecialIds> FindSpecials(const ir::Node& node, const Options& o, const Vocab& vocab) {
  SpecialIds ids{};
  using Special = std::tuple<const char*, const std::string*, int64_t*>;
  for (auto [name, token, id] : std::initializer_list<Special>{{"unk_token", &o.unk, &ids.unk},
                                                               {"cls_token", &o.cls, &ids.cls},
                                                               {"sep_token", &o.sep, &ids.sep},
                                                               {"pad_token", &o.pad, &ids.pad}}) {
    *id = vocab.whole.Find(*token);
    if (*id < 0) return InvalidArgument(node.Label(), ": ", name, " \"", *token, "\" is not in the vocabulary");
    ids.in_text.emplace_back(*token, *id);
  }
  if (const int64_t m = o.mask.empty() ? -1 : vocab.whole.Find(o.mask); m >= 0) ids.in_text.emplace_back(o.mask, m);
  std::stable_sort(ids.in_text.begin(), ids.in_text.end(),
                   [](const auto& a, const auto& b) { return a.first.size() > b.first.size(); });
  return ids;
}

// ---------------------------------------------------------------- tokenizing

// One call's tokenizer: its buffers grow to the longest piece once and are reused for every row.
class Tokenizer {
 public:
  Tokenizer(const Options& o, const Vocab& vocab, const SpecialIds& specials) : o_(o), vocab_(vocab), sp_(specials) {
    for (const auto& [token, id] : sp_.in_text) first_byte_[static_cast<unsigned char>(token[0])] = true;
  }

  //! Appends the ids of `text` (validated UTF-8) to ids, stopping once ids has `cap` more entries
  //! after a whole word (the caller truncates to cap; what follows cannot change what comes before).
  void Encode(std::string_view text, size_t cap, std::vector<int64_t>* ids) {
    ids_ = ids;
    limit_ = ids->size() + cap;
    size_t pos = 0;
    while (pos < text.size() && ids_->size() < limit_) {
      size_t at = pos, len = 0;
      int64_t id = -1;
      for (; at < text.size(); ++at) {  // the next special token: leftmost, then longest
        if (!first_byte_[static_cast<unsigned char>(text[at])]) continue;
        for (const auto& [token, token_id] : sp_.in_text)
          if (text.compare(at, token.size(), token) == 0) {
            len = token.size();
            id = token_id;
            break;
          }
        if (len != 0) break;
      }
      Segment(text.substr(pos, at - pos));
      if (len != 0 && ids_->size() < limit_) ids_->push_back(id);
      pos = at + len;
    }
    if (ids_->size() > limit_) ids_->resize(limit_);
  }

  //! How many ids `text` has, none kept (a pair's truncation breaks a tie with it).
  size_t Count(std::string_view text) {
    std::vector<int64_t> sink;
    counted_ = 0;
    counting_ = true;
    Encode(text, std::numeric_limits<size_t>::max() / 2, &sink);
    counting_ = false;
    return counted_ + sink.size();
  }

 private:
  // A piece of text between special tokens, in chunks cut before ASCII whitespace: whitespace
  // ends a word and is a starter NFD does not reorder across, so chunks tokenize as the whole
  // would, with buffers bounded by the chunk instead of the text.
  void Segment(std::string_view s) {
    constexpr size_t kChunk = 4096;
    while (!s.empty() && ids_->size() < limit_) {
      size_t n = s.size();
      if (n > kChunk) {
        n = kChunk;
        while (n < s.size() && s[n] != ' ' && s[n] != '\t' && s[n] != '\n' && s[n] != '\r') ++n;
      }
      Normalize(s.substr(0, n));
      Words();
      s.remove_prefix(n);
    }
  }

  // BertNormalizer: clean text, CJK characters spaced, accents stripped (NFD, then Mn dropped),
  // lower case, in that order, into norm_.
  void Normalize(std::string_view s) {
    norm_.clear();
    bool wide = false, reorder = false;
    for (size_t i = 0; i < s.size();) {
      const char32_t c = NextCodePoint(s, i);
      if (c < 0x80) {
        if (c == '\t' || c == '\n' || c == '\r')
          norm_.push_back(' ');
        else if (c >= 0x20 && c != 0x7F)
          norm_.push_back(o_.lower && c >= 'A' && c <= 'Z' ? c + 32 : c);
        continue;
      }
      wide = true;
      if (IsRemoved(c)) continue;
      if (IsWhitespace(c)) {
        norm_.push_back(' ');
        continue;
      }
      const bool cjk = o_.cjk && IsCjk(c);
      if (cjk) norm_.push_back(' ');
      if (o_.strip) {
        const size_t from = norm_.size();
        AppendDecomposed(c, &norm_);
        for (size_t k = from; k < norm_.size() && !reorder; ++k) reorder = CombiningClass(norm_[k]) != 0;
      } else {
        norm_.push_back(c);
      }
      if (cjk) norm_.push_back(' ');
    }
    if (!wide || (!o_.strip && !o_.lower)) return;
    if (reorder) CanonicalOrder(norm_);
    tmp_.clear();
    for (char32_t c : norm_) {
      if (c < 0x80)
        tmp_.push_back(o_.lower && c >= 'A' && c <= 'Z' ? c + 32 : c);
      else if (o_.strip && IsMn(c))
        continue;
      else if (o_.lower)
        AppendLower(c, &tmp_);
      else
        tmp_.push_back(c);
    }
    norm_.swap(tmp_);
  }

  // BertPreTokenizer: words between whitespace, each punctuation character a word of its own.
  void Words() {
    const size_t n = norm_.size();
    for (size_t i = 0; i < n && ids_->size() < limit_;) {
      if (norm_[i] == ' ') {
        ++i;
        continue;
      }
      size_t j = i + 1;
      if (!IsPunct(norm_[i]))
        while (j < n && norm_[j] != ' ' && !IsPunct(norm_[j])) ++j;
      WordPiece(std::u32string_view(norm_).substr(i, j - i));
      i = j;
      if (counting_) {
        counted_ += ids_->size();
        ids_->clear();
      }
    }
  }

  // Greedy longest-match-first; a word with a piece not in the vocab, or longer than
  // max_input_chars_per_word characters, is one [UNK].
  void WordPiece(std::u32string_view w) {
    if (static_cast<int64_t>(w.size()) > o_.max_chars) {
      ids_->push_back(sp_.unk);
      return;
    }
    word_.clear();
    bounds_.clear();
    for (char32_t c : w) {
      bounds_.push_back(word_.size());
      AppendUtf8(c, &word_);
    }
    bounds_.push_back(word_.size());
    const size_t before = ids_->size();
    const std::string_view word(word_);
    for (size_t start = 0; start < w.size();) {
      const TokenTable& table = start == 0 ? vocab_.whole : vocab_.continuation;
      size_t end = w.size();
      while (end > start && bounds_[end] - bounds_[start] > table.max_bytes()) --end;
      int64_t id = -1;
      for (; end > start; --end)
        if ((id = table.Find(word.substr(bounds_[start], bounds_[end] - bounds_[start]))) >= 0) break;
      if (id < 0) {
        ids_->resize(before);
        ids_->push_back(sp_.unk);
        return;
      }
      ids_->push_back(id);
      start = end;
    }
  }

  const Options& o_;
  const Vocab& vocab_;
  const SpecialIds& sp_;
  std::vector<int64_t>* ids_ = nullptr;
  size_t limit_ = 0;
  bool counting_ = false;  // Count(): ids_ is emptied after each word into counted_
  size_t counted_ = 0;
  std::u32string norm_, tmp_;
  std::string word_;
  std::vector<size_t> bounds_;
  std::array<bool, 256> first_byte_{};  // the first bytes of the special tokens
};

// tokenizers' 'longest_first' for a pair of lengths n1, n2 and `max` tokens besides the specials.
std::pair<size_t, size_t> TruncatePair(size_t n1, size_t n2, size_t max) {
  if (max == 0) return {0, 0};
  if (n1 + n2 <= max) return {n1, n2};
  const bool swap = n1 > n2;
  if (swap) std::swap(n1, n2);
  n2 = n1 > max ? n1 : std::max(n1, max - n1);
  if (n1 + n2 > max) {
    n1 = max / 2;
    n2 = n1 + max % 2;
  }
  if (swap) std::swap(n1, n2);
  return {n1, n2};
}

// ---------------------------------------------------------------- op

// Rows of a text input: [N], [N, 1] or a scalar (1 row); -1 (error) for other shapes.
int64_t RowsOf(const Shape& s) {
  if (s.empty()) return 1;
  if (s.size() == 1) return s[0];
  if (s.size() == 2 && s[1] == 1) return s[0];
  return -1;
}

Status CheckTextType(const InferContext& ctx, size_t i, const char* name, std::optional<ir::Dim>* rows) {
  if (ctx.input_dtype(i) != DType::kString)
    return ctx.Error(name, " must be a string tensor, got ", DTypeName(ctx.input_dtype(i)));
  const auto& d = ctx.input_dims(i);
  if (!d) return Status::Ok();
  if (d->empty())
    *rows = ir::Dim::Known(1);
  else if (d->size() == 1 || (d->size() == 2 && (!(*d)[1].known() || (*d)[1].value == 1)))
    *rows = (*d)[0];
  else
    return ctx.Error(name, " must be [N], [N, 1] or a scalar, got ", ir::TensorType{DType::kString, *d}.ToString());
  return Status::Ok();
}

Status InferBertTokenizer(InferContext& ctx) {
  SP_RETURN_IF_ERROR(ctx.ExpectInputs(2, 3));
  if (ctx.num_outputs() < 1 || ctx.num_outputs() > 3)
    return ctx.Error("has ", ctx.num_outputs(), " outputs; it makes input_ids, attention_mask, token_type_ids");
  SP_ASSIGN_OR_RETURN(Options o, ParseOptions(ctx.node()));
  std::optional<ir::Dim> rows, pair_rows;
  SP_RETURN_IF_ERROR(CheckTextType(ctx, 0, "text", &rows));
  if (ctx.input_dtype(1) != DType::kString)
    return ctx.Error("vocab must be a string tensor, got ", DTypeName(ctx.input_dtype(1)));
  if (const auto& d = ctx.input_dims(1); d && d->size() != 1)
    return ctx.Error("vocab must be 1-D [V], got rank ", d->size());
  const bool pair = ctx.has_input(2);
  if (pair) {
    SP_RETURN_IF_ERROR(CheckTextType(ctx, 2, "text_pair", &pair_rows));
    if (o.max_length < 3)
      return ctx.Error("max_length must be >= 3 with text_pair ([CLS] A [SEP] B [SEP]), got ", o.max_length);
    ir::Dim n = rows.value_or(ir::Dim::Unknown());
    if (pair_rows) SP_RETURN_IF_ERROR(UnifyDim(ctx, n, *pair_rows, "rows of text and text_pair"));
    rows = n;
  }
  // A constant vocab's special tokens are checked here, at build time; its index is cached.
  if (const ir::Value* v = ctx.node().input(1); v != nullptr && v->is_constant() && ctx.input_value(1) != nullptr)
    SP_RETURN_IF_ERROR(FindSpecials(ctx.node(), o, *VocabOf(ctx.node(), *ctx.input_value(1))).status());
  const ir::Dims out{rows.value_or(ir::Dim::Unknown()),
                     o.pad_to_max ? ir::Dim::Known(o.max_length) : ir::Dim::Unknown()};
  for (size_t k = 0; k < ctx.num_outputs(); ++k) ctx.set_output(k, DType::kInt64, out);
  return Status::Ok();
}

// Output k as an int64 [n, l] tensor to fill (the planned memory when there is one); nullptr
// when the node does not ask for it.
Result<int64_t*> OutputRows(KernelContext& ctx, size_t k, int64_t n, int64_t l) {
  if (k >= ctx.outputs.size() || ctx.node.output(k) == nullptr) return nullptr;
  Tensor& out = ctx.out(k);
  if (!(out.defined() && out.dtype() == DType::kInt64 && out.shape() == Shape{n, l})) {
    SP_ASSIGN_OR_RETURN(out, Tensor::Zeros(DType::kInt64, {n, l}));
  }
  return out.mutable_data<int64_t>();
}

Status RunBertTokenizer(KernelContext& ctx) {
  SP_ASSIGN_OR_RETURN(Options o, ParseOptions(ctx.node));
  const Tensor& text = ctx.in(0);
  const Tensor& vocab_strings = ctx.in(1);
  const Tensor* pair = ctx.has_input(2) ? &ctx.in(2) : nullptr;
  const int64_t n = RowsOf(text.shape());
  if (n < 0) return ctx.Error("text must be [N], [N, 1] or a scalar, got ", text.Describe());
  if (vocab_strings.rank() != 1) return ctx.Error("vocab must be 1-D [V], got ", vocab_strings.Describe());
  if (pair != nullptr && RowsOf(pair->shape()) != n)
    return ctx.Error("text_pair must have the rows of text (", n, "), got ", pair->Describe());
  const std::shared_ptr<const Vocab> vocab = VocabOf(ctx.node, vocab_strings);
  SP_ASSIGN_OR_RETURN(SpecialIds sp, FindSpecials(ctx.node, o, *vocab));

  // Every row's A then B ids, one flat vector; at most `cap` ids each, enough for truncation.
  const size_t specials = pair ? 3 : 2;
  const size_t cap = static_cast<size_t>(o.max_length) - specials;
  std::vector<int64_t> ids;
  std::vector<size_t> starts;  // row r's A at starts[2r], its B at starts[2r+1], end at starts[2r+2]
  starts.reserve(static_cast<size_t>(2 * n + 1));
  Tokenizer tok(o, *vocab, sp);
  for (int64_t r = 0; r < n; ++r) {
    for (const Tensor* t : {&text, pair}) {
      starts.push_back(ids.size());
      if (t == nullptr) continue;
      const std::string& s = t->strings()[r];
      if (const size_t bad = FindInvalidUtf8(s); bad != std::string::npos)
        return ctx.Error(t == &text ? "text" : "text_pair", " row ", r, " is not valid UTF-8 (byte ", bad, ")");
      tok.Encode(s, cap, &ids);
    }
  }
  starts.push_back(ids.size());

  std::vector<std::pair<size_t, size_t>> kept(static_cast<size_t>(n));
  int64_t longest = 0;
  for (size_t r = 0; r < kept.size(); ++r) {
    size_t na = starts[2 * r + 1] - starts[2 * r], nb = starts[2 * r + 2] - starts[2 * r + 1];
    // Both cut at cap: when cap is odd, the longer one keeps the extra token, so their full
    // lengths decide (tokenizers' swap when A is longer).
    if (pair && na == cap && nb == cap && cap % 2 == 1) {
      na = tok.Count(text.strings()[r]);
      nb = tok.Count(pair->strings()[r]);
    }
    kept[r] = pair ? TruncatePair(na, nb, cap) : std::pair{std::min(na, cap), size_t{0}};
    longest = std::max(longest, static_cast<int64_t>(kept[r].first + kept[r].second + specials));
  }
  const int64_t l = o.pad_to_max ? o.max_length : longest;
  SP_ASSIGN_OR_RETURN(int64_t * out_ids, OutputRows(ctx, 0, n, l));
  SP_ASSIGN_OR_RETURN(int64_t * out_mask, OutputRows(ctx, 1, n, l));
  SP_ASSIGN_OR_RETURN(int64_t * out_types, OutputRows(ctx, 2, n, l));
  for (size_t r = 0; r < kept.size(); ++r) {
    const size_t row = r * static_cast<size_t>(l);
    size_t k = 0;
    auto put = [&](int64_t id, int64_t type) {
      if (out_ids) out_ids[row + k] = id;
      if (out_mask) out_mask[row + k] = 1;
      if (out_types) out_types[row + k] = type;
      ++k;
    };
    put(sp.cls, 0);
    for (size_t i = 0; i < kept[r].first; ++i) put(ids[starts[2 * r] + i], 0);
    put(sp.sep, 0);
    if (pair) {
      for (size_t i = 0; i < kept[r].second; ++i) put(ids[starts[2 * r + 1] + i], 1);
      put(sp.sep, 1);
    }
    for (; k < static_cast<size_t>(l); ++k) {
      if (out_ids) out_ids[row + k] = sp.pad;
      if (out_mask) out_mask[row + k] = 0;
      if (out_types) out_types[row + k] = 0;
    }
  }
  return Status::Ok();
}

}  // namespace

SAMPAN_REGISTER_OP_DEF({.domain = "sampan",
                        .op_type = "BertTokenizer",
                        .infer = InferBertTokenizer,
                        .run = RunBertTokenizer,
                        .strings = true});

}  // namespace sampan::ops
