// The ceilings a profile holds each op against, measured on the machine itself: the rate of one large
// GEMM and the bandwidth of one large copy. A GPU's are measured once per GPU name and kept in a cache
// file; the CPU's are measured at every profile (well under a second).
#pragma once
#include <string>

#include "ops/ops.h"

namespace tk {

struct Ceilings {
  double matmul_flops = 0;      // FLOP/s of an 8192^3 bf16 GEMM (CUDA) or a 1024^3 f32 GEMM (CPU)
  double copy_bytes_per_s = 0;  // bytes read plus bytes written per second: a 1 GiB device-to-device
                                // copy (CUDA) or a 256 MiB memcpy (CPU)
  std::string source;           // "measured now" or "cache FILE"
};

// Measures both on `ops` now: the GEMM through its linear_forward, timed with its timing marks.
Ceilings measure_ceilings(Ops& ops, bool gpu);

// $XDG_CACHE_HOME/tokamak/ceilings.json, else ~/.cache/tokamak/ceilings.json.
std::string ceilings_cache_path();

// The ceilings of the device `--device` selects, whose name is `device_name`: on a GPU from the cache
// file when it holds that GPU, else measured on a backend made for the purpose (before the model takes
// the memory) and added to the cache; on the CPU measured now.
Ceilings find_ceilings(const std::string& device_flag, const std::string& device_name, bool gpu);

}  // namespace tk
