// The GPU table (gpu_specs.h) and its two lookups. Every figure is the vendor's dense one (half the "with sparsity"
// figure datasheets lead with); GeForce cards' bf16 and FP8 rates are those with fp32 accumulation, half of their
// fp16-accumulate figures, because cuBLAS accumulates bf16 and FP8 GEMMs in fp32. Where NVIDIA gives no tensor figure
// (RTX 3060, 3080 Ti, the 4070s, 5070s and 5080) the rate is SMs x boost clock x the architecture's dense rate per SM
// per clock, taken from the architecture's whitepaper figures for a sibling card (512 bf16 FLOPs a clock with fp32
// accumulation on Ampere's GA10x, Ada and consumer Blackwell; twice that in FP8).
#include "plan/gpu_specs.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <sstream>

#include "plan/memory_plan.h"
#include "plan/zero_plan.h"

namespace tk {

const std::vector<GpuSpec>& gpu_specs() {
  static const std::vector<GpuSpec> table = {
      // name, device key, GiB, GB/s, bf16 TFLOP/s, FP8 TFLOP/s, compute capability, SMs, the link between such cards
      // in one host (zero_plan.h: NVLink 5, 4 and 3 on SXM boards and NVL bridges, else the card's PCIe generation;
      // the A800's cut-down NVLink and the bridges consumer cards once had are not assumed), the PCIe generation and
      // lanes of its host link (offload's transfers), and whether it drives displays (GeForce and RTX workstation
      // cards: plan_budget_bytes keeps room for them)
      // NVIDIA DGX B200 datasheet (per GPU: 1,440 GB and 64 TB/s over 8; 72 PFLOPS FP8 training over 8, sparse).
      {"B200", "B200", 180, 8000, 2250, 4500, 10, 0, 148, "nvlink5", 5, 16, false},
      // NVIDIA H200 datasheet, NVL column: 141 GB, 4.8 TB/s, BF16 1,671 and FP8 3,341 TFLOPS sparse.
      {"H200 NVL", "H200 NVL", 140.4, 4800, 835, 1671, 9, 0, 132, "nvlink", 5, 16, false},
      // NVIDIA H200 datasheet, SXM column: BF16 1,979 and FP8 3,958 TFLOPS sparse, 4.8 TB/s. 141 GB on the sheet; the
      // driver reports 143,771 MiB.
      {"H200", "H200", 140.4, 4800, 989, 1979, 9, 0, 132, "nvlink", 5, 16, false},
      // NVIDIA GH200 datasheet (96 GB HBM3, 4 TB/s; the Hopper GPU's SXM rates). Its host link is NVLink-C2C to the
      // Grace CPU, planned as PCIe 5 x16: a lower bound.
      {"GH200", "GH200", 96, 4000, 989, 1979, 9, 0, 132, "nvlink", 5, 16, false},
      // NVIDIA H100 datasheet, NVL column: 94 GB, 3.9 TB/s, BF16 1,671 and FP8 3,341 TFLOPS sparse.
      {"H100 NVL", "H100 NVL", 94, 3900, 835, 1671, 9, 0, 132, "nvlink3", 5, 16, false},
      // NVIDIA H100 datasheet, PCIe column: 80 GB, 2 TB/s, BF16 1,513 and FP8 3,026 TFLOPS sparse; 114 SMs.
      {"H100 PCIe", "H100 PCIe", 80, 2000, 756, 1513, 9, 0, 114, "pcie5", 5, 16, false},
      // NVIDIA H100 datasheet, SXM column: 80 GB, 3.35 TB/s, BF16 1,979 and FP8 3,958 TFLOPS sparse.
      {"H100 SXM", "H100", 80, 3350, 989, 1979, 9, 0, 132, "nvlink", 5, 16, false},
      // NVIDIA A100 datasheet: BF16 312 TFLOPS dense (624 sparse); 80GB SXM 2,039 GB/s, 40GB 1,555 GB/s. No FP8.
      {"A100 80GB", "A100 80GB", 80, 2039, 312, 0, 8, 0, 108, "nvlink3", 4, 16, false},
      {"A100 40GB", "A100", 40, 1555, 312, 0, 8, 0, 108, "nvlink3", 4, 16, false},
      // NVIDIA A800 datasheet (A100's rates, 80 GB, 2,039 GB/s).
      {"A800", "A800", 80, 2039, 312, 0, 8, 0, 108, "pcie4", 4, 16, false},
      // NVIDIA L40S datasheet: 48 GB, 864 GB/s, BF16 362.05 | 733 and FP8 733 | 1,466 TFLOPS (dense | sparse).
      {"L40S", "L40S", 48, 864, 362, 733, 8, 9, 142, "pcie4", 4, 16, false},
      // NVIDIA L40 datasheet: 48 GB, 864 GB/s, BF16 181.05 | 362.1 and FP8 362 | 724 TFLOPS.
      {"L40", "L40", 48, 864, 181, 362, 8, 9, 142, "pcie4", 4, 16, false},
      // NVIDIA L4 datasheet: 24 GB, 300 GB/s, BF16 242 and FP8 485 TFLOPS sparse.
      {"L4", "L4", 24, 300, 121, 242.5, 8, 9, 58, "pcie4", 4, 16, false},
      // NVIDIA A10 datasheet: 24 GB, 600 GB/s, BF16 125 | 250 TFLOPS. No FP8.
      {"A10", "A10", 24, 600, 125, 0, 8, 6, 72, "pcie4", 4, 16, false},
      // NVIDIA RTX 6000 Ada datasheet: 48 GB, 960 GB/s, FP8 1,457 TFLOPS sparse (full-rate fp32 accumulation).
      {"RTX 6000 Ada", "RTX 6000 Ada", 48, 960, 364.2, 728.5, 8, 9, 142, "pcie4", 4, 16, true},
      // NVIDIA RTX A6000 datasheet: 48 GB, 768 GB/s, tensor 309.7 TFLOPS sparse.
      {"RTX A6000", "RTX A6000", 48, 768, 154.8, 0, 8, 6, 84, "pcie4", 4, 16, true},
      // NVIDIA RTX Blackwell GPU architecture whitepaper, RTX 5090: 32 GB, 1,792 GB/s, FP16/BF16 tensor with FP32
      // accumulate 209.5 dense, FP8 with FP32 accumulate 419 dense.
      {"RTX 5090", "RTX 5090", 32, 1792, 209.5, 419, 12, 0, 170, "pcie5", 5, 16, true},
      // NVIDIA RTX 5080 spec page: 84 SMs, 2.62 GHz boost, 16 GB at 960 GB/s; at the 5090's 512 bf16 (1,024 FP8)
      // FLOPs per SM per clock with fp32 accumulation.
      {"RTX 5080", "RTX 5080", 16, 960, 112.6, 225.1, 12, 0, 84, "pcie5", 5, 16, true},
      // NVIDIA RTX 5070 Ti and 5070 spec pages: 70 SMs at 2.45 GHz boost, 16 GB at 896 GB/s; 48 SMs at 2.51 GHz, 12
      // GB at 672 GB/s; PCIe 5.0 x16; the 5090's per-SM rates as for the 5080.
      {"RTX 5070 Ti", "RTX 5070 Ti", 16, 896, 87.8, 175.6, 12, 0, 70, "pcie5", 5, 16, true},
      {"RTX 5070", "RTX 5070", 12, 672, 61.7, 123.4, 12, 0, 48, "pcie5", 5, 16, true},
      // NVIDIA Ada Lovelace architecture whitepaper, RTX 4090: 24 GB, 1,008 GB/s, FP16 tensor with FP32 accumulate
      // 165.2 dense, FP8 with FP32 accumulate 330.3 dense.
      {"RTX 4090", "RTX 4090", 24, 1008, 165.2, 330.3, 8, 9, 128, "pcie4", 4, 16, true},
      // NVIDIA RTX 4080 SUPER spec page: 80 SMs, 2.55 GHz boost, 16 GB at 736 GB/s; Ada's 512 (1,024 FP8) per SM per
      // clock.
      {"RTX 4080 SUPER", "RTX 4080 SUPER", 16, 736, 104.4, 208.9, 8, 9, 80, "pcie4", 4, 16, true},
      // Ada whitepaper, RTX 4080: 16 GB, 716.8 GB/s, 97.5 and FP8 194.9 dense, FP32 accumulate.
      {"RTX 4080", "RTX 4080", 16, 716.8, 97.5, 194.9, 8, 9, 76, "pcie4", 4, 16, true},
      // NVIDIA RTX 4070 Ti SUPER spec page: 66 SMs, 2.61 GHz boost, 16 GB at 672 GB/s; Ada's per-SM rates.
      {"RTX 4070 Ti SUPER", "RTX 4070 Ti SUPER", 16, 672, 88.2, 176.4, 8, 9, 66, "pcie4", 4, 16, true},
      // NVIDIA RTX 4070 family spec page: 4070 Ti 60 SMs at 2.61 GHz, 4070 SUPER 56 at 2.475 GHz, 4070 46 at 2.475
      // GHz, each 12 GB at 504 GB/s on PCIe 4.0 x16; Ada's per-SM rates (their FP8 "AI TOPS", 641, 568 and 466, are
      // these FP8 rates x 4: sparse, fp16 accumulation).
      {"RTX 4070 Ti", "RTX 4070 Ti", 12, 504, 80.2, 160.4, 8, 9, 60, "pcie4", 4, 16, true},
      {"RTX 4070 SUPER", "RTX 4070 SUPER", 12, 504, 71.0, 141.9, 8, 9, 56, "pcie4", 4, 16, true},
      {"RTX 4070", "RTX 4070", 12, 504, 58.3, 116.6, 8, 9, 46, "pcie4", 4, 16, true},
      // NVIDIA RTX 4060 Ti spec page: 34 SMs, 2.535 GHz boost, 16 GB model at 288 GB/s, PCIe 4.0 x8; Ada's per-SM
      // rates.
      {"RTX 4060 Ti 16GB", "RTX 4060 Ti", 16, 288, 44.1, 88.3, 8, 9, 34, "pcie4", 4, 8, true},
      // NVIDIA Ampere GA102 whitepaper: RTX 3090 Ti 80 TFLOPS FP16 tensor with FP32 accumulate (dense), 24 GB, 1,008
      // GB/s; RTX 3090 71, 24 GB, 936 GB/s; RTX 3080 59.5, 10 GB, 760 GB/s. Ampere has no FP8.
      {"RTX 3090 Ti", "RTX 3090 Ti", 24, 1008, 80, 0, 8, 6, 84, "pcie4", 4, 16, true},
      {"RTX 3090", "RTX 3090", 24, 936, 71, 0, 8, 6, 82, "pcie4", 4, 16, true},
      // NVIDIA RTX 3080 Ti spec page: 80 SMs, 1.665 GHz boost, 12 GB at 912 GB/s; GA10x's per-SM rate as below.
      {"RTX 3080 Ti", "RTX 3080 Ti", 12, 912, 68.2, 0, 8, 6, 80, "pcie4", 4, 16, true},
      {"RTX 3080", "RTX 3080", 10, 760, 59.5, 0, 8, 6, 68, "pcie4", 4, 16, true},
      // NVIDIA RTX 3060 spec page: 28 SMs, 1.78 GHz boost, 12 GB at 360 GB/s; GA10x's 512 FLOPs per SM per clock
      // (the 3090's 71 TFLOPS over 82 SMs at 1.695 GHz).
      {"RTX 3060 12GB", "RTX 3060", 12, 360, 25.5, 0, 8, 6, 28, "pcie4", 4, 16, true},
  };
  return table;
}

namespace {

bool is_word_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) != 0; }

