// NonMaxSuppression: per batch and class, greedy selection of the highest
// scoring boxes, dropping any whose IoU with an already selected box exceeds
// iou_threshold; boxes scoring at or below score_threshold never count. The
// output [count, 3] (batch, class, box) is sized by the data (allocates_outputs).
// Boxes are [y1, x1, y2, x2] in either corner order (center_point_box=0) or
// [x_center, y_center, width, height] (1).
#include <algorithm>
#include <cmath>
#include <numeric>

#include "kernels/ref/common.h"
#include "kernels/registry.h"

namespace anvil::kernels {

namespace {

struct Box {
  float y1, x1, y2, x2;  // y1 <= y2, x1 <= x2
  float area() const { return (y2 - y1) * (x2 - x1); }
};

float iou(const Box& a, const Box& b) {
  const float h = std::max(0.f, std::min(a.y2, b.y2) - std::max(a.y1, b.y1));
  const float w = std::max(0.f, std::min(a.x2, b.x2) - std::max(a.x1, b.x1));
  const float inter = h * w, uni = a.area() + b.area() - inter;
  return uni > 0 ? inter / uni : 0.f;
}

class NmsKernel : public Kernel {
 public:
  explicit NmsKernel(const ir::Node& node) : center_(node.attrs.get_int("center_point_box", 0) != 0) {}
  bool allocates_outputs() const override { return true; }

  std::vector<TensorType> prepare(const PrepareContext& ctx) override {
    const Shape &boxes = ctx.input_shape(0), &scores = ctx.input_shape(1);
    ANVIL_PREPARE_CHECK(ctx, boxes.size() == 3 && boxes[2] == 4 && scores.size() == 3 && scores[0] == boxes[0] &&
                                 scores[2] == boxes[1],
                        ErrorKind::kInvalidArgument, "boxes {} must be [B, N, 4] and scores {} [B, C, N]",
                        shape_str(boxes), shape_str(scores));
    return {TensorType{}};
  }

  void run(const RunContext& ctx) const override {
    const Tensor& boxes = ctx.in(0);
    const Tensor& scores = ctx.in(1);
    const int64_t batches = boxes.shape()[0], n = boxes.shape()[1], classes = scores.shape()[1];
    auto scalar = [&](size_t i, double fallback) {
      const Tensor* t = i < ctx.inputs.size() ? ctx.inputs[i] : nullptr;
      if (!t || t->numel() == 0) return fallback;
      return t->dtype() == DType::kInt64 ? static_cast<double>(*t->data<int64_t>()) : static_cast<double>(*t->data<float>());
    };
    const auto max_per_class = static_cast<int64_t>(scalar(2, 0));
    const auto iou_threshold = static_cast<float>(scalar(3, 0));
    const double score_threshold = scalar(4, -std::numeric_limits<double>::infinity());
    std::vector<int64_t> selected;
    for (int64_t b = 0; b < batches; ++b) {
      std::vector<Box> bx(static_cast<size_t>(n));
      for (int64_t i = 0; i < n; ++i) bx[static_cast<size_t>(i)] = box(boxes.data<float>() + (b * n + i) * 4);
      for (int64_t c = 0; c < classes; ++c) {
        const float* s = scores.data<float>() + (b * classes + c) * n;
        std::vector<int64_t> order;
        for (int64_t i = 0; i < n; ++i)
          if (static_cast<double>(s[i]) > score_threshold) order.push_back(i);
        std::stable_sort(order.begin(), order.end(), [s](int64_t x, int64_t y) { return s[x] > s[y]; });
        std::vector<int64_t> kept;
        for (int64_t i : order) {
          if (static_cast<int64_t>(kept.size()) >= max_per_class) break;
          bool keep = true;
          for (int64_t k : kept)
            if (iou(bx[static_cast<size_t>(i)], bx[static_cast<size_t>(k)]) > iou_threshold) keep = false;
          if (keep) kept.push_back(i);
        }
        for (int64_t k : kept) selected.insert(selected.end(), {b, c, k});
      }
    }
    Tensor out(DType::kInt64, {static_cast<int64_t>(selected.size() / 3), 3});
    std::copy(selected.begin(), selected.end(), out.data<int64_t>());
    *ctx.outputs[0] = std::move(out);
  }

 private:
  Box box(const float* p) const {
    if (center_) return {p[1] - p[3] / 2, p[0] - p[2] / 2, p[1] + p[3] / 2, p[0] + p[2] / 2};
    return {std::min(p[0], p[2]), std::min(p[1], p[3]), std::max(p[0], p[2]), std::max(p[1], p[3])};
  }

  bool center_;
};

}  // namespace

ANVIL_REGISTER_OP_VERSIONS("NonMaxSuppression", 10, 11);
ANVIL_REGISTER_KERNEL_CLASS_TYPED("NonMaxSuppression", kRef, NmsKernel,
                                  {kFloat32Only, kFloat32Only, dtype_bit(DType::kInt64), kFloat32Only, kFloat32Only});

}  // namespace anvil::kernels
