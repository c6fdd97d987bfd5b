// Large initializers in external data files are mapped, not copied: the
// tensor reads the file's bytes, the mapping lives as long as the tensor, and
// data that is small or not 64-byte aligned in the file is read instead.
#include <gtest/gtest.h>

#include <onnx/onnx_pb.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "onnx/tensor_proto.h"

namespace anvil {
namespace {

namespace fs = std::filesystem;

struct WeightsFile {
  fs::path dir, path;
  std::vector<float> values;
  WeightsFile(const std::string& name, size_t count) {
    dir = fs::temp_directory_path() / ("anvil_map_" + name + "_" + std::to_string(::getpid()));
    fs::create_directories(dir);
    path = dir / "weights.bin";
    values.resize(count);
    for (size_t i = 0; i < count; ++i) values[i] = static_cast<float>(i % 1000) * 0.5f - 7.f;
    std::ofstream out(path, std::ios::binary);
    const std::string pad(192, 'x');  // so offsets 192 (64-aligned) and 196 (not) both hold data
    out.write(pad.data(), static_cast<std::streamsize>(pad.size()));
    out.write(reinterpret_cast<const char*>(values.data()), static_cast<std::streamsize>(count * sizeof(float)));
    out.write(reinterpret_cast<const char*>(values.data()), 4);
  }
  ~WeightsFile() { fs::remove_all(dir); }
};

onnx::TensorProto external(const std::string& name, int64_t count, int64_t offset,
                           int data_type = onnx::TensorProto::FLOAT) {
  onnx::TensorProto p;
  p.set_name(name);
  p.set_data_type(data_type);
  p.add_dims(count);
  p.set_data_location(onnx::TensorProto::EXTERNAL);
  auto* location = p.add_external_data();
  location->set_key("location");
  location->set_value("weights.bin");
  auto* at = p.add_external_data();
  at->set_key("offset");
  at->set_value(std::to_string(offset));
  return p;
}

bool mapped(const fs::path& file) {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line))
    if (line.find(file.string()) != std::string::npos) return true;
  return false;
}

TEST(ExternalMapping, LargeAlignedDataIsMappedForTheTensorsLifetime) {
  WeightsFile file("large", 64 * 1024);  // 256 KiB
  {
    Tensor t = onnx_io::tensor_from_proto(external("W", 64 * 1024, 192), file.dir.string());
    EXPECT_TRUE(mapped(file.path));
    ASSERT_EQ(t.numel(), 64 * 1024);
    for (int64_t i : {int64_t{0}, int64_t{999}, int64_t{65535}}) EXPECT_EQ(t.data<float>()[i], file.values[i]);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(t.raw()) % 64, 0u);
    t.data<float>()[0] = 42.f;  // a private mapping: the file is not changed
  }
  EXPECT_FALSE(mapped(file.path));
  Tensor again = onnx_io::tensor_from_proto(external("W", 64 * 1024, 192), file.dir.string());
  EXPECT_EQ(again.data<float>()[0], file.values[0]);
}

TEST(ExternalMapping, SmallOrUnalignedDataIsRead) {
  WeightsFile file("small", 64 * 1024);
  Tensor unaligned = onnx_io::tensor_from_proto(external("W", 64 * 1024, 196), file.dir.string());
  EXPECT_FALSE(mapped(file.path));
  EXPECT_EQ(unaligned.data<float>()[0], file.values[1]);
  EXPECT_EQ(unaligned.data<float>()[64 * 1024 - 1], file.values[0]);  // the 4 bytes written after the data
  Tensor small = onnx_io::tensor_from_proto(external("w", 16, 192), file.dir.string());
  EXPECT_FALSE(mapped(file.path));
  EXPECT_EQ(small.data<float>()[15], file.values[15]);
}

// Read (not mapped) data of other types: int16, whose file bytes are its
// memory form (read into the tensor in place), and bool, whose bytes are
// normalized to 0 or 1 on the way. Against the file's bytes.
TEST(ExternalMapping, UnalignedDataOfOtherTypesIsRead) {
  WeightsFile file("types", 64 * 1024);
  std::ifstream in(file.path, std::ios::binary);
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const int64_t count = 60000, offset = 198;
  Tensor shorts = onnx_io::tensor_from_proto(external("s", count, offset, onnx::TensorProto::INT16), file.dir.string());
  Tensor flags = onnx_io::tensor_from_proto(external("b", count, offset, onnx::TensorProto::BOOL), file.dir.string());
  EXPECT_FALSE(mapped(file.path));
  ASSERT_EQ(shorts.numel(), count);
  for (int64_t i = 0; i < count; i += 997) {
    int16_t want = 0;
    std::memcpy(&want, bytes.data() + offset + 2 * i, 2);
    ASSERT_EQ(shorts.data<int16_t>()[i], want) << i;
    ASSERT_EQ(flags.data<uint8_t>()[i], bytes[static_cast<size_t>(offset + i)] != 0 ? 1 : 0) << i;
  }
  EXPECT_EQ(shorts.data<int16_t>()[count - 1], [&] {
    int16_t last = 0;
    std::memcpy(&last, bytes.data() + offset + 2 * (count - 1), 2);
    return last;
  }());
}

}  // namespace
}  // namespace anvil
