// The built-in models (anvil/zoo.h): torchvision architectures with seeded weights.
#include "anvil/zoo.h"

#include "core/check.h"
#include "ir/builder.h"

namespace anvil {

namespace {

using ir::GraphBuilder;
using ir::Value;

constexpr uint64_t kZooSeed = 20261202;

Value* basic_block(GraphBuilder& b, Value* x, int64_t cin, int64_t cout, int64_t stride) {
  Value* y = b.relu(b.batch_norm(b.conv(x, cin, cout, 3, stride, 1), cout));
  y = b.batch_norm(b.conv(y, cout, cout, 3, 1, 1), cout);
  Value* shortcut = x;
  if (stride != 1 || cin != cout) shortcut = b.batch_norm(b.conv(x, cin, cout, 1, stride, 0), cout);
  return b.relu(b.add(y, shortcut));
}

std::unique_ptr<ir::Graph> resnet18(int batch) {
  GraphBuilder b(kZooSeed);
  Value* x = b.input("input", {batch, 3, 224, 224});
  x = b.max_pool(b.relu(b.batch_norm(b.conv(x, 3, 64, 7, 2, 3), 64)), 3, 2, 1);
  int64_t cin = 64;
  for (int64_t cout : {64, 128, 256, 512}) {
    x = basic_block(b, x, cin, cout, cout == 64 ? 1 : 2);
    x = basic_block(b, x, cout, cout, 1);
    cin = cout;
  }
  b.output(b.gemm(b.flatten(b.global_average_pool(x)), 512, 1000), "output");
  return b.finish();
}

Value* conv_bn(GraphBuilder& b, Value* x, int64_t cin, int64_t cout, int64_t k, int64_t stride, int64_t group,
               bool relu6) {
  Value* y = b.batch_norm(b.conv(x, cin, cout, k, stride, (k - 1) / 2, group), cout);
  return relu6 ? b.clip(y, 0.f, 6.f) : y;
}

std::unique_ptr<ir::Graph> mobilenet_v2(int batch) {
  GraphBuilder b(kZooSeed);
  Value* x = b.input("input", {batch, 3, 224, 224});
  x = conv_bn(b, x, 3, 32, 3, 2, 1, true);
  struct Stage { int64_t expand, channels, repeats, stride; };
  const Stage stages[] = {{1, 16, 1, 1}, {6, 24, 2, 2}, {6, 32, 3, 2}, {6, 64, 4, 2},
                          {6, 96, 3, 1}, {6, 160, 3, 2}, {6, 320, 1, 1}};
  int64_t cin = 32;
  for (const Stage& s : stages) {
    for (int64_t r = 0; r < s.repeats; ++r) {
      int64_t stride = r == 0 ? s.stride : 1, hidden = cin * s.expand;
      Value* y = x;
      if (s.expand != 1) y = conv_bn(b, y, cin, hidden, 1, 1, 1, true);
      y = conv_bn(b, y, hidden, hidden, 3, stride, hidden, true);
      y = conv_bn(b, y, hidden, s.channels, 1, 1, 1, false);
      x = stride == 1 && cin == s.channels ? b.add(x, y) : y;
      cin = s.channels;
    }
  }
  x = conv_bn(b, x, cin, 1280, 1, 1, 1, true);
  b.output(b.gemm(b.flatten(b.global_average_pool(x)), 1280, 1000), "output");
  return b.finish();
}

}  // namespace

std::vector<std::string> zoo_names() { return {"resnet18", "mobilenet_v2"}; }

Session zoo_session(const std::string& name, const SessionOptions& options, int batch) {
  ANVIL_CHECK(batch >= 1, ErrorKind::kInvalidArgument, "batch must be >= 1, got {}", batch);
  if (name == "resnet18") return Session::from_graph(resnet18(batch), options);
  if (name == "mobilenet_v2") return Session::from_graph(mobilenet_v2(batch), options);
  std::string names;
  for (const auto& n : zoo_names()) names += (names.empty() ? "" : ", ") + n;
  fail(ErrorKind::kInvalidArgument, "no built-in model named '{}' (available: {})", name, names);
}

}  // namespace anvil
