// Text ops on string tensors (UTF-8, one std::string per element):
// StringNormalizer (stopword removal and case change under a locale),
// StringSplit, StringConcat (broadcasting), RegexFullMatch (RE2: linear time,
// so an untrusted pattern cannot hang a run), Equal of strings, and
// TfIdfVectorizer over int32, int64 or string tokens.
//
// Kernels whose outputs are strings allocate them per run (the planner gives
// strings no arena memory).
#include <clocale>
#include <cwctype>
#include <locale.h>
#include <map>
#include <memory>
#include <set>
#include <string>

#include <re2/re2.h>

#include "kernels/ref/common.h"
#include "kernels/registry.h"

namespace anvil::kernels {

namespace {

const std::string* strings(const Tensor& t) { return t.data<std::string>(); }

// --- UTF-8 and case ---------------------------------------------------------

// Decodes one code point at s[i], advancing i; malformed bytes decode as themselves (Latin-1).
char32_t next_code_point(const std::string& s, size_t& i) {
  const auto b = static_cast<unsigned char>(s[i]);
  const int extra = b >= 0xf0 && b < 0xf8 ? 3 : b >= 0xe0 ? 2 : b >= 0xc0 ? 1 : 0;
  if (b >= 0x80 && extra == 0) return static_cast<char32_t>(s[i++] & 0xff);
  if (i + static_cast<size_t>(extra) >= s.size() + (extra ? 0 : 1)) return static_cast<char32_t>(s[i++] & 0xff);
  char32_t c = extra == 0 ? b : b & (0x3f >> extra);
  for (int k = 1; k <= extra; ++k) {
    const auto cont = static_cast<unsigned char>(s[i + static_cast<size_t>(k)]);
    if ((cont & 0xc0) != 0x80) return static_cast<char32_t>(s[i++] & 0xff);
    c = (c << 6) | (cont & 0x3f);
  }
  i += static_cast<size_t>(extra) + 1;
  return c;
}

void append_utf8(std::string& out, char32_t c) {
  if (c < 0x80) {
    out += static_cast<char>(c);
  } else if (c < 0x800) {
    out += static_cast<char>(0xc0 | (c >> 6));
    out += static_cast<char>(0x80 | (c & 0x3f));
  } else if (c < 0x10000) {
    out += static_cast<char>(0xe0 | (c >> 12));
    out += static_cast<char>(0x80 | ((c >> 6) & 0x3f));
    out += static_cast<char>(0x80 | (c & 0x3f));
  } else {
    out += static_cast<char>(0xf0 | (c >> 18));
    out += static_cast<char>(0x80 | ((c >> 12) & 0x3f));
    out += static_cast<char>(0x80 | ((c >> 6) & 0x3f));
    out += static_cast<char>(0x80 | (c & 0x3f));
  }
}

// A C library locale for case mapping, freed with the kernel.
struct Locale {
  locale_t handle = nullptr;
  ~Locale() {
    if (handle) freelocale(handle);
  }
};

std::string change_case(const std::string& s, bool upper, locale_t loc) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    const char32_t c = next_code_point(s, i);
    const auto w = static_cast<wint_t>(c);
    append_utf8(out, static_cast<char32_t>(upper ? towupper_l(w, loc) : towlower_l(w, loc)));
  }
  return out;
}

// --- StringNormalizer -------------------------------------------------------

class StringNormalizerKernel : public Kernel {
 public:
  explicit StringNormalizerKernel(const ir::Node& node)
      : action_(node.attrs.get_string("case_change_action", "NONE")),
        case_sensitive_(node.attrs.get_int("is_case_sensitive", 0) != 0),
        locale_name_(node.attrs.get_string("locale", "en_US")),
        stopwords_(node.attrs.get_strings("stopwords")) {}

  bool allocates_outputs() const override { return true; }

