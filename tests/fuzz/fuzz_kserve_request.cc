// libFuzzer target: KServe v2 infer requests (JSON, and the binary extension
// with the header length taken from the input's first two bytes), as the
// server receives them. Each must parse or throw anvil::Error.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "anvil/error.h"
#include "serving/kserve.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  anvil::serving::RequestLimits limits;
  limits.max_elements = int64_t{1} << 22;  // what a 64 MiB body could claim, within libFuzzer's RSS limit
  std::string body(reinterpret_cast<const char*>(data), size);
  try {
    anvil::serving::parse_infer_request(body, std::nullopt, limits);
  } catch (const anvil::Error&) {
  }
  if (size >= 2) {
    const size_t header = (size_t{data[0]} << 8 | data[1]) % size;
    try {
      anvil::serving::parse_infer_request(body.substr(2), header <= size - 2 ? header : size - 2, limits);
    } catch (const anvil::Error&) {
    }
  }
  return 0;
}
