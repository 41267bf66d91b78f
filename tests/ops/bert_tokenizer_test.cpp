// sampan::BertTokenizer (src/ops/bert_tokenizer.cpp) on a small hand-made vocabulary: lower
// case, accents, punctuation, CJK, ## continuations, [UNK], special tokens in the text, pairs,
// truncation, both paddings, the accepted text shapes, and the errors of bad inputs and
// attributes. Hugging Face's tokenizer on the real all-MiniLM vocabulary, hundreds of texts and
// every code point: tests/models/test_tokenizer.py.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>

#include "ops/op_test_util.h"

namespace sampan::ops {
namespace {

using namespace testing;  // NOLINT(google-build-using-namespace)

const std::vector<std::string> kTokens = {
    "[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]",  "hello", "world", "un",     "##aff", "##able",   // 0-9
    "!",     ",",     ".",     "'",     "s",       "cafe",  "naive", "café",   "ang",   "##strom",  // 10-19
    "中",    "国",    "«",     "»",     "the",     "##s",   "a",     "##b",    "[",     "]",        // 20-29
    "mask",  "Hello", "ς",     "σ",     "i\u0307", "ss",    "run",   "##ning", "x",     "##x"};     // 30-39
const Tensor kVocab = Tensor::FromStrings(kTokens, {static_cast<int64_t>(kTokens.size())});

int64_t Id(const std::string& token) {
  for (size_t i = 0; i < kTokens.size(); ++i)
    if (kTokens[i] == token) return static_cast<int64_t>(i);
  ADD_FAILURE() << token << " is not in the test vocabulary";
  return -1;
}

using Attrs = std::map<std::string, ir::Attribute>;

// Runs the op; `pair` null = no text_pair. `constant_vocab` makes the vocab an initializer.
Result<std::vector<Tensor>> Tokenize(const Tensor& text, Attrs attrs = {}, const Tensor* pair = nullptr,
                                     const Tensor& vocab = kVocab, bool constant_vocab = false) {
  std::vector<ir::TensorType> types = {ir::TensorType::Static(text.dtype(), text.shape()),
                                       ir::TensorType::Static(vocab.dtype(), vocab.shape())};
  if (pair) types.push_back(ir::TensorType::Static(pair->dtype(), pair->shape()));
  auto m = MakeGraph("BertTokenizer", types, std::move(attrs), 17, 3);
  m->node->domain = "sampan";
  m->g.opsets["sampan"] = 1;
  if (constant_vocab) m->node->input(1)->data = vocab;
  std::vector<const Tensor*> ins = {&text, &vocab};
  if (pair) ins.push_back(pair);
  std::vector<Tensor> outs;
  SP_RETURN_IF_ERROR(RunNode(*m->node, 17, ins, &outs));
  return outs;
}

Tensor Text(std::vector<std::string> rows) {
  const auto n = static_cast<int64_t>(rows.size());
  return Tensor::FromStrings(std::move(rows), {n});
}

// The ids of row r without [CLS], [SEP] and padding, as tokens.
std::vector<std::string> Tokens(const Tensor& ids, int64_t r) {
  std::vector<std::string> out;
  const int64_t l = ids.dim(1);
  for (int64_t k = 0; k < l; ++k) {
    const int64_t id = ids.data<int64_t>()[r * l + k];
    if (id == Id("[CLS]") || id == Id("[SEP]") || id == Id("[PAD]")) continue;
    out.push_back(kTokens.at(static_cast<size_t>(id)));
  }
  return out;
}

std::vector<std::string> TokensOf(const std::string& text, Attrs attrs = {}) {
  auto r = Tokenize(Text({text}), std::move(attrs));
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return r.ok() ? Tokens((*r)[0], 0) : std::vector<std::string>{"<error>"};
}

using V = std::vector<std::string>;

TEST(BertTokenizer, LowerCasesStripsAccentsAndSplitsPunctuation) {
  auto r = Tokenize(Text({"Hello, World!"}));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const Tensor& ids = (*r)[0];
  ASSERT_EQ(ids.dtype(), DType::kInt64);
  ASSERT_EQ(ids.shape(), (Shape{1, 6}));
  EXPECT_EQ(Values<int64_t>(ids), (std::vector<int64_t>{2, 5, 11, 6, 10, 3}));
  EXPECT_EQ(Values<int64_t>((*r)[1]), (std::vector<int64_t>(6, 1)));
  EXPECT_EQ(Values<int64_t>((*r)[2]), (std::vector<int64_t>(6, 0)));

  EXPECT_EQ(TokensOf("CAFÉ Naïve"), (V{"cafe", "naive"}));
  EXPECT_EQ(TokensOf("Ångström"), (V{"ang", "##strom"}));
  EXPECT_EQ(TokensOf("hello!world'S"), (V{"hello", "!", "world", "'", "s"}));
  EXPECT_EQ(TokensOf("«hello»"), (V{"«", "hello", "»"}));  // Unicode punctuation (Pi, Pf)
  // Accents kept when asked, lower case still applied; no lower case: no accent stripping either.
  EXPECT_EQ(TokensOf("Café", {{"strip_accents", ir::Attribute::Int(0)}}), (V{"café"}));
  EXPECT_EQ(TokensOf("Café hello", {{"do_lower_case", ir::Attribute::Int(0)}}), (V{"[UNK]", "hello"}));
  EXPECT_EQ(TokensOf("Hello", {{"do_lower_case", ir::Attribute::Int(0)}}), (V{"Hello"}));
  EXPECT_EQ(TokensOf("he\u0301llo Hello",
                     {{"do_lower_case", ir::Attribute::Int(0)}, {"strip_accents", ir::Attribute::Int(1)}}),
            (V{"hello", "Hello"}));  // stripped, not lower-cased
  // Lower case per character, as Rust's char::to_lowercase: a final sigma stays σ; İ is i + U+0307.
  EXPECT_EQ(TokensOf("Σ", {{"strip_accents", ir::Attribute::Int(0)}}), (V{"σ"}));
  EXPECT_EQ(TokensOf("İ", {{"strip_accents", ir::Attribute::Int(0)}}), (V{"i\u0307"}));
}

TEST(BertTokenizer, CleansTextAndSpacesCjk) {
  // Controls, NUL, U+FFFD and format characters (soft hyphen) are dropped; any whitespace splits.
  EXPECT_EQ(TokensOf(std::string("hel\x01lo\tworld\u00a0hel\u00adlo \ufffdx\n") + std::string(1, '\0') + "a\x7f"),
            (V{"hello", "world", "hello", "x", "a"}));
  EXPECT_EQ(TokensOf("中国hello"), (V{"中", "国", "hello"}));
  // Without CJK spacing "中国" is one word, and "##国" is not in the vocabulary.
  EXPECT_EQ(TokensOf("中国", {{"tokenize_chinese_chars", ir::Attribute::Int(0)}}), (V{"[UNK]"}));
  EXPECT_EQ(TokensOf(""), V{});
  EXPECT_EQ(TokensOf("  \t "), V{});
}

TEST(BertTokenizer, WordPieceContinuationsAndUnknowns) {
  EXPECT_EQ(TokensOf("unaffable running"), (V{"un", "##aff", "##able", "run", "##ning"}));
  EXPECT_EQ(TokensOf("xxx abb"), (V{"x", "##x", "##x", "a", "##b", "##b"}));
  EXPECT_EQ(TokensOf("unaffablez hello zzz"), (V{"[UNK]", "hello", "[UNK]"}));  // a piece missing: the whole word
  EXPECT_EQ(TokensOf("hello unaffable", {{"max_input_chars_per_word", ir::Attribute::Int(5)}}), (V{"hello", "[UNK]"}));
  EXPECT_EQ(TokensOf("hello", {{"max_input_chars_per_word", ir::Attribute::Int(0)}}), (V{"[UNK]"}));
}

TEST(BertTokenizer, SpecialTokensInTheTextAreThoseTokens) {
  EXPECT_EQ(TokensOf("hello [MASK] world[UNK]"), (V{"hello", "[MASK]", "world", "[UNK]"}));
  EXPECT_EQ(TokensOf("[mask]"), (V{"[", "mask", "]"}));  // matched before lower-casing
  EXPECT_EQ(TokensOf("hello [MASK]", {{"mask_token", ir::Attribute::String("")}}), (V{"hello", "[", "mask", "]"}));
  auto r = Tokenize(Text({"[CLS][SEP]"}));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(Values<int64_t>((*r)[0]), (std::vector<int64_t>{2, 2, 3, 3}));
}

TEST(BertTokenizer, PairsGetTokenTypeOne) {
  const Tensor a = Text({"hello world", ""}), b = Text({"the cafe", ""});
  auto r = Tokenize(a, {}, &b);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ((*r)[0].shape(), (Shape{2, 7}));
  EXPECT_EQ(Values<int64_t>((*r)[0]), (std::vector<int64_t>{2, 5, 6, 3, 24, 15, 3, 2, 3, 3, 0, 0, 0, 0}));
  EXPECT_EQ(Values<int64_t>((*r)[1]), (std::vector<int64_t>{1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0}));
  EXPECT_EQ(Values<int64_t>((*r)[2]), (std::vector<int64_t>{0, 0, 0, 0, 1, 1, 1, 0, 0, 1, 0, 0, 0, 0}));
}

// tokenizers' own truncate_encodings_longest_first cases: (len A, len B, max tokens) -> kept.
TEST(BertTokenizer, TruncatesLongestFirstAsTokenizers) {
  auto words = [](int n) {
    std::string s;
    for (int i = 0; i < n; ++i) s += "hello ";
    return s;
  };
  struct Case {
    int a, b, a_kept, b_kept;
  };
  for (const Case& c : {Case{0, 8, 0, 7}, Case{2, 8, 2, 5}, Case{4, 4, 3, 4}, Case{4, 8, 3, 4}, Case{8, 2, 5, 2},
                        Case{8, 4, 4, 3}, Case{8, 8, 3, 4}, Case{4, 2, 4, 2}, Case{8, 0, 7, 0},
                        // Both past the 7 kept: the longer one, by its full length, keeps the odd token.
                        Case{9, 8, 4, 3}, Case{8, 9, 3, 4}, Case{7, 30, 3, 4}, Case{30, 7, 4, 3}}) {
    const Tensor a = Text({words(c.a)}), b = Text({words(c.b)});
    auto r = Tokenize(a, {{"max_length", ir::Attribute::Int(7 + 3)}}, &b);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    const std::vector<int64_t> types = Values<int64_t>((*r)[2]);
    const auto b_len = std::count(types.begin(), types.end(), 1) - 1;  // B and its [SEP]
    EXPECT_EQ((*r)[0].dim(1), c.a_kept + c.b_kept + 3) << c.a << " " << c.b;
    EXPECT_EQ(b_len, c.b_kept) << c.a << " " << c.b;
  }
  // One sequence: cut to max_length with its [CLS] and [SEP], even inside a word's pieces.
  auto r = Tokenize(Text({"hello unaffable world"}), {{"max_length", ir::Attribute::Int(4)}});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(Values<int64_t>((*r)[0]), (std::vector<int64_t>{2, 5, 7, 3}));
  auto two = Tokenize(Text({"hello"}), {{"max_length", ir::Attribute::Int(2)}});
  ASSERT_TRUE(two.ok());
  EXPECT_EQ(Values<int64_t>((*two)[0]), (std::vector<int64_t>{2, 3}));
}

TEST(BertTokenizer, PadsToTheLongestRowOrToMaxLength) {
  auto r = Tokenize(Text({"hello", "hello world unaffable", ""}));
  ASSERT_TRUE(r.ok());
  ASSERT_EQ((*r)[0].shape(), (Shape{3, 7}));
  EXPECT_EQ(Values<int64_t>((*r)[0]),
            (std::vector<int64_t>{2, 5, 3, 0, 0, 0, 0, 2, 5, 6, 7, 8, 9, 3, 2, 3, 0, 0, 0, 0, 0}));
  EXPECT_EQ(Values<int64_t>((*r)[1]),
            (std::vector<int64_t>{1, 1, 1, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0}));
  Attrs fixed = {{"padding", ir::Attribute::String("max_length")}, {"max_length", ir::Attribute::Int(5)}};
  auto f = Tokenize(Text({"hello", "hello world unaffable"}), fixed);
  ASSERT_TRUE(f.ok());
  ASSERT_EQ((*f)[0].shape(), (Shape{2, 5}));
  EXPECT_EQ(Values<int64_t>((*f)[0]), (std::vector<int64_t>{2, 5, 3, 0, 0, 2, 5, 6, 7, 3}));
  // Another pad token.
  auto p = Tokenize(Text({"hello", ""}), {{"pad_token", ir::Attribute::String("[MASK]")}});
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(Values<int64_t>((*p)[0]), (std::vector<int64_t>{2, 5, 3, 2, 3, 4}));
}

TEST(BertTokenizer, InfersRowsByLength) {
  auto infer = [](std::vector<ir::TensorType> ins, Attrs attrs) -> Result<ir::TensorType> {
    auto m = MakeGraph("BertTokenizer", ins, std::move(attrs), 17, 3);
    m->node->domain = "sampan";
    m->g.opsets["sampan"] = 1;
    SP_RETURN_IF_ERROR(InferTypes(m->g));
    return m->g.FindValue("out2")->type;
  };
  const ir::TensorType vocab = TT({K(40)}, DType::kString);
  auto longest = infer({TT({S("N")}, DType::kString), vocab}, {});
  ASSERT_TRUE(longest.ok()) << longest.status().ToString();
  EXPECT_EQ(longest->dtype, DType::kInt64);
  ASSERT_EQ(longest->dims->size(), 2u);
  EXPECT_EQ((*longest->dims)[0].param, "N");
  EXPECT_FALSE((*longest->dims)[1].known());
  auto fixed = infer({TT({S("N"), K(1)}, DType::kString), vocab, TT({K(4), K(1)}, DType::kString)},
                     {{"padding", ir::Attribute::String("max_length")}, {"max_length", ir::Attribute::Int(128)}});
  ASSERT_TRUE(fixed.ok()) << fixed.status().ToString();
  EXPECT_EQ(fixed->ToString(), TT({K(4), K(128)}, DType::kInt64).ToString());
}

TEST(BertTokenizer, AcceptsColumnsScalarsAndNoRows) {
  auto col = Tokenize(Tensor::FromStrings({"hello", "world"}, {2, 1}));
  ASSERT_TRUE(col.ok()) << col.status().ToString();
  EXPECT_EQ((*col)[0].shape(), (Shape{2, 3}));
  auto scalar = Tokenize(Tensor::FromStrings({"hello world"}, {}));
  ASSERT_TRUE(scalar.ok()) << scalar.status().ToString();
  EXPECT_EQ(Values<int64_t>((*scalar)[0]), (std::vector<int64_t>{2, 5, 6, 3}));
  auto none = Tokenize(Tensor::FromStrings({}, {0}));
  ASSERT_TRUE(none.ok()) << none.status().ToString();
  EXPECT_EQ((*none)[0].shape(), (Shape{0, 0}));
  auto none_fixed = Tokenize(Tensor::FromStrings({}, {0}), {{"padding", ir::Attribute::String("max_length")}});
  ASSERT_TRUE(none_fixed.ok());
  EXPECT_EQ((*none_fixed)[2].shape(), (Shape{0, 512}));
}

TEST(BertTokenizer, LongTextsCrossChunksAndStopAtTheLimit) {
  std::string text;
  for (int i = 0; i < 3000; ++i) text += i % 7 == 0 ? "unaffable\n" : "hello  ";
  auto r = Tokenize(Text({text}), {{"max_length", ir::Attribute::Int(20000)}});
  ASSERT_TRUE(r.ok());
  const std::vector<int64_t> ids = Values<int64_t>((*r)[0]);
  std::vector<int64_t> want = {2};
  for (int i = 0; i < 3000; ++i) {
    if (i % 7 == 0)
      want.insert(want.end(), {7, 8, 9});
    else
      want.push_back(5);
  }
  want.push_back(3);
  EXPECT_EQ(ids, want);
  auto cut = Tokenize(Text({text}));
  ASSERT_TRUE(cut.ok());
  ASSERT_EQ((*cut)[0].dim(1), 512);
  std::vector<int64_t> cut_want(want.begin(), want.begin() + 511);
  cut_want.push_back(3);
  EXPECT_EQ(Values<int64_t>((*cut)[0]), cut_want);
}

TEST(BertTokenizer, BadInputsAreErrors) {
  auto bad = Tokenize(Text({"hello", "caf\xe9", "ok"}));
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("text row 1 is not valid UTF-8 (byte 3)"), std::string::npos)
      << bad.status().ToString();
  const Tensor bad_pair = Text({"ok", "\xed\xa0\x80"});  // a surrogate
  auto bp = Tokenize(Text({"a", "b"}), {}, &bad_pair);
  ASSERT_FALSE(bp.ok());
  EXPECT_NE(bp.status().message().find("text_pair row 1 is not valid UTF-8"), std::string::npos)
      << bp.status().ToString();