  std::vector<TensorType> prepare(const PrepareContext& ctx) override {
    ANVIL_PREPARE_CHECK(ctx, action_ == "NONE" || action_ == "LOWER" || action_ == "UPPER", ErrorKind::kInvalidModel,
                        "case_change_action '{}' is not NONE, LOWER or UPPER", action_);
    const Shape& x = ctx.input_shape(0);
    ANVIL_PREPARE_CHECK(ctx, x.size() == 1 || (x.size() == 2 && x[0] == 1), ErrorKind::kInvalidArgument,
                        "the input {} must be [C] or [1, C]", shape_str(x));
    // The locale as named, with UTF-8 when the name has no encoding; then C.UTF-8.
    const std::string name = locale_name_.find('.') == std::string::npos ? locale_name_ + ".UTF-8" : locale_name_;
    locale_ = std::make_shared<Locale>();
    locale_->handle = newlocale(LC_CTYPE_MASK, name.c_str(), static_cast<locale_t>(nullptr));
    if (!locale_->handle) locale_->handle = newlocale(LC_CTYPE_MASK, "C.UTF-8", static_cast<locale_t>(nullptr));
    ANVIL_PREPARE_CHECK(ctx, locale_->handle != nullptr, ErrorKind::kUnsupported,
                        "neither locale '{}' nor C.UTF-8 is installed", name);
    stops_.clear();
    for (const std::string& w : stopwords_) stops_.insert(case_sensitive_ ? w : change_case(w, false, locale_->handle));
    return {{DType::kString, x}};
  }

  void run(const RunContext& ctx) const override {
    const Tensor& x = ctx.in(0);
    std::vector<std::string> kept;
    for (int64_t i = 0; i < x.numel(); ++i) {
      const std::string& s = strings(x)[i];
      if (stops_.count(case_sensitive_ ? s : change_case(s, false, locale_->handle))) continue;
      kept.push_back(action_ == "NONE" ? s : change_case(s, action_ == "UPPER", locale_->handle));
    }
    if (kept.empty()) kept.emplace_back();  // ONNX keeps one empty string
    const auto n = static_cast<int64_t>(kept.size());
    Tensor y(DType::kString, x.rank() == 2 ? Shape{1, n} : Shape{n});
    std::move(kept.begin(), kept.end(), y.data<std::string>());
    *ctx.outputs[0] = std::move(y);
  }

 private:
  std::string action_;
  bool case_sensitive_;
  std::string locale_name_;
  std::vector<std::string> stopwords_;
  std::set<std::string> stops_;
  std::shared_ptr<Locale> locale_;
};

// --- StringSplit ------------------------------------------------------------

// Python's str.split: without a delimiter, runs of whitespace separate and
// the ends are stripped; with one, every occurrence separates. At most
// `maxsplit` splits when it is >= 0 (the unsplit rest keeps its trailing
// whitespace, as in Python).
std::vector<std::string> split(const std::string& s, const std::string& delimiter, int64_t maxsplit) {
  std::vector<std::string> parts;
  if (!delimiter.empty()) {
    size_t start = 0;
    for (size_t at; (maxsplit < 0 || static_cast<int64_t>(parts.size()) < maxsplit) &&
                    (at = s.find(delimiter, start)) != std::string::npos;
         start = at + delimiter.size())
      parts.push_back(s.substr(start, at - start));
    parts.push_back(s.substr(start));
    return parts;
  }
  auto space = [](char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; };
  size_t i = 0;
  while (true) {
    while (i < s.size() && space(s[i])) ++i;
    if (i == s.size()) break;
    if (maxsplit >= 0 && static_cast<int64_t>(parts.size()) == maxsplit) {
      parts.push_back(s.substr(i));  // the rest as it is, trailing whitespace included (as Python does)
      break;
    }
    size_t j = i;
    while (j < s.size() && !space(s[j])) ++j;
    parts.push_back(s.substr(i, j - i));
    i = j;
  }
  return parts;
}

class StringSplitKernel : public Kernel {
 public:
  explicit StringSplitKernel(const ir::Node& node)
      : delimiter_(node.attrs.get_string("delimiter", "")), maxsplit_(node.attrs.get_int("maxsplit", -1)) {}

  bool allocates_outputs() const override { return true; }
  std::vector<TensorType> prepare(const PrepareContext& ctx) override {
    Shape y = ctx.input_shape(0);
    y.push_back(-1);
    return {{DType::kString, y}, {DType::kInt64, ctx.input_shape(0)}};
  }

