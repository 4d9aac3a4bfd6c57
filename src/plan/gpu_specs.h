// The GPUs tokamak knows by their datasheets: memory, memory bandwidth, dense bf16 and FP8 tensor rates, compute
// capability and SM count. One table serves MFU's peak (found by the CUDA device name) and `tokamak plan --gpu NAME`
// (found by the name a user types), so that a plan for a card and a run on it use the same figures.
#pragma once
#include <string>
#include <vector>

namespace tk {

struct PlanTarget;

struct GpuSpec {
  const char* name;         // what `plan --gpu` lists and matches: "RTX 4080", "H100 SXM"
  const char* device_key;   // matched as whole words in CUDA device names ("NVIDIA GeForce RTX 4080")
  double memory_gib;        // the card's memory
  double bandwidth_gbs;     // memory bandwidth, GB/s
  double bf16_tflops;       // dense bf16 tensor rate with fp32 accumulation (what cuBLAS runs)
  double fp8_tflops;        // dense FP8 tensor rate with fp32 accumulation (cuBLASLt's); 0: no FP8 tensor cores
  int cc_major, cc_minor;   // compute capability
  int sms;                  // streaming multiprocessors
  const char* link;         // how several of them in one host talk, an interconnect `plan --interconnect` names
  int pcie_gen, pcie_lanes;  // its link to the host: offload's transfers (host_bandwidth)
  bool display;             // drives displays (GeForce and RTX workstation cards), see plan_budget_bytes

  bool fp8_tensor_cores() const { return fp8_tflops > 0; }
  std::string compute_capability() const { return std::to_string(cc_major) + "." + std::to_string(cc_minor); }
};

// Every card, most specific device keys first ("H100 PCIe" before "H100").
const std::vector<GpuSpec>& gpu_specs();

// The card a CUDA device name names ("NVIDIA H100 80GB HBM3" -> H100 SXM), or null when none does.
const GpuSpec* gpu_spec_by_device_name(const std::string& device_name);

// What a user's text names: case-insensitive, "NVIDIA " and "GeForce " optional. The card of that exact name is the
// answer. Else the cards whose names begin with the text are candidates, never the answer: a card's whole name may
// begin another's ("RTX 4070" begins "RTX 4070 Ti SUPER", a 16 GB card for a 12 GB one), and a card the table lacks
// must not be planned as another. Else the card a CUDA device name names ("NVIDIA H100 80GB HBM3"), else nothing.
struct GpuLookup {
  const GpuSpec* card = nullptr;
  std::vector<const GpuSpec*> candidates;  // when no card is named exactly: those whose names begin with the text
};
GpuLookup find_gpu_spec(const std::string& text);

// Every card's name, comma-separated ("B200, H200 NVL, ..."): what `plan --help` lists.
std::string gpu_names();

// The device memory a plan for the card may fill: all of it, less kDisplayHeadroomBytes on a card that drives
// displays, whose desktop (compositor, browser) and driver hold memory a training run cannot have (docs/plan.md).
constexpr double kDisplayHeadroomBytes = double(1ull << 30);
double plan_budget_bytes(const GpuSpec& gpu);

// Bytes/s each way between page-locked host memory and the card: PlanTarget's measured PCIe 5 x16 figure, halved per
// generation below 5 and scaled by the lanes (a PCIe 4 x16 card gets half, a PCIe 4 x8 one a quarter).
double host_bandwidth(const GpuSpec& gpu);

// What the plan's speed model assumes of a card: its dense bf16 peak at the GEMM and attention efficiencies measured
// on the H200 (PlanTarget's defaults), its bandwidth at the share of the datasheet figure a device copy reached
// there (4.27 of 4.8 TB/s, bench/NOTES.md), tokamak's own attention backward on Hopper cards, its link's bus
// bandwidth between the GPUs of one host, and its host link's (host_bandwidth).
PlanTarget plan_target_for(const GpuSpec& gpu);
constexpr double kAchievedBandwidthShare = 4.27 / 4.8;

}  // namespace tk
