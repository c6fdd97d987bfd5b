#include "serving/metrics.h"

#include <fmt/format.h>

namespace anvil::serving {

template <size_t N>
void Metrics::Histogram<N>::add(const std::array<double, N>& bounds, double value) {
  ++count;
  sum += value;
  for (size_t b = 0; b < N; ++b)
    if (value <= bounds[b]) {
      ++counts[b];
      return;
    }
}

void Metrics::record_enqueued(const std::string& model) {
  std::lock_guard<std::mutex> lock(mutex_);
  ++models_[model].in_flight;
}

void Metrics::record_request(const std::string& model, bool ok, double queue_s, double compute_s) {
  std::lock_guard<std::mutex> lock(mutex_);
  ModelMetrics& m = models_[model];
  ++m.requests;
  if (m.in_flight > 0) --m.in_flight;
  if (!ok) ++m.failures;
  m.queue.add(kSecondsBuckets, queue_s);
  m.compute.add(kSecondsBuckets, compute_s);
}

void Metrics::record_failure(const std::string& model) {
  std::lock_guard<std::mutex> lock(mutex_);
  ModelMetrics& m = models_[model];
  ++m.requests;
  ++m.failures;
}

void Metrics::record_rejection(const std::string& model) {
  std::lock_guard<std::mutex> lock(mutex_);
  ModelMetrics& m = models_[model];
  ++m.requests;
  ++m.failures;
  ++m.rejections;
}

void Metrics::record_batch(const std::string& model, int rows) {
  std::lock_guard<std::mutex> lock(mutex_);
  models_[model].batch.add(kBatchBuckets, rows);
}

namespace {

template <size_t N>
void write_histogram(std::string& out, const char* name, const std::string& model, const std::array<double, N>& bounds,
                     const std::array<uint64_t, N>& counts, uint64_t count, double sum) {
  uint64_t cumulative = 0;
  for (size_t b = 0; b < N; ++b) {
    cumulative += counts[b];
    out += fmt::format("{}_bucket{{model=\"{}\",le=\"{}\"}} {}\n", name, model, bounds[b], cumulative);
  }
  out += fmt::format("{}_bucket{{model=\"{}\",le=\"+Inf\"}} {}\n", name, model, count);
  out += fmt::format("{}_sum{{model=\"{}\"}} {}\n{}_count{{model=\"{}\"}} {}\n", name, model, sum, name, model, count);
}

}  // namespace

std::string Metrics::prometheus_text() const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::string out;
  auto header = [&](const char* name, const char* type, const char* help) {
    out += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
  };
  header("anvil_requests_total", "counter", "Inference requests received, by model.");
  for (const auto& [model, m] : models_) out += fmt::format("anvil_requests_total{{model=\"{}\"}} {}\n", model, m.requests);
  header("anvil_request_failures_total", "counter", "Requests that ended in an error (4xx or 5xx), rejections included.");
  for (const auto& [model, m] : models_)
    out += fmt::format("anvil_request_failures_total{{model=\"{}\"}} {}\n", model, m.failures);
  header("anvil_request_rejections_total", "counter", "Requests refused with 503 because the model's queue was full.");
  for (const auto& [model, m] : models_)
    out += fmt::format("anvil_request_rejections_total{{model=\"{}\"}} {}\n", model, m.rejections);
  header("anvil_requests_in_flight", "gauge", "Requests queued or running, by model.");
  for (const auto& [model, m] : models_)
    out += fmt::format("anvil_requests_in_flight{{model=\"{}\"}} {}\n", model, m.in_flight);
  header("anvil_queue_seconds", "histogram", "Time from a request's arrival to the start of its batch's run.");
  for (const auto& [model, m] : models_)
    write_histogram(out, "anvil_queue_seconds", model, kSecondsBuckets, m.queue.counts, m.queue.count, m.queue.sum);
  header("anvil_compute_seconds", "histogram", "Run time of the batch a request was part of.");
  for (const auto& [model, m] : models_)
    write_histogram(out, "anvil_compute_seconds", model, kSecondsBuckets, m.compute.counts, m.compute.count,
                    m.compute.sum);
  header("anvil_batch_size", "histogram", "Rows (batch entries) per run of the model.");
  for (const auto& [model, m] : models_)
    write_histogram(out, "anvil_batch_size", model, kBatchBuckets, m.batch.counts, m.batch.count, m.batch.sum);
  return out;
}

}  // namespace anvil::serving