  std::vector<std::string> no_sep = kTokens;
  no_sep[3] = "[SEPARATOR]";
  auto ms = Tokenize(Text({"hello"}), {}, nullptr, Tensor::FromStrings(no_sep, {static_cast<int64_t>(no_sep.size())}));
  ASSERT_FALSE(ms.ok());
  EXPECT_NE(ms.status().message().find("sep_token \"[SEP]\" is not in the vocabulary"), std::string::npos)
      << ms.status().ToString();
  auto mu = Tokenize(Text({"hello"}), {{"unk_token", ir::Attribute::String("<unk>")}});
  ASSERT_FALSE(mu.ok());
  EXPECT_NE(mu.status().message().find("unk_token \"<unk>\""), std::string::npos) << mu.status().ToString();

  for (const auto& [attrs, what] : std::vector<std::pair<Attrs, std::string>>{
           {{{"padding", ir::Attribute::String("max")}}, "padding must be"},
           {{{"max_length", ir::Attribute::Int(1)}}, "max_length must be in [2"},
           {{{"max_length", ir::Attribute::Int(int64_t{1} << 40)}}, "max_length must be in [2"},
           {{{"strip_accents", ir::Attribute::Int(2)}}, "strip_accents must be -1, 0 or 1"},
           {{{"do_lower_case", ir::Attribute::Int(-1)}}, "do_lower_case must be 0 or 1"},
           {{{"max_input_chars_per_word", ir::Attribute::Int(-1)}}, "max_input_chars_per_word must be >= 0"},
           {{{"do_lowercase", ir::Attribute::Int(1)}}, "unknown attribute 'do_lowercase'"},
           {{{"max_length", ir::Attribute::String("12")}}, "'max_length' must be an integer"},
           {{{"cls_token", ir::Attribute::String("")}}, "cls_token must not be empty"},
           {{{"sep_token", ir::Attribute::String("\xff")}}, "sep_token is not valid UTF-8"}}) {
    auto e = Tokenize(Text({"hello"}), attrs);
    ASSERT_FALSE(e.ok()) << what;
    EXPECT_NE(e.status().message().find(what), std::string::npos) << e.status().ToString();
  }
  const Tensor b = Text({"hello"});
  auto pair_max = Tokenize(Text({"hello"}), {{"max_length", ir::Attribute::Int(2)}}, &b);
  ASSERT_FALSE(pair_max.ok());
  EXPECT_NE(pair_max.status().message().find("max_length must be >= 3 with text_pair"), std::string::npos);

