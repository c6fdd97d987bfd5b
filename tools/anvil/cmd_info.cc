// anvil info: what the CPU offers and what Anvil will run on it.
#include <fmt/format.h>
#include <omp.h>

#include "anvil/cpu.h"
#include "commands.h"

namespace anvil::cli {

Command add_info(CLI::App& app) {
  return [] {
    const CpuInfo& c = cpu_info();
    fmt::print("cpu:            {} ({})\n", c.model_name, c.vendor);
    fmt::print("cores:          {} physical, {} logical\n", c.physical_cores, c.logical_cores);
    fmt::print("caches:         L1d {}, L2 {}, L3 {} (per instance)\n", format_bytes(c.l1d_bytes),
               format_bytes(c.l2_bytes), format_bytes(c.l3_bytes));
    std::string isa;
    for (const auto& s : c.isa_list()) isa += (isa.empty() ? "" : " ") + s;
    fmt::print("isa:            {}\n", isa);
    fmt::print("onednn:         {} (isa {})\n", dnnl_version(), dnnl_isa_name());
    fmt::print("threads:        {} (OpenMP default)\n", omp_get_max_threads());
    return 0;
  };
}

}  // namespace anvil::cli
