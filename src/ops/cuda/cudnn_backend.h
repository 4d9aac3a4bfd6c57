// A small builder over cuDNN's backend API (cudnn_graph.h): descriptors with owned lifetimes, an operation
// graph of tensors and operations, and its finalisation into an execution plan through cuDNN's heuristics.
// attention_cudnn.cpp describes the flash-attention graphs with it; nothing here knows about attention.
#pragma once
#include <cudnn.h>

#include <cstdint>
#include <string>
#include <vector>

namespace tk::cuda::cudnn {

using Dims = std::vector<int64_t>;

// One backend descriptor, destroyed with its owner. Setters throw tk::Error naming the attribute.
class Descriptor {
 public:
  explicit Descriptor(cudnnBackendDescriptorType_t type);
  ~Descriptor();
  Descriptor(Descriptor&& other) noexcept;
  Descriptor& operator=(Descriptor&& other) noexcept;
  Descriptor(const Descriptor&) = delete;
  Descriptor& operator=(const Descriptor&) = delete;

  cudnnBackendDescriptor_t get() const { return desc_; }

  Descriptor& set(cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type, int64_t count,
                  const void* values);
  Descriptor& set_i64(cudnnBackendAttributeName_t name, int64_t v) { return set(name, CUDNN_TYPE_INT64, 1, &v); }
  Descriptor& set_i64s(cudnnBackendAttributeName_t name, const Dims& v) {
    return set(name, CUDNN_TYPE_INT64, int64_t(v.size()), v.data());
  }
  Descriptor& set_bool(cudnnBackendAttributeName_t name, bool v) { return set(name, CUDNN_TYPE_BOOLEAN, 1, &v); }
  Descriptor& set_dtype(cudnnBackendAttributeName_t name, cudnnDataType_t v) {
    return set(name, CUDNN_TYPE_DATA_TYPE, 1, &v);
  }
  Descriptor& set_desc(cudnnBackendAttributeName_t name, cudnnBackendDescriptor_t v) {
    return set(name, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &v);
  }
  // Finalizes; `what` names the object in the error ("the attention forward graph").
  Descriptor& finalize(const std::string& what);

 private:
  cudnnBackendDescriptor_t desc_ = nullptr;
  cudnnBackendDescriptorType_t type_;
};

// A finalized execution plan with every descriptor it was built from kept alive beside it.
class ExecutionPlan {
 public:
  ExecutionPlan(Descriptor plan, std::vector<Descriptor> parts, int64_t workspace_bytes, int64_t engine,
                bool deterministic);
  int64_t workspace_bytes() const { return workspace_bytes_; }
  int64_t engine() const { return engine_; }             // cuDNN's global engine index, for logs
  bool deterministic() const { return deterministic_; }  // the engine does not declare itself nondeterministic
  // Runs the plan on the handle's stream. uids[i] names the tensor whose data is at pointers[i]
  // (device memory, or host memory for by-value scalars).
  void execute(cudnnHandle_t handle, const std::vector<int64_t>& uids, const std::vector<void*>& pointers,
               void* workspace) const;

 private:
  Descriptor plan_;
  std::vector<Descriptor> parts_;
  int64_t workspace_bytes_ = 0, engine_ = -1;
  bool deterministic_ = false;
};

// Describes one operation graph. Tensors are returned as raw descriptors owned by the builder; each
// operation writes its first argument (y / c).
class GraphBuilder {
 public:
  explicit GraphBuilder(cudnnHandle_t handle) : handle_(handle) {}

  // A tensor in memory, bound at execution by uid. All tensors are rank 4 here.
  cudnnBackendDescriptor_t tensor(int64_t uid, cudnnDataType_t type, const Dims& dims, const Dims& strides);
  // A scalar passed by value from host memory at execution (dims and strides all 1).
  cudnnBackendDescriptor_t scalar(int64_t uid, cudnnDataType_t type);
  // An intermediate that only lives inside the fused kernel.
  cudnnBackendDescriptor_t virtual_tensor(cudnnDataType_t type, const Dims& dims, const Dims& strides);

  // y = mode(x[, b[, t]]) computed in `math` precision; axis only for GEN_INDEX.
  void pointwise(cudnnPointwiseMode_t mode, cudnnBackendDescriptor_t y, cudnnBackendDescriptor_t x,
                 cudnnBackendDescriptor_t b = nullptr, cudnnBackendDescriptor_t t = nullptr,
                 cudnnDataType_t math = CUDNN_DATA_FLOAT, int64_t axis = -1);
  // y = reduce(x) over the dimensions where y has extent 1 (or over groups, where y's extent divides x's).
  void reduction(cudnnReduceTensorOp_t op, cudnnBackendDescriptor_t y, cudnnBackendDescriptor_t x);
  // c = a @ b over the last two dimensions, batched (and broadcast) over the first two; f32 accumulation.
  // The overrides (int32 [B,1,1,1] tensors, or null) give per-batch actual extents of m, n, k.
  void matmul(cudnnBackendDescriptor_t c, cudnnBackendDescriptor_t a, cudnnBackendDescriptor_t b,
              cudnnBackendDescriptor_t m_override = nullptr, cudnnBackendDescriptor_t n_override = nullptr,
              cudnnBackendDescriptor_t k_override = nullptr);
  // y = x viewed with y's dims and strides.
  void reshape(cudnnBackendDescriptor_t y, cudnnBackendDescriptor_t x);

  // Finalizes the graph, asks cuDNN's heuristics (mode A) for engine configurations and keeps the first
  // that finalizes, preferring engines that do not declare themselves nondeterministic. `what` names
  // the graph in errors. The builder is spent afterwards.
  ExecutionPlan build(const std::string& what);

 private:
  cudnnBackendDescriptor_t keep(Descriptor d);

  cudnnHandle_t handle_;
  std::vector<Descriptor> tensors_, ops_;
  int64_t next_virtual_uid_ = int64_t(1) << 40;  // far from the uids callers choose
};

}  // namespace tk::cuda::cudnn