// True when `key` occurs in `name` with no letter or digit right before or after it, so that "A10" does not match
// "A100" and "H200" does not match "GH200".
bool contains_word(const std::string& name, const std::string& key) {
  for (size_t at = name.find(key); at != std::string::npos; at = name.find(key, at + 1)) {
    const bool starts = at == 0 || !is_word_char(name[at - 1]);
    const size_t end = at + key.size();
    const bool ends = end == name.size() || !is_word_char(name[end]);
    if (starts && ends) return true;
  }
  return false;
}

// Every word of the key is a word of the name: "A100 80GB" names "NVIDIA A100-SXM4-80GB".
bool names_device(const std::string& device_name, const std::string& key) {
  std::istringstream words(key);
  for (std::string word; words >> word;)
    if (!contains_word(device_name, word)) return false;
  return true;
}

// Lower case, single spaces, without a leading "nvidia " or "geforce ".
std::string normalized(const std::string& text) {
  std::string out;
  for (char c : text) {
    if (std::isspace(static_cast<unsigned char>(c))) {
      if (!out.empty() && out.back() != ' ') out += ' ';
    } else {
      out += char(std::tolower(static_cast<unsigned char>(c)));
    }
  }
  while (!out.empty() && out.back() == ' ') out.pop_back();
  for (const char* prefix : {"nvidia ", "geforce "})
    if (out.rfind(prefix, 0) == 0) out.erase(0, std::string(prefix).size());
  return out;
}

}  // namespace

