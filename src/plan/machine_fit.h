// Whether a run fits the machine before anything is allocated: the memory the device has (the GPU's, or the
// CPU's physical memory) and the host's for offloaded state, against the run's memory plan (memory_plan.h); a plan
// that does not fit is refused naming the model's size, the largest part and the config field behind it.
#pragma once
#include <string>

#include "model/config.h"

namespace tk {

struct Backend;
struct MemoryPlan;
struct PlanTarget;

// The memory a run may take: the device's (the GPU's, or for the CPU backend the machine's physical memory),
// and the machine's physical memory, where offloaded state lives.
struct MachineMemory {
  double device_bytes = 0;  // 0: unknown, not checked
  double host_bytes = 0;    // 0: unknown, not checked
  std::string device;       // what device_bytes is, in words
  bool gpu = false;
};
MachineMemory machine_memory(bool gpu);
// A tk::Error when a run planned as `plan` (memory_plan.h) cannot fit `machine`, naming the model's size, the
// plan's largest part and the config field that drives it: called before anything is allocated.
void refuse_plan_larger_than(const ModelConfig& model, const MemoryPlan& plan, const MachineMemory& machine);

// The memory plan's view of the device this process runs on (memory_plan.h), for a budget search on it (train and
// bench --memory-budget): which attention backward it runs, the link between its host's GPUs as the card table gives
// it (a card the table lacks keeps NVLink's), the host memory offload may pin (local_host_memory_limit), and its
// peak for the speed prediction (peak_tflops when given, else describe_device's, else 989 TFLOP/s).
PlanTarget running_plan_target(const Backend& be, double peak_tflops = 0);

}  // namespace tk