  EXPECT_FALSE(Tokenize(Tensor::FromStrings({"a", "b", "c", "d"}, {2, 2})).ok());
  EXPECT_FALSE(Tokenize(Text({"hello"}), {}, nullptr, Tensor::FromStrings(kTokens, {4, 10})).ok());
  EXPECT_FALSE(Tokenize(Tensor::Alloc(DType::kInt64, {2}), {}).ok());
  const Tensor three = Text({"a", "b", "c"});
  auto rows = Tokenize(Text({"a", "b"}), {}, &three);
  ASSERT_FALSE(rows.ok());
  EXPECT_NE(rows.status().message().find("rows of text and text_pair"), std::string::npos) << rows.status().ToString();
}

TEST(BertTokenizer, ConstantVocabGivesTheSameIds) {
  const Tensor text = Text({"Hello, unaffable [MASK] world!", "中国 café"});
  auto plain = Tokenize(text);
  auto constant = Tokenize(text, {}, nullptr, kVocab, true);
  auto again = Tokenize(text, {}, nullptr, kVocab, true);
  ASSERT_TRUE(plain.ok() && constant.ok() && again.ok());
  for (size_t k = 0; k < 3; ++k) {
    EXPECT_EQ(Values<int64_t>((*plain)[k]), Values<int64_t>((*constant)[k]));
    EXPECT_EQ(Values<int64_t>((*plain)[k]), Values<int64_t>((*again)[k]));
  }
  // A constant vocab without a special token fails at build time, in inference.
  std::vector<std::string> no_cls = kTokens;
  no_cls[2] = "[CLASS]";
  const Tensor bad = Tensor::FromStrings(no_cls, {static_cast<int64_t>(no_cls.size())});
  auto m = MakeGraph("BertTokenizer",
                     {TT({S("N")}, DType::kString), ir::TensorType::Static(DType::kString, bad.shape())}, {}, 17, 3);
  m->node->domain = "sampan";
  m->g.opsets["sampan"] = 1;
  m->node->input(1)->data = bad;
  Status st = InferTypes(m->g);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("cls_token \"[CLS]\" is not in the vocabulary"), std::string::npos) << st.ToString();
}

