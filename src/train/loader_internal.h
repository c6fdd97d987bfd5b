// What the DataLoader's worker kinds share (data_loader.cc, loader_processes.cc).
#pragma once

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "train/data_loader.h"

namespace anvil::train {

// The workers that make an epoch's batches ahead of next().
class BatchSource {
 public:
  virtual ~BatchSource() = default;
  // A new epoch: `order` cut into `batches` batches. Batches of an unfinished
  // epoch are dropped.
  virtual void begin(std::vector<int64_t> order, int64_t batches) = 0;
  // The next batch in order; false after the last.
  virtual bool next(Batch& out) = 0;
};

std::unique_ptr<BatchSource> make_thread_source(std::shared_ptr<const Dataset> dataset, const LoaderOptions& options);
std::unique_ptr<BatchSource> make_process_source(std::shared_ptr<const Dataset> dataset, const LoaderOptions& options);

// Each field's dtype and sample shape, and the bytes of one row, checked:
// numeric dtypes, element and byte counts of a full batch within int64.
struct BatchLayout {
  std::vector<DType> dtypes;
  std::vector<Shape> samples;
  std::vector<int64_t> row_bytes;
};
BatchLayout batch_layout(const Dataset& dataset, int64_t batch_size);

// Rows of batch `index` of an epoch of `size` samples.
inline int64_t batch_rows(int64_t size, int64_t batch_size, int64_t index) {
  return std::min(batch_size, size - index * batch_size);
}

// Fills `fields` ([rows, sample...] tensors, one per field) with the samples
// `indices`. Any exception becomes an anvil::Error prefixed with the batch
// and (when >= 0) the worker. The caller's own batches (worker < 0) use up
// to `threads` threads (0: OpenMP's default).
void fill_batch(const Dataset& dataset, const int64_t* indices, int64_t rows, std::vector<Tensor>& fields,
                int64_t index, int worker, int threads = 0);
// Rethrows the exception being handled as an anvil::Error starting with
// `where` (std::bad_alloc as kOutOfMemory, other foreign exceptions as
// kInvalidArgument: they come from the caller's dataset or hook).
[[noreturn]] void rethrow_in_context(const std::string& where);

// A batch in new tensors (`threads` as fill_batch's).
Batch make_batch(const Dataset& dataset, const int64_t* indices, int64_t rows, int64_t index, int worker,
                 int threads = 0);

}  // namespace anvil::train
