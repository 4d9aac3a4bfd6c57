// The ZeRO stages' communication (zero_plan.h).
#include "plan/zero_plan.h"

#include <algorithm>

#include "core/error.h"
#include "model/grad_staging.h"
#include "model/params.h"

namespace tk {

int64_t zero_unit_multiple(int world, int zero_stage, MomentPrecision moments) {
  if (zero_stage > 0) return int64_t(world) * kShardQuantum;
  return moments == MomentPrecision::F32 ? 64 : kShardQuantum;
}

double interconnect_bandwidth(const std::string& name) {
  if (name == "nvlink") return kNvlinkBusBandwidth;
  if (name == "nvlink5") return kNvlink5BusBandwidth;
  if (name == "nvlink3") return kNvlink3BusBandwidth;
  if (name == "pcie" || name == "pcie4") return kPcie4BusBandwidth;
  if (name == "pcie5") return kPcie5BusBandwidth;
  fail("--interconnect is '{}': it must be nvlink, nvlink5, nvlink3, pcie (gen 4), pcie4 or pcie5", name);
}

double zero_unit_elements(const ModelConfig& c) {
  const auto [outer, layer] = gradient_stage_elements(c, ParamLayout::build(c));
  return double(std::max(outer, layer));
}

double zero_gradient_staging_elements(const ModelConfig& c) {
  const auto [outer, layer] = gradient_stage_elements(c, ParamLayout::build(c));
  return double(outer + 2 * layer);
}

ZeroCommunication zero_communication(const Recipe& r, double forward_s, double backward_s, double link_bandwidth) {
  ZeroCommunication z;
  const double n = r.world_size;
  if (n <= 1) return z;
  const double P = double(ParamLayout::build(r.model).total), share = (n - 1) / n;
  const double unit = std::min(1.0, zero_unit_elements(r.model) / P);  // the unit's share of every collective
  const double gradients = 4 * P, parameters = 2 * P, accum = r.accumulation;
  auto seconds = [&](double bytes) { return bytes / link_bandwidth; };
  // A collective of `s` seconds beside `compute` seconds of work: the excess, and the unit nothing hides.
  auto exposed = [&](double s, double compute, double unhidden) { return std::max(0.0, s - compute) + unhidden; };
  if (r.zero_stage <= 1) {
    const double all_reduce = 2 * share * gradients;
    z.bytes = all_reduce;
    z.exposed_seconds = exposed(seconds(all_reduce), backward_s, unit * seconds(all_reduce));
  } else {
    const double reduce_scatter = share * gradients;
    const double gathers = r.zero_stage == 3 ? share * parameters : 0;  // each forward, and each backward
    z.bytes = accum * (reduce_scatter + 2 * gathers);
    z.exposed_seconds =
        accum * (exposed(seconds(gathers), forward_s, unit * seconds(gathers)) +
                 exposed(seconds(gathers + reduce_scatter), backward_s, unit * seconds(reduce_scatter)));
  }
  if (r.zero_stage == 1 || r.zero_stage == 2) {  // after the update, beside the next step's first forward
    const double all_gather = share * parameters;
    z.bytes += all_gather;
    z.exposed_seconds += exposed(seconds(all_gather), forward_s, unit * seconds(all_gather));
  }
  z.seconds = seconds(z.bytes);
  return z;
}

}  // namespace tk
