// TfIdfVectorizer (opset 9): counts the n-grams of a pool in each row of an integer
// sequence and weighs the counts (TF, IDF or TFIDF). The pool lists n-grams grouped by
// length (ngram_counts[i] is where the (i+1)-grams start); n-gram k (counted from 0 over
// all lengths) lands in output column ngram_indexes[k]. N-grams of length min..max are
// gathered with skips 0..max_skip_count between their items; unigrams are counted once.
// String pools and inputs are not supported (string tensors are not storable).
#include <map>
#include <memory>

#include "ops/common.h"

namespace sampan::ops {
namespace {

struct Attrs {
  int64_t min_len = 0, max_len = 0, max_skip = 0;
  std::string mode;
  std::vector<int64_t> counts, indexes, pool;
  std::vector<float> weights;
  int64_t output_size = 0;
};

// A trie over n-gram items; id 0: no n-gram ends here (only a prefix of longer ones).
struct Trie {
  int64_t id = 0;
  std::map<int64_t, std::unique_ptr<Trie>> next;
};

Result<Attrs> ReadAttrs(const ir::Node& node) {
  Attrs a;
  a.min_len = node.attr_int("min_gram_length", 0);
  a.max_len = node.attr_int("max_gram_length", 0);
  a.max_skip = node.attr_int("max_skip_count", 0);
  a.mode = node.attr_string("mode", "");
  a.counts = node.attr_ints("ngram_counts");
  a.indexes = node.attr_ints("ngram_indexes");
  a.pool = node.attr_ints("pool_int64s");
  a.weights = node.attr_floats("weights");
  const std::string& at = node.Label();
  if (node.has_attr("pool_strings"))
    return Unsupported(at, ": pool_strings (string tensors are not supported; pool_int64s is)");
  if (a.mode != "TF" && a.mode != "IDF" && a.mode != "TFIDF")
    return InvalidArgument(at, ": mode must be TF, IDF or TFIDF, got '", a.mode, "'");
  if (a.min_len < 1 || a.max_len < a.min_len)
    return InvalidArgument(at, ": need 1 <= min_gram_length <= max_gram_length, got ", a.min_len, " and ", a.max_len);
  if (a.max_skip < 0) return InvalidArgument(at, ": max_skip_count must be >= 0, got ", a.max_skip);
  const int64_t total = static_cast<int64_t>(a.pool.size());
  int64_t ngrams = 0;
  for (size_t i = 0; i < a.counts.size(); ++i) {
    const int64_t start = a.counts[i], end = i + 1 < a.counts.size() ? a.counts[i + 1] : total;
    const int64_t len = static_cast<int64_t>(i) + 1;
    if (start < 0 || end < start || end > total || (end - start) % len != 0)
      return InvalidArgument(at, ": ngram_counts[", i, "] = ", start, " does not start a whole number of ", len,
                             "-grams in the pool of ", total);
    ngrams += (end - start) / len;
  }
  if (static_cast<int64_t>(a.indexes.size()) < ngrams)
    return InvalidArgument(at, ": ngram_indexes has ", a.indexes.size(), " entries for the pool's ", ngrams,
                           " n-grams");
  for (int64_t ix : a.indexes) {
    if (ix < 0 || ix > (int64_t{1} << 31)) return InvalidArgument(at, ": ngram_indexes holds ", ix);
    a.output_size = std::max(a.output_size, ix + 1);
  }
  if (!a.weights.empty() && static_cast<int64_t>(a.weights.size()) < a.output_size)
    return InvalidArgument(at, ": weights has ", a.weights.size(), " entries for ", a.output_size, " output columns");
  return a;
}

Status InferTfIdf(InferContext& ctx) {
  SP_RETURN_IF_ERROR(ctx.ExpectInputs(1, 1));
  if (ctx.input_dtype(0) == DType::kString) return ctx.NotSupported("string input (string tensors are not supported)");
  SP_RETURN_IF_ERROR(ExpectDType(ctx, 0, {DType::kInt32, DType::kInt64}));
  SP_ASSIGN_OR_RETURN(Attrs a, ReadAttrs(ctx.node()));
  const auto& x = ctx.input_dims(0);
  if (!x) {
    ctx.set_output(0, DType::kFloat32, std::nullopt);
    return Status::Ok();
  }
  if (x->size() > 2) return ctx.Error("X must be [C] or [B, C], got rank ", x->size());
  ir::Dims out;
  if (x->size() == 2) out.push_back((*x)[0]);
  out.push_back(ir::Dim::Known(a.output_size));
  ctx.set_output(0, DType::kFloat32, std::move(out));
  return Status::Ok();
}

Status RunTfIdf(KernelContext& ctx) {
  SP_ASSIGN_OR_RETURN(Attrs a, ReadAttrs(ctx.node));
  // The trie of the pool's n-grams of wanted lengths; ids run over every n-gram from 1.
  Trie root;
  int64_t id = 1;
  for (size_t i = 0; i < a.counts.size(); ++i) {
    const int64_t len = static_cast<int64_t>(i) + 1;
    const int64_t start = a.counts[i], end = i + 1 < a.counts.size() ? a.counts[i + 1] : int64_t(a.pool.size());
    for (int64_t g = start; g < end; g += len, ++id) {
      if (len < a.min_len || len > a.max_len) continue;
      Trie* t = &root;
      for (int64_t k = 0; k < len; ++k) {
        auto& slot = t->next[a.pool[static_cast<size_t>(g + k)]];
        if (!slot) slot = std::make_unique<Trie>();
        t = slot.get();
      }
      t->id = id;
    }
  }

  const Tensor& x = ctx.in(0);
  const int64_t rows = x.rank() == 2 ? x.shape()[0] : 1;
  const int64_t cols = x.rank() == 0 ? 1 : x.shape().back();
  std::vector<int64_t> items(static_cast<size_t>(x.numel()));
  for (int64_t i = 0; i < x.numel(); ++i) items[static_cast<size_t>(i)] = ElementAsInt64(x, i);
  std::vector<int64_t> freq(static_cast<size_t>(rows * a.output_size), 0);
  for (int64_t r = 0; r < rows && !root.next.empty(); ++r) {
    const int64_t* row = items.data() + r * cols;
    int64_t first_len = a.min_len;
    for (int64_t skip = 1; skip <= a.max_skip + 1; ++skip) {
      for (int64_t start = 0; start < cols; ++start) {
        if (start + skip * (first_len - 1) >= cols) break;  // no n-gram of a wanted length fits
        const Trie* t = &root;
        int64_t len = 1;
        for (int64_t at = start; len <= a.max_len && at < cols && !t->next.empty(); at += skip, ++len) {
          auto it = t->next.find(row[at]);
          if (it == t->next.end()) break;
          t = it->second.get();
          if (len >= first_len && t->id != 0)
            ++freq[static_cast<size_t>(r * a.output_size + a.indexes[static_cast<size_t>(t->id - 1)])];
        }
      }
      if (first_len == 1) {  // unigrams do not depend on the skip: counted on the first pass only
        first_len = 2;
        if (first_len > a.max_len) break;
      }
    }
  }

  float* y = ctx.out(0).mutable_data<float>();
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < a.output_size; ++c) {
      const size_t p = static_cast<size_t>(r * a.output_size + c);
      const float f = static_cast<float>(freq[p]);
      const float w = a.weights.empty() ? 1.f : a.weights[static_cast<size_t>(c)];
      if (a.mode == "TF")
        y[p] = f;
      else if (a.mode == "IDF")
        y[p] = freq[p] > 0 ? w : 0.f;
      else
        y[p] = w * f;
    }
  }
  return Status::Ok();
}

SAMPAN_REGISTER_OP("TfIdfVectorizer", InferTfIdf, RunTfIdf);

}  // namespace
}  // namespace sampan::ops
