// The ZeRO stages as the planner counts them (issue: data parallel over N GPUs): what each stage divides by N in a
// GPU's memory, and the bytes each GPU moves per optimizer step with the time of it that the backward cannot hide.
// Ring collectives: an all-reduce of S bytes moves 2 (N-1)/N S per GPU, a reduce-scatter or an all-gather (N-1)/N S;
// a link's bus bandwidth (what nccl-tests reports as busbw) times that is the collective's time.
#pragma once
#include <string>

#include "ops/moment_codec.h"
#include "plan/recipe.h"

namespace tk {

// The elements each unit is padded to a multiple of, times the world size, under ZeRO 1-3: a rank's slice of a unit
// is then whole int8 moment blocks (ModelOptions::unit_multiple).
constexpr int64_t kShardQuantum = kMomentBlock;

// What every unit of the parameter layout is padded to a multiple of (ModelOptions::unit_multiple). ZeRO 1-3: world x
// kShardQuantum. ZeRO 0 (and one process): 64, or kShardQuantum with narrow moments (bf16, int8), so that every unit
// starts an int8 block and the element indices that seed the moments' rounding noise are those of AdamW's reference
// layout (AdamW::noise_index): narrow moments then round alike at every world size.
int64_t zero_unit_multiple(int world, int zero_stage, MomentPrecision moments);

// Bus bandwidth per GPU of the interconnects `plan --interconnect` names, bytes/s. NVLink 4 (H100/H200 SXM) is
// 450 GB/s each way (NVIDIA's H100 datasheet: 900 GB/s bidirectional); NCCL's ring collectives reach ~80% of it
// without NVLink SHARP, 360 GB/s. PCIe x16 through the host: 47 GB/s each way was measured host <-> GPU on the
// H200 machine's PCIe 5 link (bench/NOTES.md), so 50 for gen 5 and half that, 25, for gen 4 ("pcie").
// NVLink 5 (B200) is 900 GB/s each way and NVLink 3 (A100 SXM, the H100 NVL bridge) 300, at the same 80%.
constexpr double kNvlinkBusBandwidth = 360e9;
constexpr double kNvlink5BusBandwidth = 720e9;
constexpr double kNvlink3BusBandwidth = 240e9;
constexpr double kPcie5BusBandwidth = 50e9;
constexpr double kPcie4BusBandwidth = 25e9;
// The names `plan --interconnect` takes, and a card's link (gpu_specs.h) is one of.
constexpr const char* kInterconnects[] = {"nvlink", "nvlink5", "nvlink3", "pcie", "pcie4", "pcie5"};
// nvlink (4), nvlink5, nvlink3, pcie (gen 4), pcie4 or pcie5; a tk::Error for another name.
double interconnect_bandwidth(const std::string& name);

// The largest unit the data-parallel code moves or holds at once: a layer's parameters, or the embedding / LM head
// group (model/grad_staging.h), in elements.
double zero_unit_elements(const ModelConfig& c);
// ZeRO 2 and 3: the elements of the three buffers each unit's gradient is staged in before it is reduce-scattered
// (model/grad_staging.h: the embedding / LM head group's and two of the largest layer's), beside the 1/N slice.
double zero_gradient_staging_elements(const ModelConfig& c);

// One GPU's share of the collectives of one optimizer step of r (r.world_size GPUs at r.zero_stage, r.accumulation
// micro-steps), gradients in f32, parameters in bf16:
//   0: all-reduce of the gradients after the last micro-step's backward;
//   1: the same, then an all-gather of the updated bf16 parameters;
//   2: a reduce-scatter of the gradients in every micro-step's backward, then the all-gather;
//   3: a reduce-scatter in every backward, and the parameters all-gathered layer by layer in every forward and again
//      in every backward (no all-gather after the update: each GPU updates its own shard).
// Overlap: a collective that runs during the forward or the backward hides behind its compute (forward_s and
// backward_s, one micro-step's); what exceeds that compute is exposed, and so is one unit's share that nothing can
// hide (the last gradients reduced, the first layer gathered). The all-gather after the update (ZeRO 1, 2) runs
// beside the next step's first forward, unit by unit as it reaches them.
struct ZeroCommunication {
  double bytes = 0;            // moved by one GPU per optimizer step
  double seconds = 0;          // at the link's bus bandwidth
  double exposed_seconds = 0;  // what overlap leaves on the step's critical path
};
ZeroCommunication zero_communication(const Recipe& r, double forward_s, double backward_s, double link_bandwidth);

}  // namespace tk