  void run(const RunContext& ctx) const override {
    const Tensor& x = ctx.in(0);
    std::vector<std::vector<std::string>> parts(static_cast<size_t>(x.numel()));
    size_t widest = 0;
    for (int64_t i = 0; i < x.numel(); ++i) {
      parts[static_cast<size_t>(i)] = split(strings(x)[i], delimiter_, maxsplit_);
      widest = std::max(widest, parts[static_cast<size_t>(i)].size());
    }
    Shape y_shape = x.shape();
    y_shape.push_back(static_cast<int64_t>(widest));
    Tensor y(DType::kString, y_shape), z(DType::kInt64, x.shape());
    for (size_t i = 0; i < parts.size(); ++i) {
      z.data<int64_t>()[i] = static_cast<int64_t>(parts[i].size());
      for (size_t k = 0; k < parts[i].size(); ++k) y.data<std::string>()[i * widest + k] = std::move(parts[i][k]);
    }
    if (ctx.outputs[0]) *ctx.outputs[0] = std::move(y);
    if (ctx.outputs.size() > 1 && ctx.outputs[1]) *ctx.outputs[1] = std::move(z);
  }

 private:
  std::string delimiter_;
  int64_t maxsplit_;
};

// --- StringConcat and Equal: broadcasting pairs -------------------------------

// Calls fn(out_index, a_index, b_index) over the broadcast of two shapes.
template <typename Fn>
void broadcast_pairs(const Shape& a, const Shape& b, const Shape& out, Fn&& fn) {
  const std::vector<int64_t> as = broadcast_strides(a, out), bs = broadcast_strides(b, out);
  const int64_t n = shape_numel(out);
  for (int64_t i = 0; i < n; ++i) {
    int64_t rem = i, ai = 0, bi = 0;
    for (size_t d = out.size(); d-- > 0;) {
      const int64_t c = rem % out[d];
      rem /= out[d];
      ai += c * as[d];
      bi += c * bs[d];
    }
    fn(i, ai, bi);
  }
}

class StringConcatKernel : public Kernel {
 public:
  explicit StringConcatKernel(const ir::Node&) {}
  bool allocates_outputs() const override { return true; }
  std::vector<TensorType> prepare(const PrepareContext& ctx) override {
    out_shape_ = ctx.output_shape(0);  // the schema's broadcast of the two shapes
    return ctx.output_types();
  }
  void run(const RunContext& ctx) const override {
    const Tensor &a = ctx.in(0), &b = ctx.in(1);
    Tensor y(DType::kString, out_shape_);
    broadcast_pairs(a.shape(), b.shape(), out_shape_,
                    [&](int64_t i, int64_t ai, int64_t bi) { y.data<std::string>()[i] = strings(a)[ai] + strings(b)[bi]; });
    *ctx.outputs[0] = std::move(y);
  }

 private:
  Shape out_shape_;
};

class StringEqualKernel : public Kernel {
 public:
  explicit StringEqualKernel(const ir::Node&) {}
  std::vector<TensorType> prepare(const PrepareContext& ctx) override { return ctx.output_types(); }
  void run(const RunContext& ctx) const override {
    const Tensor &a = ctx.in(0), &b = ctx.in(1);
    bool* y = ctx.out(0).data<bool>();
    broadcast_pairs(a.shape(), b.shape(), ctx.out(0).shape(),
                    [&](int64_t i, int64_t ai, int64_t bi) { y[i] = strings(a)[ai] == strings(b)[bi]; });
  }
};

// --- RegexFullMatch ---------------------------------------------------------

class RegexFullMatchKernel : public Kernel {
 public:
  explicit RegexFullMatchKernel(const ir::Node& node) : pattern_(node.attrs.get_string("pattern", "")) {}

  std::vector<TensorType> prepare(const PrepareContext& ctx) override {
    RE2::Options options;
    options.set_log_errors(false);
    regex_ = std::make_shared<RE2>(pattern_, options);
    ANVIL_PREPARE_CHECK(ctx, regex_->ok(), ErrorKind::kInvalidModel, "pattern '{}' is not a valid regular expression: {}",
                        pattern_, regex_->error());
    return ctx.output_types();
  }

