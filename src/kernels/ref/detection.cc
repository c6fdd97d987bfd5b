// Detection ops.
//
// NonMaxSuppression: per batch and class, greedy selection of the highest
// scoring boxes, dropping any whose IoU with an already selected box exceeds
// iou_threshold; boxes scoring at or below score_threshold never count. The
// output [count, 3] (batch, class, box) is sized by the data (allocates_outputs).
// Boxes are [y1, x1, y2, x2] in either corner order (center_point_box=0) or
// [x_center, y_center, width, height] (1).
//
// RoiAlign: average (or max) of bilinear samples over each bin of each region
// of interest, as Mask R-CNN defines it (ONNX Runtime's arithmetic): regions
// in input coordinates times spatial_scale, half_pixel shifting them by -0.5
// (opset 16's default), sampling_ratio samples per bin side (0: adaptive).
#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>

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
    const Tensor* max_t = 2 < ctx.inputs.size() ? ctx.inputs[2] : nullptr;
    const int64_t max_per_class = max_t && max_t->numel() > 0 ? *max_t->data<int64_t>() : 0;
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

class RoiAlignKernel : public Kernel {
 public:
  explicit RoiAlignKernel(const ir::Node& node)
      : max_(node.attrs.get_string("mode", "avg") == "max"),
        half_pixel_(node.opset >= 16 &&
                    node.attrs.get_string("coordinate_transformation_mode", "half_pixel") == "half_pixel"),
        height_(node.attrs.get_int("output_height", 1)),
        width_(node.attrs.get_int("output_width", 1)),
        sampling_(node.attrs.get_int("sampling_ratio", 0)),
        scale_(node.attrs.get_float("spatial_scale", 1.f)) {}

  std::vector<TensorType> prepare(const PrepareContext& ctx) override {
    const std::string mode = ctx.attrs().get_string("mode", "avg");
    ANVIL_PREPARE_CHECK(ctx, mode == "avg" || mode == "max", ErrorKind::kInvalidModel, "mode '{}' is not avg or max",
                        mode);
    ANVIL_PREPARE_CHECK(ctx, height_ >= 1 && width_ >= 1 && sampling_ >= 0, ErrorKind::kInvalidModel,
                        "output_height, output_width must be >= 1 and sampling_ratio >= 0");
    return ctx.output_types();  // the schema checked X, rois and batch_indices
  }

