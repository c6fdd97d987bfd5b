// Random draws for the kernels that make them (RandomNormal/Uniform(Like),
// Bernoulli, training-mode Dropout): a 64-bit Mersenne twister per run, seeded
// from the op's `seed` attribute (or the device's entropy) and the run's
// number, so concurrent runs never share a generator and a seeded model
// repeats its sequence of runs.
#pragma once

#include <atomic>
#include <cstdint>
#include <random>

#include <optional>

namespace anvil::kernels {

class RunSeeds {
 public:
  explicit RunSeeds(std::optional<uint64_t> seed) : base_(seed ? *seed : static_cast<uint64_t>(std::random_device{}())) {}
  // The generator of the next run.
  std::mt19937_64 next() const { return std::mt19937_64(base_ + 0x9E3779B97F4A7C15ull * runs_.fetch_add(1)); }

 private:
  uint64_t base_;
  mutable std::atomic<uint64_t> runs_{0};
};

}  // namespace anvil::kernels
