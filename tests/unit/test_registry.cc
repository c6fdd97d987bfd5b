// The kernel registry: selection by op version and input dtypes, best backend first.
#include <gtest/gtest.h>

#include "anvil/error.h"
#include "ir/graph.h"
#include "kernels/registry.h"

namespace anvil {
namespace {

using kernels::Backend;
using kernels::TensorType;

kernels::KernelFactory null_factory() {
  return [](const ir::Node&) -> std::unique_ptr<kernels::Kernel> { return nullptr; };
}

ir::Node make_node(ir::Graph& g, const std::string& op, int opset, size_t inputs) {
  std::vector<ir::Value*> in;
  for (size_t i = 0; i < inputs; ++i) in.push_back(g.add_input("x" + std::to_string(i), DType::kFloat32, {1}));
  ir::Node* n = g.add_node(op, in, 1, "n");
  n->opset = opset;
  return *n;
}

std::vector<Backend> backends(const std::vector<const kernels::KernelEntry*>& entries) {
  std::vector<Backend> b;
  for (const auto* e : entries) b.push_back(e->backend);
  return b;
}

TEST(Registry, SelectsByInputDTypesBestBackendFirst) {
  kernels::Registry r;
  r.add({"Op", "", Backend::kRef, null_factory(), {{kNumeric}}});
  r.add({"Op", "", Backend::kDnnl, null_factory(), {{kFloat32Only}}});
  ir::Graph g;
  ir::Node n = make_node(g, "Op", 17, 2);
  EXPECT_EQ(backends(r.select(n, {{DType::kFloat32, {1}}, {DType::kFloat32, {1}}})),
            (std::vector<Backend>{Backend::kDnnl, Backend::kRef}));
  EXPECT_EQ(backends(r.select(n, {{DType::kFloat64, {1}}, {DType::kFloat64, {1}}})),
            (std::vector<Backend>{Backend::kRef}));
  // The last mask covers further inputs: a float32 first input with an int32 second leaves only ref.
  EXPECT_EQ(backends(r.select(n, {{DType::kFloat32, {1}}, {DType::kInt32, {1}}})), (std::vector<Backend>{Backend::kRef}));
}

TEST(Registry, PerInputMasksAndOmittedInputs) {
  kernels::Registry r;
  r.add({"Op", "", Backend::kRef, null_factory(), {{kFloats, kInt32And64}}});
  ir::Graph g;
  ir::Node n = make_node(g, "Op", 17, 3);
  EXPECT_EQ(r.select(n, {{DType::kFloat32, {1}}, {}, {DType::kInt64, {1}}}).size(), 1u);
  EXPECT_THROW(r.select(n, {{DType::kFloat32, {1}}, {DType::kFloat32, {1}}}), Error);
}

TEST(Registry, NoMatchingDTypeIsUnsupportedAndSaysWhatIsTaken) {
  kernels::Registry r;
  r.add({"Op", "", Backend::kDnnl, null_factory(), {{kFloat32Only}}});
  ir::Graph g;
  ir::Node n = make_node(g, "Op", 17, 1);
  try {
    r.select(n, {{DType::kInt32, {1}}});
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kUnsupported);
    const std::string m = e.what();
    EXPECT_NE(m.find("'n'"), std::string::npos) << m;
    EXPECT_NE(m.find("input dtypes (int32)"), std::string::npos) << m;
    EXPECT_NE(m.find("(float32...) on dnnl"), std::string::npos) << m;
  }
}

TEST(Registry, EntriesCoverTheirOpVersions) {
  kernels::Registry r;
  kernels::KernelEntry old_pad{"Pad", "", Backend::kRef, null_factory(), {}, 2, 18};
  kernels::KernelEntry new_pad{"Pad", "", Backend::kDnnl, null_factory(), {}, 19, 21};
  r.add(old_pad);
  r.add(new_pad);
  ir::Graph g;
  // Pad's versions are 1, 2, 11, 13, 18, 19, 21: opset 17 runs version 13, opset 19 version 19.
  EXPECT_EQ(backends(r.select(make_node(g, "Pad", 17, 1), {{DType::kFloat32, {1}}})),
            (std::vector<Backend>{Backend::kRef}));
  ir::Graph g2;
  EXPECT_EQ(backends(r.select(make_node(g2, "Pad", 19, 1), {{DType::kFloat32, {1}}})),
            (std::vector<Backend>{Backend::kDnnl}));
}

TEST(Registry, GlobalOneDnnKernelsTakeFloat32Only) {
  ir::Graph g;
  ir::Node n = make_node(g, "Conv", 17, 2);
  auto f32 = kernels::Registry::global().select(n, {{DType::kFloat32, {1}}, {DType::kFloat32, {1}}});
  auto f64 = kernels::Registry::global().select(n, {{DType::kFloat64, {1}}, {DType::kFloat64, {1}}});
  EXPECT_EQ(f32.front()->backend, Backend::kDnnl);
  EXPECT_EQ(backends(f64), (std::vector<Backend>{Backend::kRef}));
}

}  // namespace
}  // namespace anvil
