// Tests of the reference shape kernels (src/kernels/ref/shape_ops.cc) against hand-computed values.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <numeric>

#include "anvil/error.h"
#include "kernel_tester.h"

namespace anvil {
namespace {

using testing::f32;
using testing::error_kind_of;
using testing::opset;
using testing::values;
using testing::attrs;
using testing::iota_f;
using testing::i64;
using testing::run_kernel;

TEST(ShapeOps, ReshapeLikeKernelsAliasTheirInput) {
  for (const char* op : {"Flatten", "Reshape", "Squeeze", "Unsqueeze", "Identity", "Dropout"}) {
    ir::Node node;
    node.op_type = op;
    auto entries = kernels::Registry::global().find("", op);
    ASSERT_FALSE(entries.empty()) << op;
    EXPECT_EQ(entries.back()->factory(node)->output_aliases_input(), 0) << op;
  }
}

TEST(Flatten, AxisDefaultZeroAndNegative) {
  Tensor x = f32({2, 3, 4}, iota_f(24));
  EXPECT_EQ(run_kernel("Flatten", {x})[0].shape(), (Shape{2, 12}));
  EXPECT_EQ(run_kernel("Flatten", {x}, attrs({{"axis", int64_t{0}}}))[0].shape(), (Shape{1, 24}));
  EXPECT_EQ(run_kernel("Flatten", {x}, attrs({{"axis", int64_t{3}}}))[0].shape(), (Shape{24, 1}));
  std::vector<Tensor> out = run_kernel("Flatten", {x}, attrs({{"axis", int64_t{-1}}}));
  EXPECT_EQ(out[0].shape(), (Shape{6, 4}));
  EXPECT_EQ(values<float>(out[0]), iota_f(24));
  EXPECT_EQ(error_kind_of([&] { run_kernel("Flatten", {x}, attrs({{"axis", int64_t{4}}})); }),
            ErrorKind::kInvalidModel);
}

TEST(Reshape, ZeroCopiesAndMinusOneInfers) {
  Tensor x = f32({2, 3, 4}, iota_f(24));
  std::vector<Tensor> out = run_kernel("Reshape", {x, i64({3}, {0, -1, 2})});
  EXPECT_EQ(out[0].shape(), (Shape{2, 6, 2}));
  EXPECT_EQ(values<float>(out[0]), iota_f(24));
  EXPECT_EQ(run_kernel("Reshape", {x, i64({2}, {-1, 4})})[0].shape(), (Shape{6, 4}));
  EXPECT_EQ(run_kernel("Reshape", {f32({1, 1}, {3.f}), i64({0}, {})})[0].shape(), Shape{});
}

TEST(Reshape, AllowZeroKeepsZeroDims) {
  Tensor x(DType::kFloat32, {0, 3, 4});
  EXPECT_EQ(run_kernel("Reshape", {x, i64({3}, {3, 4, 0})}, attrs({{"allowzero", int64_t{1}}}), opset(14))[0].shape(),
            (Shape{3, 4, 0}));
  // Before opset 14 allowzero does not exist and the 0 copies the input's dimension.
  Tensor y = f32({2, 3, 4}, iota_f(24));
  ir::Attributes allowzero = attrs({{"allowzero", int64_t{1}}});
  EXPECT_EQ(run_kernel("Reshape", {y, i64({2}, {0, 12})}, allowzero, opset(13))[0].shape(), (Shape{2, 12}));
  EXPECT_EQ(error_kind_of([&] { run_kernel("Reshape", {y, i64({2}, {0, 12})}, allowzero, opset(14)); }),
            ErrorKind::kInvalidArgument);
  EXPECT_EQ(error_kind_of([&] { run_kernel("Reshape", {y, i64({2}, {0, -1})}, allowzero, opset(14)); }),
            ErrorKind::kInvalidModel);
}

TEST(Reshape, Errors) {
  Tensor x = f32({2, 3}, iota_f(6));
  std::string msg;
  EXPECT_EQ(error_kind_of([&] { run_kernel("Reshape", {x, i64({2}, {4, 2})}); }, &msg), ErrorKind::kInvalidArgument);
  EXPECT_NE(msg.find("Reshape 'test_Reshape'"), std::string::npos) << msg;
  EXPECT_EQ(error_kind_of([&] { run_kernel("Reshape", {x, i64({2}, {-1, 4})}); }), ErrorKind::kInvalidArgument);
  EXPECT_EQ(error_kind_of([&] { run_kernel("Reshape", {x, i64({2}, {-1, -1})}); }), ErrorKind::kInvalidModel);
  EXPECT_EQ(error_kind_of([&] { run_kernel("Reshape", {x, i64({3}, {1, 1, 0})}); }), ErrorKind::kInvalidModel);
  testing::KernelOptions not_constant;
  not_constant.constant_inputs = {false, false};
  EXPECT_EQ(error_kind_of([&] { run_kernel("Reshape", {x, i64({2}, {3, 2})}, {}, not_constant); }),
            ErrorKind::kUnsupported);
}

TEST(Squeeze, AxesInputAttributeAndDefault) {
  Tensor x = f32({1, 3, 1, 2}, iota_f(6));
  EXPECT_EQ(run_kernel("Squeeze", {x, i64({1}, {-2})})[0].shape(), (Shape{1, 3, 2}));
  EXPECT_EQ(run_kernel("Squeeze", {x})[0].shape(), (Shape{3, 2}));
  EXPECT_EQ(run_kernel("Squeeze", {x, i64({0}, {})})[0].shape(), (Shape{3, 2}));
  std::vector<Tensor> out = run_kernel("Squeeze", {x}, attrs({{"axes", std::vector<int64_t>{0}}}), opset(11));
  EXPECT_EQ(out[0].shape(), (Shape{3, 1, 2}));
  EXPECT_EQ(values<float>(out[0]), iota_f(6));
  EXPECT_EQ(error_kind_of([&] { run_kernel("Squeeze", {x, i64({1}, {1})}); }), ErrorKind::kInvalidArgument);
  EXPECT_EQ(error_kind_of([&] { run_kernel("Squeeze", {x, i64({2}, {0, -4})}); }), ErrorKind::kInvalidModel);
}

TEST(Unsqueeze, NegativeUnsortedAndAttributeAxes) {
  Tensor x = f32({3, 4}, iota_f(12));
  EXPECT_EQ(run_kernel("Unsqueeze", {x, i64({1}, {-1})})[0].shape(), (Shape{3, 4, 1}));
  EXPECT_EQ(run_kernel("Unsqueeze", {x, i64({3}, {4, 0, 2})})[0].shape(), (Shape{1, 3, 1, 4, 1}));
  EXPECT_EQ(run_kernel("Unsqueeze", {x}, attrs({{"axes", std::vector<int64_t>{1}}}), opset(11))[0].shape(),
            (Shape{3, 1, 4}));
  EXPECT_EQ(run_kernel("Unsqueeze", {f32({}, {5.f}), i64({1}, {0})})[0].shape(), (Shape{1}));
  EXPECT_EQ(error_kind_of([&] { run_kernel("Unsqueeze", {x}); }), ErrorKind::kInvalidModel);
  EXPECT_EQ(error_kind_of([&] { run_kernel("Unsqueeze", {x, i64({1}, {3})}); }), ErrorKind::kInvalidArgument);
}

TEST(Identity, CopiesAnyDtype) {
  Tensor x = i64({3}, {7, -8, 9});
  std::vector<Tensor> out = run_kernel("Identity", {x});
  EXPECT_EQ(out[0].dtype(), DType::kInt64);
  EXPECT_EQ(values<int64_t>(out[0]), (std::vector<int64_t>{7, -8, 9}));
}

TEST(Dropout, InferencePassesThroughWithTrueMask) {
  Tensor x = f32({2, 2}, {1, -2, 3, -4});
  Tensor ratio = f32({}, {0.5f});
  std::vector<Tensor> out = run_kernel("Dropout", {x, ratio}, {}, opset(13, 2));
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(values<float>(out[0]), (std::vector<float>{1, -2, 3, -4}));
  EXPECT_EQ(out[1].dtype(), DType::kBool);
  EXPECT_EQ(values<bool>(out[1]), (std::vector<bool>{true, true, true, true}));
  // Opsets 7-9 typed the mask like the data.
  out = run_kernel("Dropout", {x}, attrs({{"ratio", 0.3f}}), opset(7, 2));
  EXPECT_EQ(out[1].dtype(), DType::kFloat32);
  EXPECT_EQ(values<float>(out[1]), (std::vector<float>{1, 1, 1, 1}));
  EXPECT_EQ(run_kernel("Dropout", {x}, {}, opset(12)).size(), 1u);
}

// Training mode drops each element with probability `ratio` and scales the kept ones by 1 / (1 - ratio).
TEST(Dropout, TrainingModeDropsAndScales) {
  Tensor x = f32({10000}, std::vector<float>(10000, 1.f));
  Tensor yes = testing::make_tensor<bool>(DType::kBool, {}, {true});
  Tensor no = testing::make_tensor<bool>(DType::kBool, {}, {false});
  testing::KernelOptions o = opset(13, 2);
  o.constant_inputs = {false, true, true};
  EXPECT_EQ(values<float>(run_kernel("Dropout", {f32({2}, {1, 2}), Tensor(), no}, {}, o)[0]),
            (std::vector<float>{1, 2}));
  ir::Attributes seeded = attrs({{"seed", int64_t{7}}});
  std::vector<Tensor> out = run_kernel("Dropout", {x, f32({}, {0.25f}), yes}, seeded, o);
  int64_t dropped = 0;
  for (int64_t i = 0; i < x.numel(); ++i) {
    const float v = out[0].data<float>()[i];
    const bool kept = out[1].data<bool>()[i];
    ASSERT_TRUE(kept ? std::fabs(v - 1.f / 0.75f) < 1e-6f : v == 0.f) << i << ": " << v;
    dropped += !kept;
  }
  EXPECT_NEAR(static_cast<double>(dropped) / 10000.0, 0.25, 0.02);  // about 5 standard deviations
  // The same seed draws the same mask; ratio 0 keeps everything; ratio 1 is not a probability to keep.
  EXPECT_EQ(values<bool>(run_kernel("Dropout", {x, f32({}, {0.25f}), yes}, seeded, o)[1]), values<bool>(out[1]));
  EXPECT_EQ(values<float>(run_kernel("Dropout", {x, f32({}, {0.f}), yes}, seeded, o)[0]), values<float>(x));
  EXPECT_EQ(error_kind_of([&] { run_kernel("Dropout", {x, f32({}, {1.f}), yes}, seeded, o); }),
            ErrorKind::kInvalidArgument);
}

TEST(Shape, StartEndClamp) {
  Tensor x(DType::kFloat32, {2, 3, 4});
  EXPECT_EQ(values<int64_t>(run_kernel("Shape", {x})[0]), (std::vector<int64_t>{2, 3, 4}));
  auto shape = [&](int64_t start, int64_t end) {
    return values<int64_t>(run_kernel("Shape", {x}, attrs({{"start", start}, {"end", end}}), opset(15))[0]);
  };
  EXPECT_EQ(shape(1, -1), (std::vector<int64_t>{3}));
  EXPECT_EQ(shape(-10, 10), (std::vector<int64_t>{2, 3, 4}));
  EXPECT_EQ(shape(2, 1), (std::vector<int64_t>{}));
  // Before opset 15 the attributes do not exist.
  EXPECT_EQ(values<int64_t>(run_kernel("Shape", {x}, attrs({{"start", int64_t{1}}}), opset(13))[0]),
            (std::vector<int64_t>{2, 3, 4}));
  EXPECT_EQ(run_kernel("Shape", {f32({}, {1.f})})[0].shape(), (Shape{0}));
}

TEST(Constant, TensorAndScalarAttributes) {
  Tensor v = testing::make_tensor<int32_t>(DType::kInt32, {2}, {4, -5});
  std::vector<Tensor> out = run_kernel("Constant", {}, attrs({{"value", v}}));
  EXPECT_EQ(out[0].dtype(), DType::kInt32);
  EXPECT_EQ(values<int32_t>(out[0]), (std::vector<int32_t>{4, -5}));
  out = run_kernel("Constant", {}, attrs({{"value_floats", std::vector<float>{1.5f, 2.5f}}}));
  EXPECT_EQ(out[0].shape(), (Shape{2}));
  EXPECT_EQ(values<float>(out[0]), (std::vector<float>{1.5f, 2.5f}));
  out = run_kernel("Constant", {}, attrs({{"value_int", int64_t{7}}}));
  EXPECT_EQ(out[0].shape(), Shape{});
  EXPECT_EQ(values<int64_t>(out[0]), (std::vector<int64_t>{7}));
  out = run_kernel("Constant", {}, attrs({{"value_float", 0.25f}}));
  EXPECT_EQ(values<float>(out[0]), (std::vector<float>{0.25f}));
  EXPECT_EQ(error_kind_of([&] { run_kernel("Constant", {}); }), ErrorKind::kInvalidModel);
  EXPECT_EQ(error_kind_of([&] { run_kernel("Constant", {}, attrs({{"value_string", std::string("a")}})); }),
            ErrorKind::kUnsupported);
}

TEST(ConstantOfShape, DefaultAndTypedValue) {
  std::vector<Tensor> out = run_kernel("ConstantOfShape", {i64({2}, {2, 3})});
  EXPECT_EQ(out[0].dtype(), DType::kFloat32);
  EXPECT_EQ(values<float>(out[0]), std::vector<float>(6, 0.f));
  out = run_kernel("ConstantOfShape", {i64({1}, {3})}, attrs({{"value", i64({1}, {-9})}}));
  EXPECT_EQ(out[0].dtype(), DType::kInt64);
  EXPECT_EQ(values<int64_t>(out[0]), (std::vector<int64_t>{-9, -9, -9}));
  out = run_kernel("ConstantOfShape", {i64({0}, {})}, attrs({{"value", f32({1}, {2.f})}}));
  EXPECT_EQ(out[0].shape(), Shape{});
  EXPECT_EQ(values<float>(out[0]), (std::vector<float>{2.f}));
  EXPECT_EQ(run_kernel("ConstantOfShape", {i64({2}, {4, 0})})[0].numel(), 0);
  EXPECT_EQ(error_kind_of([&] { run_kernel("ConstantOfShape", {i64({1}, {-1})}); }), ErrorKind::kInvalidArgument);
  ir::Attributes two_values = attrs({{"value", f32({2}, {1, 2})}});
  EXPECT_EQ(error_kind_of([&] { run_kernel("ConstantOfShape", {i64({1}, {2})}, two_values); }),
            ErrorKind::kInvalidModel);
}

}  // namespace
}  // namespace anvil
