// CPU detection: CPUID for the ISA, sysfs for caches and cores.
#include <cpuid.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <set>
#include <string>

#include "anvil/cpu.h"

namespace anvil {

namespace {

struct Regs {
  unsigned a = 0, b = 0, c = 0, d = 0;
};

Regs cpuid(unsigned leaf, unsigned sub = 0) {
  Regs r;
  __cpuid_count(leaf, sub, r.a, r.b, r.c, r.d);
  return r;
}

bool os_saves_avx() {
  Regs r = cpuid(1);
  if (!(r.c & (1u << 27))) return false;  // OSXSAVE
  unsigned lo, hi;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return (lo & 0x6) == 0x6;
}

bool os_saves_avx512() {
  unsigned lo, hi;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return (lo & 0xe6) == 0xe6;
}

std::string read_line(const std::string& path) {
  std::ifstream in(path);
  std::string s;
  std::getline(in, s);
  return s;
}

size_t parse_size(const std::string& s) {
  if (s.empty()) return 0;
  size_t n = std::stoul(s);
  char unit = s.back();
  return unit == 'K' ? n << 10 : unit == 'M' ? n << 20 : n;
}

// The CPUs of a sysfs list such as "0-3,8-11" (0 when empty or malformed).
int count_cpus_in_list(const std::string& list) {
  int count = 0;
  size_t pos = 0;
  while (pos < list.size()) {
    const size_t end = std::min(list.find(',', pos), list.size());
    const std::string range = list.substr(pos, end - pos);
    const size_t dash = range.find('-');
    char* stop = nullptr;
    const long first = std::strtol(range.c_str(), &stop, 10);
    const long last = dash == std::string::npos ? first : std::strtol(range.c_str() + dash + 1, &stop, 10);
    if (stop == range.c_str() || first < 0 || last < first || last - first > 65536) return 0;
    count += static_cast<int>(last - first + 1);
    pos = end + 1;
  }
  return count;
}

void read_caches(CpuInfo& info) {
  for (int i = 0; i < 8; ++i) {
    std::string dir = "/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(i) + "/";
    std::string level = read_line(dir + "level");
    if (level.empty()) break;
    std::string type = read_line(dir + "type");
    size_t size = parse_size(read_line(dir + "size"));
    if (level == "1" && type == "Data") info.l1d_bytes = size;
    if (level == "2") {
      info.l2_bytes = size;
      info.l2_shared_by = std::max(1, count_cpus_in_list(read_line(dir + "shared_cpu_list")));
    }
    if (level == "3") info.l3_bytes = size;
  }
}

int count_physical_cores() {
  std::set<std::string> cores;
  for (int cpu = 0;; ++cpu) {
    std::string base = "/sys/devices/system/cpu/cpu" + std::to_string(cpu) + "/topology/";
    std::string core = read_line(base + "core_id");
    if (core.empty()) break;
    cores.insert(read_line(base + "physical_package_id") + ":" + core);
  }
  return static_cast<int>(cores.size());
}

CpuInfo detect() {
  CpuInfo info;
  Regs v = cpuid(0);
  char vendor[13] = {};
  std::memcpy(vendor, &v.b, 4);
  std::memcpy(vendor + 4, &v.d, 4);
  std::memcpy(vendor + 8, &v.c, 4);
  info.vendor = vendor;
  if (cpuid(0x80000000).a >= 0x80000004) {
    char brand[49] = {};
    for (unsigned i = 0; i < 3; ++i) {
      Regs r = cpuid(0x80000002 + i);
      std::memcpy(brand + 16 * i, &r, 16);
    }
    info.model_name = brand;
    while (!info.model_name.empty() && info.model_name.back() == ' ') info.model_name.pop_back();
  }
  Regs f1 = cpuid(1);
  info.sse41 = f1.c & (1u << 19);
  info.sse42 = f1.c & (1u << 20);
  bool avx_os = os_saves_avx();
  info.avx = avx_os && (f1.c & (1u << 28));
  info.fma = avx_os && (f1.c & (1u << 12));
  info.f16c = avx_os && (f1.c & (1u << 29));
  if (v.a >= 7) {
    Regs f7 = cpuid(7), f71 = cpuid(7, 1);
    info.avx2 = avx_os && (f7.b & (1u << 5));
    bool z = avx_os && os_saves_avx512();
    info.avx512f = z && (f7.b & (1u << 16));
    info.avx512dq = z && (f7.b & (1u << 17));
    info.avx512bw = z && (f7.b & (1u << 30));
    info.avx512vl = z && (f7.b & (1u << 31));
    info.avx512_vnni = z && (f7.c & (1u << 11));
    info.avx512_bf16 = z && (f71.a & (1u << 5));
    info.avx_vnni = avx_os && (f71.a & (1u << 4));
    info.amx_bf16 = f7.d & (1u << 22);
    info.amx_tile = f7.d & (1u << 24);
    info.amx_int8 = f7.d & (1u << 25);
  }
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  info.logical_cores = n > 0 ? static_cast<int>(n) : 1;
  info.physical_cores = count_physical_cores();
  if (info.physical_cores == 0) info.physical_cores = info.logical_cores;
  read_caches(info);
  return info;
}

}  // namespace

std::vector<std::string> CpuInfo::isa_list() const {
  std::vector<std::string> l;
  auto add = [&](bool on, const char* name) {
    if (on) l.push_back(name);
  };
  add(sse41, "SSE4.1");
  add(sse42, "SSE4.2");
  add(avx, "AVX");
  add(avx2, "AVX2");
  add(fma, "FMA");
  add(f16c, "F16C");
  add(avx_vnni, "AVX-VNNI");
  add(avx512f, "AVX-512F");
  add(avx512bw, "AVX-512BW");
  add(avx512vl, "AVX-512VL");
  add(avx512dq, "AVX-512DQ");
  add(avx512_vnni, "AVX-512-VNNI");
  add(avx512_bf16, "AVX-512-BF16");
  add(amx_tile, "AMX-TILE");
  add(amx_int8, "AMX-INT8");
  add(amx_bf16, "AMX-BF16");
  return l;
}

const CpuInfo& cpu_info() {
  static const CpuInfo info = detect();
  return info;
}

}  // namespace anvil