  void run(const RunContext& ctx) const override {
    const Tensor& x = ctx.in(0);
    bool* y = ctx.out(0).data<bool>();
    for (int64_t i = 0; i < x.numel(); ++i) y[i] = RE2::FullMatch(strings(x)[i], *regex_);
  }

 private:
  std::string pattern_;
  std::shared_ptr<RE2> regex_;
};

// --- TfIdfVectorizer --------------------------------------------------------

// Counts the pool's n-grams in each row (with up to max_skip_count items
// skipped between an n-gram's items; unigrams counted once), then weighs the
// counts: TF (the count), IDF (the weight where the count is positive) or
// TFIDF (count * weight); weights default to 1.
class TfIdfKernel : public Kernel {
 public:
  explicit TfIdfKernel(const ir::Node& node)
      : mode_(node.attrs.get_string("mode", "TF")),
        min_n_(node.attrs.get_int("min_gram_length", 1)),
        max_n_(node.attrs.get_int("max_gram_length", 1)),
        max_skip_(node.attrs.get_int("max_skip_count", 0)),
        counts_(node.attrs.get_ints("ngram_counts")),
        indexes_(node.attrs.get_ints("ngram_indexes")),
        pool_ints_(node.attrs.get_ints("pool_int64s")),
        pool_strings_(node.attrs.get_strings("pool_strings")),
        weights_(node.attrs.get_floats("weights")) {}

  std::vector<TensorType> prepare(const PrepareContext& ctx) override {
    ANVIL_PREPARE_CHECK(ctx, mode_ == "TF" || mode_ == "IDF" || mode_ == "TFIDF", ErrorKind::kInvalidModel,
                        "mode '{}' is not TF, IDF or TFIDF", mode_);
    ANVIL_PREPARE_CHECK(ctx, min_n_ >= 1 && max_n_ >= min_n_ && max_skip_ >= 0, ErrorKind::kInvalidModel,
                        "gram lengths {}..{} and max_skip_count {} do not make sense", min_n_, max_n_, max_skip_);
    strings_ = ctx.input_dtype(0) == DType::kString;
    const size_t pool = strings_ ? pool_strings_.size() : pool_ints_.size();
    ANVIL_PREPARE_CHECK(ctx, pool > 0, ErrorKind::kInvalidModel, "the pool of {} n-grams is empty",
                        strings_ ? "string" : "integer");
    size_t id = 0;  // the n-gram's position in the pool, which indexes ngram_indexes
    grams_.clear();
    for (size_t i = 0; i < counts_.size(); ++i) {
      const auto n = static_cast<int64_t>(i) + 1;
      const int64_t begin = counts_[i], end = i + 1 < counts_.size() ? counts_[i + 1] : static_cast<int64_t>(pool);
      ANVIL_PREPARE_CHECK(ctx, begin >= 0 && begin <= end && end <= static_cast<int64_t>(pool) && (end - begin) % n == 0,
                          ErrorKind::kInvalidModel, "ngram_counts {} do not split the pool of {}", shape_str(counts_),
                          pool);
      for (int64_t at = begin; at < end; at += n, ++id) {
        ANVIL_PREPARE_CHECK(ctx, id < indexes_.size() && indexes_[id] >= 0 && indexes_[id] < (int64_t{1} << 31),
                            ErrorKind::kInvalidModel, "ngram_indexes does not give n-gram {} an output index", id);
        if (n < min_n_ || n > max_n_) continue;
        std::vector<std::string> key;
        for (int64_t k = 0; k < n; ++k)
          key.push_back(strings_ ? pool_strings_[static_cast<size_t>(at + k)] : std::to_string(pool_ints_[static_cast<size_t>(at + k)]));
        grams_.emplace(std::move(key), indexes_[id]);  // a repeated n-gram keeps its first index
      }
    }
    size_ = 0;
    for (int64_t v : indexes_) size_ = std::max(size_, v + 1);
    ANVIL_PREPARE_CHECK(ctx, weights_.empty() || static_cast<int64_t>(weights_.size()) >= size_,
                        ErrorKind::kInvalidModel, "{} weights for {} outputs", weights_.size(), size_);
    const Shape& x = ctx.input_shape(0);
    ANVIL_PREPARE_CHECK(ctx, x.size() <= 2, ErrorKind::kInvalidArgument, "the input {} must be [C] or [B, C]",
                        shape_str(x));
    rows_ = x.size() == 2 ? x[0] : 1;
    cols_ = x.empty() ? 1 : x.back();
    return {{DType::kFloat32, x.size() == 2 ? Shape{x[0], size_} : Shape{size_}}};
  }

