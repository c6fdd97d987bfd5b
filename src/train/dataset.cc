// train::TensorDataset, npy_dataset and csv_dataset (data_loader.h).
#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "anvil/tensor_io.h"
#include "core/check.h"
#include "core/checked.h"
#include "train/data_loader.h"

namespace anvil::train {

namespace {

Shape tail(const Shape& s) { return Shape(s.begin() + 1, s.end()); }

void check_field(int field, int fields) {
  ANVIL_CHECK(field >= 0 && field < fields, ErrorKind::kInvalidArgument, "dataset field {} out of range [0, {})", field,
              fields);
}

}  // namespace

TensorDataset::TensorDataset(Tensor features, Tensor labels)
    : features_(std::move(features)), labels_(std::move(labels)) {
  const auto check_rows = [](const Tensor& t, const char* what) {
    ANVIL_CHECK(!t.empty() && !t.is_sequence() && t.rank() >= 1, ErrorKind::kInvalidArgument,
                "TensorDataset: the {} must be a tensor with a leading row dimension", what);
  };
  check_rows(features_, "features");
  check_rows(labels_, "labels");
  ANVIL_CHECK(features_.dtype() == DType::kFloat32 || features_.dtype() == DType::kUInt8, ErrorKind::kInvalidArgument,
              "TensorDataset: features must be float32 or uint8, got {}", dtype_name(features_.dtype()));
  ANVIL_CHECK(labels_.dtype() == DType::kInt64 || labels_.dtype() == DType::kInt32 ||
                  labels_.dtype() == DType::kFloat32,
              ErrorKind::kInvalidArgument, "TensorDataset: labels must be int64, int32 or float32 (targets), got {}",
              dtype_name(labels_.dtype()));
  ANVIL_CHECK(features_.dim(0) == labels_.dim(0), ErrorKind::kInvalidArgument,
              "TensorDataset: features have {} rows ({}) but labels have {} ({})", features_.dim(0),
              shape_str(features_.shape()), labels_.dim(0), shape_str(labels_.shape()));
  rows_ = features_.dim(0);
}

Shape TensorDataset::sample_shape(int field) const {
  check_field(field, 2);
  return tail(field == 0 ? features_.shape() : labels_.shape());
}

DType TensorDataset::field_dtype(int field) const {
  check_field(field, 2);
  return field == 0 || labels_.dtype() == DType::kFloat32 ? DType::kFloat32 : DType::kInt64;
}

void TensorDataset::check_target(int field, const int64_t* indices, int64_t count, const Tensor& out,
                                 int64_t row_offset) const {
  const Shape sample = sample_shape(field);
  const bool shape_ok = out.rank() == 1 + static_cast<int>(sample.size()) && tail(out.shape()) == sample;
  ANVIL_CHECK(out.dtype() == field_dtype(field) && shape_ok, ErrorKind::kInvalidArgument,
              "TensorDataset::fill: field {} needs a {} tensor of shape [rows, {}], got {} {}", field,
              dtype_name(field_dtype(field)), shape_str(sample), dtype_name(out.dtype()), shape_str(out.shape()));
  ANVIL_CHECK(count >= 0 && row_offset >= 0 && (count == 0 || indices != nullptr) &&
                  checked_add(row_offset, count, "the batch rows") <= out.dim(0),
              ErrorKind::kInvalidArgument, "TensorDataset::fill: rows [{}, {}+{}) do not fit a batch of {}", row_offset,
              row_offset, count, out.dim(0));
  for (int64_t i = 0; i < count; ++i)
    ANVIL_CHECK(indices[i] >= 0 && indices[i] < rows_, ErrorKind::kInvalidArgument,
                "TensorDataset::fill: sample index {} out of range [0, {})", indices[i], rows_);
}

void TensorDataset::fill(int field, const int64_t* indices, int64_t count, Tensor& out, int64_t row_offset) const {
  check_target(field, indices, count, out, row_offset);
  // Plain loops, no OpenMP: this also runs in fork()ed loader workers.
  const Tensor& src = field == 0 ? features_ : labels_;
  const int64_t width = shape_numel(sample_shape(field));
  for (int64_t i = 0; i < count; ++i) {
    const int64_t from = indices[i] * width, to = (row_offset + i) * width;
    if (src.dtype() == DType::kFloat32) {
      std::memcpy(out.data<float>() + to, src.data<float>() + from, static_cast<size_t>(width) * sizeof(float));
    } else if (src.dtype() == DType::kUInt8) {
      const uint8_t* s = src.data<uint8_t>() + from;
      float* d = out.data<float>() + to;
      // Computed, not looked up in a table of the 256 values: the loop
      // vectorizes (the lookups took 9 ms of a 25,000 x 512 batch).
      for (int64_t j = 0; j < width; ++j) d[j] = static_cast<float>(s[j]) / 255.f;
    } else if (src.dtype() == DType::kInt64) {
      std::memcpy(out.data<int64_t>() + to, src.data<int64_t>() + from, static_cast<size_t>(width) * sizeof(int64_t));
    } else {
      const int32_t* s = src.data<int32_t>() + from;
      int64_t* d = out.data<int64_t>() + to;
      for (int64_t j = 0; j < width; ++j) d[j] = s[j];
    }
  }
}

std::shared_ptr<TensorDataset> npy_dataset(const std::string& features_path, const std::string& labels_path) {
  Tensor features = read_tensor_file(features_path), labels = read_tensor_file(labels_path);
  try {
    return std::make_shared<TensorDataset>(std::move(features), std::move(labels));
  } catch (const Error& e) {
    throw Error(e.kind(), fmt::format("'{}' and '{}': {}", features_path, labels_path, e.what()));
  }
}

// ---- CSV ----

namespace {

std::string read_text_file(const std::string& path) {
  std::error_code ec;
  ANVIL_CHECK(std::filesystem::is_regular_file(path, ec), ErrorKind::kInvalidArgument,
              "CSV file '{}' does not exist or is not a regular file", path);
  std::ifstream in(path, std::ios::binary);
  ANVIL_CHECK(in.good(), ErrorKind::kInvalidArgument, "cannot read CSV file '{}'", path);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.remove_suffix(1);
  return s;
}

std::vector<std::string_view> split_cells(std::string_view line) {
  std::vector<std::string_view> cells;
  for (size_t start = 0;;) {
    const size_t comma = line.find(',', start);
    cells.push_back(trim(line.substr(start, comma == std::string_view::npos ? std::string_view::npos : comma - start)));
    if (comma == std::string_view::npos) return cells;
    start = comma + 1;
  }
}

// A cell for a message: quoted, and cut short so the message stays one line.
std::string shown(std::string_view cell) {
  return fmt::format("'{}{}'", cell.substr(0, 40), cell.size() > 40 ? "..." : "");
}

// from_chars with an optional leading '+', consuming the whole cell.
template <typename T>
std::from_chars_result parse_whole(std::string_view cell, T& value) {
  if (!cell.empty() && cell.front() == '+') cell.remove_prefix(1);
  auto r = std::from_chars(cell.data(), cell.data() + cell.size(), value);
  if (r.ec == std::errc() && r.ptr != cell.data() + cell.size()) r.ec = std::errc::invalid_argument;
  return r;
}

bool is_number(std::string_view cell) {
  double v;
  return !cell.empty() && parse_whole(cell, v).ec != std::errc::invalid_argument;
}

struct CsvTable {
  std::vector<float> features;
  std::vector<int64_t> labels;
  int64_t columns = 0;
  int64_t label_column = 0;
};

float parse_feature(std::string_view cell, const std::string& where, size_t column) {
  float v = 0;
  const auto r = parse_whole(cell, v);
  ANVIL_CHECK(r.ec != std::errc::invalid_argument, ErrorKind::kInvalidArgument, "{}: cell {} ({}) is not a number",
              where, column + 1, shown(cell));
  ANVIL_CHECK(r.ec == std::errc() && std::isfinite(v), ErrorKind::kInvalidArgument,
              "{}: cell {} ({}) is not a finite float32", where, column + 1, shown(cell));
  return v;
}

int64_t parse_label(std::string_view cell, const std::string& where, size_t column) {
  int64_t v = 0;
  const auto r = parse_whole(cell, v);
  ANVIL_CHECK(r.ec == std::errc() && v >= 0, ErrorKind::kInvalidArgument,
              "{}: the label (cell {}, {}) must be a non-negative integer", where, column + 1, shown(cell));
  return v;
}

// The first line fixes the column count; a header (no numeric cell) is skipped.
void start_table(CsvTable& t, const std::vector<std::string_view>& cells, int label_column, const std::string& where) {
  t.columns = static_cast<int64_t>(cells.size());
  ANVIL_CHECK(t.columns >= 2, ErrorKind::kInvalidArgument,
              "{}: a CSV dataset needs at least 2 columns (a label and a feature), got {}", where, t.columns);
  t.label_column = label_column < 0 ? t.columns + label_column : label_column;
  ANVIL_CHECK(t.label_column >= 0 && t.label_column < t.columns, ErrorKind::kInvalidArgument,
              "{}: label column {} out of range for {} columns", where, label_column, t.columns);
}

void add_row(CsvTable& t, const std::vector<std::string_view>& cells, const std::string& where) {
  ANVIL_CHECK(static_cast<int64_t>(cells.size()) == t.columns, ErrorKind::kInvalidArgument,
              "{}: {} cells, but the first line has {} (ragged row)", where, cells.size(), t.columns);
  for (size_t c = 0; c < cells.size(); ++c) {
    if (static_cast<int64_t>(c) == t.label_column)
      t.labels.push_back(parse_label(cells[c], where, c));
    else
      t.features.push_back(parse_feature(cells[c], where, c));
  }
}

}  // namespace

std::shared_ptr<TensorDataset> csv_dataset(const std::string& path, int label_column) {
  return csv_dataset_from_text(read_text_file(path), path, label_column);
}

std::shared_ptr<TensorDataset> csv_dataset_from_text(const std::string& text, const std::string& path,
                                                     int label_column) {
  std::string_view all(text);
  if (all.substr(0, 3) == "\xEF\xBB\xBF") all.remove_prefix(3);  // a UTF-8 byte order mark
  CsvTable t;
  bool first = true;
  int64_t line_no = 0;
  for (size_t pos = 0; pos < all.size();) {
    const size_t end = std::min(all.find('\n', pos), all.size());
    const std::string_view line = trim(all.substr(pos, end - pos));
    pos = end + 1;
    ++line_no;
    if (line.empty()) continue;
    const std::vector<std::string_view> cells = split_cells(line);
    const std::string where = fmt::format("{}:{}", path, line_no);
    if (first) {
      start_table(t, cells, label_column, where);
      first = false;
      if (std::none_of(cells.begin(), cells.end(), is_number)) continue;
    }
    add_row(t, cells, where);
  }
  const int64_t rows = static_cast<int64_t>(t.labels.size());
  ANVIL_CHECK(rows > 0, ErrorKind::kInvalidArgument, "CSV file '{}' has no data rows{}", path,
              first ? " (it is empty)" : " (only a header)");
  Tensor features(DType::kFloat32, {rows, t.columns - 1});
  std::copy(t.features.begin(), t.features.end(), features.data<float>());
  Tensor labels(DType::kInt64, {rows});
  std::copy(t.labels.begin(), t.labels.end(), labels.data<int64_t>());
  return std::make_shared<TensorDataset>(features, labels);
}

}  // namespace anvil::train
