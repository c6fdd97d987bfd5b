// Tests of the string tensors and the text ops (src/kernels/ref/text.cc), the
// ai.onnx.ml ops (ml.cc), against results worked out by hand from the ONNX
// definitions (Python's str.split for StringSplit), and the inputs they refuse.
#include <gtest/gtest.h>

#include <onnx/onnx_pb.h>

#include "kernel_tester.h"
#include "onnx/tensor_proto.h"

namespace anvil {
namespace {

using testing::attrs;
using testing::error_kind_of;
using testing::f32;
using testing::i64;
using testing::make_tensor;
using testing::opset;
using testing::run_kernel;
using testing::values;

using Strings = std::vector<std::string>;

Tensor str(Shape shape, const Strings& v) { return make_tensor<std::string>(DType::kString, std::move(shape), v); }

testing::KernelOptions ml(int version) {
  testing::KernelOptions o = opset(version);
  o.domain = "ai.onnx.ml";
  return o;
}

TEST(StringTensor, ClonesAndRoundTripsThroughTensorProto) {
  Tensor t = str({2}, {"héllo", ""});
  Tensor c = t.clone();
  t.data<std::string>()[0] = "changed";
  EXPECT_EQ(values<std::string>(c), (Strings{"héllo", ""}));
  onnx::TensorProto p;
  onnx_io::tensor_to_proto(c, "s", &p);
  EXPECT_EQ(p.data_type(), onnx::TensorProto::STRING);
  EXPECT_EQ(values<std::string>(onnx_io::tensor_from_proto(p, "")), (Strings{"héllo", ""}));
  p.add_string_data("one too many");
  EXPECT_EQ(error_kind_of([&] { onnx_io::tensor_from_proto(p, ""); }), ErrorKind::kInvalidModel);
}

TEST(StringNormalizer, DropsStopwordsAndChangesCase) {
  ir::Attributes a = attrs({{"case_change_action", std::string("UPPER")},
                            {"stopwords", std::vector<std::string>{"monday"}}});
  std::vector<Tensor> y = run_kernel("StringNormalizer", {str({4}, {"Monday", "tuesday", "über", "monday"})}, a, opset(10));
  // Case-insensitive by default: both Mondays go; ü upper-cases under the UTF-8 locale.
  EXPECT_EQ(values<std::string>(y[0]), (Strings{"TUESDAY", "ÜBER"}));
  ir::Attributes sensitive = attrs({{"is_case_sensitive", int64_t{1}}, {"stopwords", std::vector<std::string>{"monday"}}});
  y = run_kernel("StringNormalizer", {str({1, 2}, {"Monday", "monday"})}, sensitive, opset(10));
  EXPECT_EQ(y[0].shape(), (Shape{1, 1}));
  EXPECT_EQ(values<std::string>(y[0]), (Strings{"Monday"}));
  y = run_kernel("StringNormalizer", {str({1}, {"monday"})}, sensitive, opset(10));
  EXPECT_EQ(values<std::string>(y[0]), (Strings{""}));  // nothing left: one empty string
  EXPECT_EQ(error_kind_of([&] { run_kernel("StringNormalizer", {str({2, 1}, {"a", "b"})}, {}, opset(10)); }),
            ErrorKind::kInvalidArgument);
}

TEST(StringSplit, PythonSplitSemantics) {
  std::vector<Tensor> y = run_kernel("StringSplit", {str({2}, {"  a b  c ", "d"})}, {}, opset(20, 2));
  EXPECT_EQ(y[0].shape(), (Shape{2, 3}));
  EXPECT_EQ(values<std::string>(y[0]), (Strings{"a", "b", "c", "d", "", ""}));
  EXPECT_EQ(values<int64_t>(y[1]), (std::vector<int64_t>{3, 1}));
  y = run_kernel("StringSplit", {str({1}, {"1,,2,3"})},
                 attrs({{"delimiter", std::string(",")}, {"maxsplit", int64_t{2}}}), opset(20, 2));
  EXPECT_EQ(values<std::string>(y[0]), (Strings{"1", "", "2,3"}));
  // Python: " x  y z ".split(None, 1) == ["x", "y z "].
  y = run_kernel("StringSplit", {str({1}, {" x  y z "})}, attrs({{"maxsplit", int64_t{1}}}), opset(20, 2));
  EXPECT_EQ(values<std::string>(y[0]), (Strings{"x", "y z "}));
}

TEST(StringConcat, Broadcasts) {
  std::vector<Tensor> y = run_kernel("StringConcat", {str({2, 1}, {"a", "b"}), str({2}, {"x", "yz"})}, {}, opset(20));
  EXPECT_EQ(y[0].shape(), (Shape{2, 2}));
  EXPECT_EQ(values<std::string>(y[0]), (Strings{"ax", "ayz", "bx", "byz"}));
}

TEST(RegexFullMatch, MatchesWholeStringsAndRefusesBadPatterns) {
  std::vector<Tensor> y = run_kernel("RegexFullMatch", {str({3}, {"www.a.com", "xwww.a.com", "www.com"})},
                                     attrs({{"pattern", std::string(R"(www\.\w+\.com)")}}), opset(20));
  EXPECT_EQ(values<bool>(y[0]), (std::vector<bool>{true, false, false}));
  EXPECT_EQ(error_kind_of([&] {
              run_kernel("RegexFullMatch", {str({1}, {"a"})}, attrs({{"pattern", std::string("(unclosed")}}), opset(20));
            }),
            ErrorKind::kInvalidModel);
}

// Strings are objects: a cast between string tensors copies them (a byte copy
// freed them twice; found by the model-loader fuzzer).
TEST(CastLike, StringToStringCopiesTheStrings) {
  Tensor x = str({2}, {"a long string that does not fit the small-string buffer", "b"});
  std::vector<Tensor> y = run_kernel("CastLike", {x, str({1}, {""})}, {}, opset(15));
  x.data<std::string>()[0] = "changed";
  EXPECT_EQ(values<std::string>(y[0]), (Strings{"a long string that does not fit the small-string buffer", "b"}));
  y = run_kernel("ArrayFeatureExtractor", {str({1, 2}, {"p", "q"}), i64({1}, {1})}, {}, ml(1));
  EXPECT_EQ(values<std::string>(y[0]), (Strings{"q"}));
}

TEST(Equal, Strings) {
  std::vector<Tensor> y = run_kernel("Equal", {str({3}, {"a", "b", "c"}), str({1}, {"b"})}, {}, opset(19));
  EXPECT_EQ(values<bool>(y[0]), (std::vector<bool>{false, true, false}));
}

// The ONNX documentation's example: pool unigrams [2, 3, 5, 4] then bigrams
// [5, 6], [7, 8], [6, 7]; bigrams may skip up to max_skip_count items.
TEST(TfIdfVectorizer, CountsNgramsWithSkips) {
  ir::Attributes a = attrs({{"mode", std::string("TF")},
                            {"min_gram_length", int64_t{2}},
                            {"max_gram_length", int64_t{2}},
                            {"max_skip_count", int64_t{0}},
                            {"ngram_counts", std::vector<int64_t>{0, 4}},
                            {"ngram_indexes", std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6}},
                            {"pool_int64s", std::vector<int64_t>{2, 3, 5, 4, 5, 6, 7, 8, 6, 7}}});
  Tensor x = make_tensor<int32_t>(DType::kInt32, {12}, {1, 1, 3, 3, 3, 7, 8, 6, 7, 5, 6, 8});
  std::vector<Tensor> y = run_kernel("TfIdfVectorizer", {x}, a, opset(9));
  // Only bigrams count: [7, 8] once, [6, 7] once, [5, 6] once.
  EXPECT_EQ(values<float>(y[0]), (std::vector<float>{0, 0, 0, 0, 1, 1, 1}));
  a.set("max_skip_count", int64_t{5});
  y = run_kernel("TfIdfVectorizer", {x}, a, opset(9));
  // With up to 5 skipped: 7s at 5 and 8, 8s at 6 and 11 pair as (5, 6), (5, 11) and (8, 11).
  EXPECT_EQ(values<float>(y[0]), (std::vector<float>{0, 0, 0, 0, 1, 3, 1}));
  a.set("ngram_counts", std::vector<int64_t>{0, 3});  // 3 unigram items leave an odd number of bigram items
  EXPECT_EQ(error_kind_of([&] { run_kernel("TfIdfVectorizer", {x}, a, opset(9)); }), ErrorKind::kInvalidModel);
}

TEST(LabelEncoder, MapsKeysToValuesWithADefault) {
  ir::Attributes a = attrs({{"keys_strings", std::vector<std::string>{"a", "b"}},
                            {"values_int64s", std::vector<int64_t>{7, 8}},
                            {"default_int64", int64_t{-5}}});
  std::vector<Tensor> y = run_kernel("LabelEncoder", {str({3}, {"b", "z", "a"})}, a, ml(4));
  EXPECT_EQ(values<int64_t>(y[0]), (std::vector<int64_t>{8, -5, 7}));
  ir::Attributes to_strings = attrs({{"keys_floats", std::vector<float>{0.f, 1.5f}},
                                     {"values_strings", std::vector<std::string>{"zero", "one and a half"}}});
  y = run_kernel("LabelEncoder", {f32({3}, {1.5f, -0.f, 2.f})}, to_strings, ml(4));
  EXPECT_EQ(values<std::string>(y[0]), (Strings{"one and a half", "zero", "_Unused"}));
  a.set("keys_int64s", std::vector<int64_t>{1, 2});  // two key lists
  EXPECT_EQ(error_kind_of([&] { run_kernel("LabelEncoder", {str({1}, {"a"})}, a, ml(4)); }), ErrorKind::kInvalidModel);
}

// One tree: x0 <= 0.5 goes to the true branch, else to leaf 1 (weight 2, target 1).
ir::Attributes one_tree(bool true_is_leaf) {
  Tensor modes = make_tensor<uint8_t>(DType::kUInt8, {1}, {0});
  return attrs({{"n_targets", int64_t{2}},
                {"nodes_featureids", std::vector<int64_t>{0}},
                {"nodes_modes", modes},
                {"nodes_splits", f32({1}, {0.5f})},
                {"nodes_truenodeids", std::vector<int64_t>{0}},
                {"nodes_trueleafs", std::vector<int64_t>{true_is_leaf ? 1 : 0}},
                {"nodes_falsenodeids", std::vector<int64_t>{1}},
                {"nodes_falseleafs", std::vector<int64_t>{1}},
                {"leaf_targetids", std::vector<int64_t>{0, 1}},
                {"leaf_weights", f32({2}, {1, 2})},
                {"tree_roots", std::vector<int64_t>{0}}});
}

TEST(TreeEnsemble, WalksToLeavesAndRefusesCycles) {
  // The true branch is leaf 0 (weight 1, target 0).
  std::vector<Tensor> y = run_kernel("TreeEnsemble", {f32({2, 1}, {0.25f, 0.75f})}, one_tree(true), ml(5));
  EXPECT_EQ(y[0].shape(), (Shape{2, 2}));
  EXPECT_EQ(values<float>(y[0]), (std::vector<float>{1, 0, 0, 2}));
  // The true branch is node 0 itself: a row going there never reaches a leaf.
  EXPECT_EQ(error_kind_of([&] { run_kernel("TreeEnsemble", {f32({1, 1}, {0.25f})}, one_tree(false), ml(5)); }),
            ErrorKind::kInvalidModel);
}

TEST(ArrayFeatureExtractor, PicksColumns) {
  std::vector<Tensor> y =
      run_kernel("ArrayFeatureExtractor", {f32({2, 3}, {1, 2, 3, 4, 5, 6}), i64({2}, {2, 0})}, {}, ml(1));
  EXPECT_EQ(y[0].shape(), (Shape{2, 2}));
  EXPECT_EQ(values<float>(y[0]), (std::vector<float>{3, 1, 6, 4}));
  EXPECT_EQ(error_kind_of([&] {
              run_kernel("ArrayFeatureExtractor", {f32({3}, {1, 2, 3}), i64({1}, {3})}, {}, ml(1));
            }),
            ErrorKind::kInvalidArgument);
}

}  // namespace
}  // namespace anvil