  void run(const RunContext& ctx) const override {
    const Tensor& x = ctx.in(0);
    const Tensor& rois = ctx.in(1);
    const Tensor& batch = ctx.in(2);
    const int64_t n = x.shape()[0], c = x.shape()[1], h = x.shape()[2], w = x.shape()[3];
    const int64_t count = rois.shape()[0];
    for (int64_t r = 0; r < count; ++r)
      ANVIL_CHECK(batch.data<int64_t>()[r] >= 0 && batch.data<int64_t>()[r] < n, ErrorKind::kInvalidArgument,
                  "RoiAlign: batch index {} is out of range [0, {})", batch.data<int64_t>()[r], n);
    const float* xp = x.data<float>();
    float* y = ctx.out(0).data<float>();
    const float offset = half_pixel_ ? 0.5f : 0.f;
    // Regions must be finite, and their sampling grids bounded (an adaptive
    // grid follows the region's size).
    for (int64_t i = 0; i < count * 4; ++i) {
      const float v = rois.data<float>()[i] * scale_;
      ANVIL_CHECK(std::isfinite(v) && std::fabs(v) < 1e7f, ErrorKind::kInvalidArgument,
                  "RoiAlign: region coordinate {} is not a finite position", rois.data<float>()[i]);
    }
    if (sampling_ == 0)
      for (int64_t r = 0; r < count; ++r) {
        const float* roi = rois.data<float>() + r * 4;
        const double gh = std::ceil(std::fabs(roi[3] - roi[1]) * scale_ / static_cast<double>(height_));
        const double gw = std::ceil(std::fabs(roi[2] - roi[0]) * scale_ / static_cast<double>(width_));
        ANVIL_CHECK(gh * gw <= static_cast<double>(1 << 22), ErrorKind::kInvalidArgument,
                    "RoiAlign: region {} needs {} samples per bin", r, gh * gw);
      }
#pragma omp parallel for collapse(2) if (count * c * height_ * width_ > 4096)
    for (int64_t r = 0; r < count; ++r)
      for (int64_t ch = 0; ch < c; ++ch) {
        const float* roi = rois.data<float>() + r * 4;
        const float x0 = roi[0] * scale_ - offset, y0 = roi[1] * scale_ - offset;
        float rw = roi[2] * scale_ - offset - x0, rh = roi[3] * scale_ - offset - y0;
        if (!half_pixel_) {
          rw = std::max(rw, 1.f);
          rh = std::max(rh, 1.f);
        }
        const float bh = rh / static_cast<float>(height_), bw = rw / static_cast<float>(width_);
        const int64_t gh = sampling_ > 0 ? sampling_ : static_cast<int64_t>(std::ceil(rh / static_cast<float>(height_)));
        const int64_t gw = sampling_ > 0 ? sampling_ : static_cast<int64_t>(std::ceil(rw / static_cast<float>(width_)));
        const float samples = static_cast<float>(std::max<int64_t>(gh * gw, 1));
        const float* plane = xp + (batch.data<int64_t>()[r] * c + ch) * h * w;
        for (int64_t ph = 0; ph < height_; ++ph)
          for (int64_t pw = 0; pw < width_; ++pw) {
            float acc = 0;
            bool first = true;
            for (int64_t iy = 0; iy < gh; ++iy) {
              const float sy = y0 + static_cast<float>(ph) * bh + (static_cast<float>(iy) + 0.5f) * bh / static_cast<float>(gh);
              for (int64_t ix = 0; ix < gw; ++ix) {
                const float sx = x0 + static_cast<float>(pw) * bw + (static_cast<float>(ix) + 0.5f) * bw / static_cast<float>(gw);
                const float v = sample(plane, h, w, sy, sx);
                if (max_) acc = first ? v : std::max(acc, v);
                else acc += v;
                first = false;
              }
            }
            y[((r * c + ch) * height_ + ph) * width_ + pw] = max_ ? acc : acc / samples;
          }
      }
  }

 private:
  // Bilinear sample at (y, x); 0 beyond one pixel outside the image. In max mode
  // the sample is the largest weighted corner (ONNX Runtime's definition).
  float sample(const float* p, int64_t h, int64_t w, float y, float x) const {
    if (y < -1.f || y > static_cast<float>(h) || x < -1.f || x > static_cast<float>(w)) return 0.f;
    y = std::max(y, 0.f);
    x = std::max(x, 0.f);
    auto yl = static_cast<int64_t>(y), xl = static_cast<int64_t>(x);
    int64_t yh = yl + 1, xh = xl + 1;
    if (yl >= h - 1) {
      yl = yh = h - 1;
      y = static_cast<float>(yl);
    }
    if (xl >= w - 1) {
      xl = xh = w - 1;
      x = static_cast<float>(xl);
    }
    const float ly = y - static_cast<float>(yl), lx = x - static_cast<float>(xl), hy = 1 - ly, hx = 1 - lx;
    const float v1 = hy * hx * p[yl * w + xl], v2 = hy * lx * p[yl * w + xh];
    const float v3 = ly * hx * p[yh * w + xl], v4 = ly * lx * p[yh * w + xh];
    return max_ ? std::max(std::max(v1, v2), std::max(v3, v4)) : v1 + v2 + v3 + v4;
  }

  bool max_, half_pixel_;
  int64_t height_, width_, sampling_;
  float scale_;
};

}  // namespace

ANVIL_REGISTER_OP_VERSIONS("RoiAlign", 10, 16);
ANVIL_REGISTER_KERNEL_CLASS_TYPED("RoiAlign", kRef, RoiAlignKernel,
                                  {kFloat32Only, kFloat32Only, dtype_bit(DType::kInt64)});
ANVIL_REGISTER_OP_VERSIONS("NonMaxSuppression", 10, 11);
ANVIL_REGISTER_KERNEL_CLASS_TYPED("NonMaxSuppression", kRef, NmsKernel,
                                  {kFloat32Only, kFloat32Only, dtype_bit(DType::kInt64), kFloat32Only, kFloat32Only});

}  // namespace anvil::kernels