// Prints the cost of one call on a 30,522-token vocabulary (all-MiniLM's size) with the index
// built every call (a vocab fed as an input) and cached (an initializer); asserts nothing of time.
TEST(BertTokenizer, ReportsPerCallCost) {
  std::vector<std::string> tokens = {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"};
  for (int i = 0; tokens.size() < 30522; ++i) tokens.push_back((i % 5 == 0 ? "##w" : "w") + std::to_string(i));
  const Tensor vocab = Tensor::FromStrings(tokens, {static_cast<int64_t>(tokens.size())});
  std::vector<std::string> rows;
  for (int r = 0; r < 1000; ++r) {
    std::string s;
    for (int w = 0; w < 20; ++w) s += "w" + std::to_string((r * 20 + w) * 7 % 30000) + (w % 6 == 5 ? ", " : " ");
    rows.push_back(s);
  }
  const Tensor text = Text(rows), one = Text({rows[0]});
  auto time = [&](const Tensor& t, bool constant) {
    (void)Tokenize(t, {}, nullptr, vocab, constant);  // warm (and fill the cache)
    const auto t0 = std::chrono::steady_clock::now();
    constexpr int kRuns = 5;
    for (int i = 0; i < kRuns; ++i) EXPECT_TRUE(Tokenize(t, {}, nullptr, vocab, constant).ok());
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() / kRuns;
  };
  std::printf(
      "BertTokenizer per call (this build): 1 row: %.3f ms input vocab, %.3f ms initializer vocab; "
      "1000 rows x 20 words: %.3f ms input vocab, %.3f ms initializer vocab\n",
      time(one, false), time(one, true), time(text, false), time(text, true));
}

}  // namespace
}  // namespace sampan::ops