const GpuSpec* gpu_spec_by_device_name(const std::string& device_name) {
  for (const GpuSpec& g : gpu_specs())
    if (names_device(device_name, g.device_key)) return &g;
  return nullptr;
}

GpuLookup find_gpu_spec(const std::string& text) {
  const std::string wanted = normalized(text);
  GpuLookup found;
  for (const GpuSpec& g : gpu_specs())
    if (normalized(g.name) == wanted) return {&g, {}};
  for (const GpuSpec& g : gpu_specs())
    if (!wanted.empty() && normalized(g.name).rfind(wanted, 0) == 0) found.candidates.push_back(&g);
  if (found.candidates.empty()) found.card = gpu_spec_by_device_name(text);
  return found;
}

std::string gpu_names() {
  std::string names;
  for (const GpuSpec& g : gpu_specs()) names += (names.empty() ? "" : ", ") + std::string(g.name);
  return names;
}

double plan_budget_bytes(const GpuSpec& gpu) {
  return gpu.memory_gib * double(1ull << 30) - (gpu.display ? kDisplayHeadroomBytes : 0.0);
}

double host_bandwidth(const GpuSpec& gpu) {
  return PlanTarget{}.host_bandwidth * std::ldexp(1.0, gpu.pcie_gen - 5) * gpu.pcie_lanes / 16.0;
}

PlanTarget plan_target_for(const GpuSpec& gpu) {
  PlanTarget t;
  t.host_bandwidth = host_bandwidth(gpu);
  t.peak_flops = gpu.bf16_tflops * 1e12;
  t.bandwidth = gpu.bandwidth_gbs * 1e9 * kAchievedBandwidthShare;
  t.own_attention_sms = gpu.cc_major == 9 && gpu.cc_minor == 0 ? gpu.sms : 0;
  t.link_bandwidth = interconnect_bandwidth(gpu.link);
  return t;
}

}  // namespace tk
