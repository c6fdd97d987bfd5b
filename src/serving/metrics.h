// Server metrics in Prometheus' text format (GET /metrics): per model, the
// requests, failures and rejections, the requests in flight, and histograms
// of queue time, compute time and batch sizes.
#pragma once

#include <array>
#include <map>
#include <mutex>
#include <string>

namespace anvil::serving {

class Metrics {
 public:
  // A request accepted into a model's queue (in flight until record_request).
  void record_enqueued(const std::string& model);
  // A request that reached a model: served (ok) or failed after parsing.
  void record_request(const std::string& model, bool ok, double queue_s, double compute_s);
  // A request refused before it ran: bad request (400) or a full queue (503).
  void record_failure(const std::string& model);
  void record_rejection(const std::string& model);
  void record_batch(const std::string& model, int rows);
  std::string prometheus_text() const;

 private:
  static constexpr std::array<double, 12> kSecondsBuckets = {0.0005, 0.001, 0.002, 0.005, 0.01, 0.02,
                                                              0.05,   0.1,   0.2,   0.5,   1.0,  5.0};
  static constexpr std::array<double, 8> kBatchBuckets = {1, 2, 4, 8, 16, 32, 64, 128};
  template <size_t N>
  struct Histogram {
    std::array<uint64_t, N> counts{};  // per bucket (not cumulative)
    uint64_t count = 0;
    double sum = 0;
    void add(const std::array<double, N>& bounds, double value);
  };
  struct ModelMetrics {
    uint64_t requests = 0, failures = 0, rejections = 0;
    int64_t in_flight = 0;  // queued or running
    Histogram<kSecondsBuckets.size()> queue, compute;
    Histogram<kBatchBuckets.size()> batch;
  };
  mutable std::mutex mutex_;
  std::map<std::string, ModelMetrics> models_;
};

}  // namespace anvil::serving
