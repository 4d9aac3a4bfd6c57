// The machine's memory and the refusal of a run planned larger than it (machine_fit.h).
#include "plan/machine_fit.h"

#include <unistd.h>

#include <fmt/format.h>

#include "backend/backend.h"
#include "core/error.h"
#include "core/format.h"
#include "ops/device_info.h"
#include "plan/gpu_specs.h"
#include "plan/memory_plan.h"
#include "plan/metrics.h"

namespace tk {

MachineMemory machine_memory(bool gpu) {
  MachineMemory m;
  m.gpu = gpu;
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
  m.host_bytes = pages > 0 && page > 0 ? double(pages) * double(page) : 0.0;
  if (gpu) {
    const DeviceInfo d = describe_device(true, 0);
    m.device_bytes = double(d.memory_bytes);
    m.device = fmt::format("the memory of the GPU ({})", d.name);
  } else {
    m.device_bytes = m.host_bytes;
    m.device = "the machine's physical memory (the CPU backend)";
  }
  return m;
}

namespace {

// The config field behind a plan row: the layers or the vocabulary for what scales with the parameters, the
// micro-batch for the activations and the step's scratch.
std::string field_driving(const ModelConfig& c, const PlanRow& row, int B, int T) {
  const double d = c.d_model, q = c.q_dim(), k = c.kv_dim(), f = c.ffn_dim;
  const double per_layer = 2 * d + d * q + 2 * d * k + q * d + 3 * d * f;
  const double layers = double(c.n_layers) * per_layer;
  const double embeddings = double(c.vocab_size) * d * (c.tied_embeddings ? 1 : 2);
  const bool params = row.component.find("parameter") != std::string::npos ||
                      row.component.find("master weights") != std::string::npos ||
                      row.component.find("AdamW") != std::string::npos;
  if (!params)
    return fmt::format("the micro-batch, --batch {} x --seq {} tokens, over num_hidden_layers = {} (a smaller --batch "
                       "or --seq, or --recompute, makes it smaller)",
                       B, T, c.n_layers);
  if (layers >= embeddings)
    return fmt::format("num_hidden_layers = {}, of {} parameters each (hidden_size {}, intermediate_size {})",
                       c.n_layers, format_count(per_layer), c.d_model, c.ffn_dim);
  return fmt::format("vocab_size = {}, of hidden_size {} parameters each{}", c.vocab_size, c.d_model,
                     c.tied_embeddings ? "" : ", twice (embeddings and LM head)");
}

}  // namespace

void refuse_plan_larger_than(const ModelConfig& c, const MemoryPlan& plan, const MachineMemory& machine) {
  const bool device_fits = machine.device_bytes <= 0 || plan.total_bytes <= machine.device_bytes;
  const bool host_fits = machine.host_bytes <= 0 || plan.host_bytes <= machine.host_bytes;
  if (device_fits && host_fits) return;
  // What does not fit: the device's part of the plan, else the offloaded part in host memory.
  const bool host = device_fits;
  const PlanRow* top = nullptr;
  for (const PlanRow& r : plan.rows)
    if (r.host == host && (!top || r.bytes > top->bytes)) top = &r;
  TK_CHECK(top, "internal error: a memory plan over the machine's memory has no rows");
  const std::string planned = host ? format_bytes(plan.host_bytes) + " of offloaded state in host memory"
                                   : format_bytes(plan.total_bytes);
  const std::string capacity = host ? format_bytes(machine.host_bytes) + " of the machine's physical memory"
                                    : format_bytes(machine.device_bytes) + " of " + machine.device;
  const bool suggest_budget = machine.gpu && !host && !plan.recipe.optimizer.offload;
  fail("model {} ({} parameters) does not fit this machine: its run plans {} against {}; the largest part is {} ({}), "
       "driven by {}. Nothing was allocated for it{}",
       c.name, format_count(double(c.total_params())), planned, capacity, top->component, format_bytes(top->bytes),
       field_driving(c, *top, plan.recipe.batch, plan.recipe.seq),
       suggest_budget ? " (--memory-budget finds a setting that fits, with offload and recompute)" : "");
}

PlanTarget running_plan_target(const Backend& be, double peak_tflops) {
  PlanTarget target;
  target.own_attention_sms = own_attention_backward_sms(be);
  const std::optional<GpuInfo> gpu = be.gpu ? current_gpu() : std::nullopt;
  if (const GpuSpec* card = gpu ? gpu_spec_by_device_name(gpu->name) : nullptr) {
    target.link_bandwidth = interconnect_bandwidth(card->link);
    target.host_bandwidth = host_bandwidth(*card);
  }
  target.host_memory_limit = local_host_memory_limit();
  target.peak_flops = describe_device(be.gpu, peak_tflops * 1e12).peak_flops;
  if (target.peak_flops <= 0) target.peak_flops = 989e12;
  return target;
}

}  // namespace tk
