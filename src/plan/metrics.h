// Throughput metrics of a training step: tokens/s, achieved FLOP/s, MFU and HFU against the GPU's
// datasheet peak (the FLOP count of docs/design.md), the time spent waiting for data, and memory in use.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

#include "model/config.h"

namespace tk {

// The dense bf16 (fp32-accumulate) matmul peak of a GPU, found by its CUDA device name
// ("NVIDIA H100 80GB HBM3" -> 989e12); 0 when the GPU is not in the table.
double gpu_peak_flops(const std::string& device_name);
// The streaming multiprocessors of a Hopper GPU (compute capability 9.0) found by its CUDA device name
// ("NVIDIA H100 PCIe" -> 114), 0 for other GPUs and names not in the table: where tokamak's own attention
// backward runs (PlanTarget::own_attention_sms), for plans made without the device.
int hopper_multiprocessors(const std::string& device_name);

// What the run executes on: the CUDA device's name or "cpu", and its peak rate when known.
struct DeviceInfo {
  std::string name;
  bool gpu = false;
  double peak_flops = 0;  // 0: unknown, so no MFU
  size_t memory_bytes = 0;  // the GPU's memory (0 on the CPU)
};
// The current CUDA device when `gpu`, else the CPU. peak_override > 0 replaces the table's value.
DeviceInfo describe_device(bool gpu, double peak_override);

// Device memory in use on the GPU (total minus free, as the driver reports it), else the process's
// resident set size.
size_t memory_in_use_bytes(bool gpu);

struct StepMetrics {
  double tokens_per_s = 0;
  double achieved_flops = 0;  // model FLOP/s
  double mfu = -1;            // model FLOPs utilisation in [0, 1]; -1 when the peak is unknown
  double hfu = -1;            // the same with recompute counted
  double data_wait_s = 0;     // seconds blocked waiting for the loader
  size_t memory_bytes = 0;
};

class ThroughputModel {
 public:
  // recompute_flops_per_token: FLOPs per token that the recompute policy repeats in the backward
  // (0 while every activation is kept); HFU counts them, MFU does not. devices: the GPUs (ranks) that compute the
  // tokens measure() is given, each a `device`: MFU is against their peaks together, so it is each one's share.
  ThroughputModel(const ModelConfig& cfg, int seq_len, const DeviceInfo& device, double recompute_flops_per_token = 0,
                  int devices = 1);

  double model_flops_per_token() const { return model_flops_per_token_; }
  double hardware_flops_per_token() const { return model_flops_per_token_ + recompute_flops_per_token_; }
  const DeviceInfo& device() const { return device_; }  // one of them
  int devices() const { return devices_; }
  // One line saying which peak MFU is measured against, or why there is no MFU.
  std::string peak_description() const;

  // tokens: what all the devices computed in `seconds` (a data-parallel step's global batch).
  StepMetrics measure(int64_t tokens, double seconds, double data_wait_s) const;

 private:
  DeviceInfo device_;
  int devices_ = 1;
  double model_flops_per_token_ = 0;
  double recompute_flops_per_token_ = 0;
};

}  // namespace tk
