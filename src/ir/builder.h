// ir::GraphBuilder — builds networks in C++ with seeded random weights (the zoo,
// tests). Weights use He-style scaling so activations stay in a sane range.
//
//   ir::GraphBuilder b(/*seed=*/42);
//   ir::Value* x = b.input("input", {1, 3, 224, 224});
//   x = b.relu(b.batch_norm(b.conv(x, 3, 64, 7, 2, 3)));
//   b.output(b.gemm(b.flatten(b.global_average_pool(x)), 64, 10));
//   std::unique_ptr<ir::Graph> g = b.finish();
#pragma once

#include <memory>
#include <random>
#include <string>

#include "ir/graph.h"

namespace anvil::ir {

class GraphBuilder {
 public:
  explicit GraphBuilder(uint64_t seed, int opset = 17);

  Value* input(const std::string& name, Shape shape, DType dtype = DType::kFloat32);
  void output(Value* v, const std::string& name = "");

  Value* conv(Value* x, int64_t cin, int64_t cout, int64_t kernel, int64_t stride, int64_t pad, int64_t group = 1,
              bool bias = false);
  Value* batch_norm(Value* x, int64_t channels);
  Value* relu(Value* x);
  Value* clip(Value* x, float lo, float hi);
  Value* add(Value* a, Value* b);
  Value* max_pool(Value* x, int64_t kernel, int64_t stride, int64_t pad);
  Value* global_average_pool(Value* x);
  Value* flatten(Value* x);
  Value* gemm(Value* x, int64_t in_features, int64_t out_features);

  Graph& graph() { return *graph_; }
  std::unique_ptr<Graph> finish();

 private:
  Tensor random_tensor(Shape shape, float scale);
  Tensor uniform_tensor(Shape shape, float lo, float hi);
  Value* constant(const std::string& base, Tensor t);
  Node* node(const std::string& op, std::vector<Value*> inputs);

  std::unique_ptr<Graph> graph_;
  std::mt19937_64 rng_;
  int counter_ = 0;
};

}  // namespace anvil::ir
