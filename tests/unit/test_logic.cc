// Comparison, logic and Where kernels (src/kernels/ref/logic.cc) against hand-computed values.
#include <gtest/gtest.h>

#include "anvil/error.h"
#include "kernel_tester.h"

namespace anvil {
namespace {

using testing::f32;
using testing::i64;
using testing::make_tensor;
using testing::run_kernel;
using testing::values;

Tensor bools(Shape shape, const std::vector<bool>& v) {
  Tensor t(DType::kBool, std::move(shape));
  for (size_t i = 0; i < v.size(); ++i) t.data<bool>()[i] = v[i];
  return t;
}

std::vector<bool> bool_values(const Tensor& t) { return std::vector<bool>(t.data<bool>(), t.data<bool>() + t.numel()); }

TEST(Compare, BroadcastsAndGivesBool) {
  Tensor a = f32({2, 3}, {1, 2, 3, 4, 5, 6});
  Tensor b = f32({3}, {2, 2, 7});
  auto eq = run_kernel("Equal", {a, b})[0];
  EXPECT_EQ(eq.dtype(), DType::kBool);
  EXPECT_EQ(eq.shape(), (Shape{2, 3}));
  EXPECT_EQ(bool_values(eq), (std::vector<bool>{false, true, false, false, false, false}));
  EXPECT_EQ(bool_values(run_kernel("Less", {a, b})[0]), (std::vector<bool>{true, false, true, false, false, true}));
  EXPECT_EQ(bool_values(run_kernel("Greater", {a, b})[0]), (std::vector<bool>{false, false, false, true, true, false}));
  EXPECT_EQ(bool_values(run_kernel("LessOrEqual", {a, b})[0]), (std::vector<bool>{true, true, true, false, false, true}));
  EXPECT_EQ(bool_values(run_kernel("GreaterOrEqual", {a, b})[0]),
            (std::vector<bool>{false, true, false, true, true, false}));
  EXPECT_EQ(bool_values(run_kernel("Equal", {i64({2}, {7, -1}), i64({1}, {-1})})[0]),
            (std::vector<bool>{false, true}));
}

TEST(Compare, MismatchedDtypesAreInvalid) {
  EXPECT_EQ(testing::error_kind_of([] { run_kernel("Less", {f32({1}, {1}), i64({1}, {1})}); }),
            ErrorKind::kInvalidModel);
}

TEST(Logic, TruthTables) {
  Tensor a = bools({4}, {false, false, true, true});
  Tensor b = bools({4}, {false, true, false, true});
  EXPECT_EQ(bool_values(run_kernel("And", {a, b})[0]), (std::vector<bool>{false, false, false, true}));
  EXPECT_EQ(bool_values(run_kernel("Or", {a, b})[0]), (std::vector<bool>{false, true, true, true}));
  EXPECT_EQ(bool_values(run_kernel("Xor", {a, b})[0]), (std::vector<bool>{false, true, true, false}));
  EXPECT_EQ(bool_values(run_kernel("Not", {a})[0]), (std::vector<bool>{true, true, false, false}));
  EXPECT_EQ(bool_values(run_kernel("And", {a, bools({1}, {true})})[0]), (std::vector<bool>{false, false, true, true}));
}

// The causal mask of a decoder: Where(tril, scores, -inf-like fill), broadcast over batch.
TEST(Where, ThreeWayBroadcast) {
  Tensor cond = bools({2, 2}, {true, false, true, true});
  Tensor x = f32({2, 2, 2}, {1, 2, 3, 4, 5, 6, 7, 8});
  Tensor y = f32({}, {-100});
  auto out = run_kernel("Where", {cond, x, y})[0];
  EXPECT_EQ(out.shape(), (Shape{2, 2, 2}));
  EXPECT_EQ(values<float>(out), (std::vector<float>{1, -100, 3, 4, 5, -100, 7, 8}));
  auto ints = run_kernel("Where", {bools({3}, {false, true, false}), i64({1}, {9}), i64({3}, {1, 2, 3})})[0];
  EXPECT_EQ(values<int64_t>(ints), (std::vector<int64_t>{1, 9, 3}));
}

TEST(Where, ConditionMustBeBool) {
  EXPECT_EQ(testing::error_kind_of([] { run_kernel("Where", {f32({1}, {1}), f32({1}, {1}), f32({1}, {2})}); }),
            ErrorKind::kInvalidModel);
}

}  // namespace
}  // namespace anvil