  void run(const RunContext& ctx) const override {
    const Tensor& x = ctx.in(0);
    std::vector<std::string> tokens(static_cast<size_t>(x.numel()));
    for (int64_t i = 0; i < x.numel(); ++i)
      tokens[static_cast<size_t>(i)] = strings_ ? strings(x)[i]
                                                : std::to_string(x.dtype() == DType::kInt32 ? x.data<int32_t>()[i]
                                                                                            : x.data<int64_t>()[i]);
    std::vector<int64_t> count(static_cast<size_t>(rows_ * size_), 0);
    for (int64_t r = 0; r < rows_; ++r) count_row(tokens.data() + r * cols_, count.data() + r * size_);
    float* y = ctx.out(0).data<float>();
    for (int64_t i = 0; i < rows_ * size_; ++i) {
      const float w = weights_.empty() ? 1.f : weights_[static_cast<size_t>(i % size_)];
      const auto c = static_cast<float>(count[static_cast<size_t>(i)]);
      y[i] = mode_ == "TF" ? c : mode_ == "IDF" ? (c > 0 ? w : 0.f) : c * w;
    }
  }

 private:
  void count_row(const std::string* row, int64_t* count) const {
    int64_t first_n = min_n_;
    for (int64_t skip = 1; skip <= max_skip_ + 1; ++skip) {
      for (int64_t start = 0; start + skip * (first_n - 1) < cols_; ++start) {
        std::vector<std::string> gram;
        for (int64_t n = 1, at = start; n <= max_n_ && at < cols_; ++n, at += skip) {
          gram.push_back(row[at]);
          if (n < first_n) continue;
          if (auto it = grams_.find(gram); it != grams_.end()) ++count[it->second];
        }
      }
      if (first_n == 1 && ++first_n > max_n_) break;  // unigrams: once, not once per skip
    }
  }

  std::string mode_;
  int64_t min_n_, max_n_, max_skip_;
  std::vector<int64_t> counts_, indexes_, pool_ints_;
  std::vector<std::string> pool_strings_;
  std::vector<float> weights_;
  std::map<std::vector<std::string>, int64_t> grams_;
  bool strings_ = false;
  int64_t size_ = 0, rows_ = 1, cols_ = 0;
};

}  // namespace

ANVIL_REGISTER_KERNEL_CLASS_TYPED("StringNormalizer", kRef, StringNormalizerKernel, {kStringType});
ANVIL_REGISTER_KERNEL_CLASS_TYPED("StringSplit", kRef, StringSplitKernel, {kStringType});
ANVIL_REGISTER_KERNEL_CLASS_TYPED("StringConcat", kRef, StringConcatKernel, {kStringType, kStringType});
ANVIL_REGISTER_KERNEL_CLASS_TYPED("RegexFullMatch", kRef, RegexFullMatchKernel, {kStringType});
ANVIL_REGISTER_KERNEL_CLASS_TYPED("Equal", kRef, StringEqualKernel, {kStringType, kStringType});
ANVIL_REGISTER_KERNEL_CLASS_TYPED("TfIdfVectorizer", kRef, TfIdfKernel,
                                  {kStringType | dtype_bit(DType::kInt32) | dtype_bit(DType::kInt64)});
ANVIL_REGISTER_OP_VERSIONS("StringNormalizer", 10, 10);
ANVIL_REGISTER_OP_VERSIONS("StringSplit", 20, 20);
ANVIL_REGISTER_OP_VERSIONS("StringConcat", 20, 20);
ANVIL_REGISTER_OP_VERSIONS("RegexFullMatch", 20, 20);
ANVIL_REGISTER_OP_VERSIONS("TfIdfVectorizer", 9, 9);

}  // namespace anvil::kernels
