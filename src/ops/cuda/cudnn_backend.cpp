// The cuDNN backend-descriptor builder: every attribute is set through Descriptor::set, which turns a
// rejected attribute into a tk::Error naming it, and GraphBuilder::build follows the backend API's own
// sequence: operation graph -> engine heuristics -> engine configs -> execution plan.
#include "ops/cuda/cudnn_backend.h"

#include <utility>

#include "core/error.h"
#include "core/log.h"

namespace tk::cuda::cudnn {

Descriptor::Descriptor(cudnnBackendDescriptorType_t type) : type_(type) {
  cudnnStatus_t status = cudnnBackendCreateDescriptor(type, &desc_);
  TK_CHECK(status == CUDNN_STATUS_SUCCESS, "cuDNN could not create a backend descriptor of type {}: {}", int(type),
           cudnnGetErrorString(status));
}

Descriptor::~Descriptor() {
  if (desc_) cudnnBackendDestroyDescriptor(desc_);
}

Descriptor::Descriptor(Descriptor&& other) noexcept
    : desc_(std::exchange(other.desc_, nullptr)), type_(other.type_) {}

Descriptor& Descriptor::operator=(Descriptor&& other) noexcept {
  if (this != &other) {
    if (desc_) cudnnBackendDestroyDescriptor(desc_);
    desc_ = std::exchange(other.desc_, nullptr);
    type_ = other.type_;
  }
  return *this;
}

Descriptor& Descriptor::set(cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type, int64_t count,
                            const void* values) {
  cudnnStatus_t status = cudnnBackendSetAttribute(desc_, name, type, count, values);
  TK_CHECK(status == CUDNN_STATUS_SUCCESS,
           "cuDNN rejected attribute {} (type {}, {} values) of a backend descriptor of type {}: {}", int(name),
           int(type), count, int(type_), cudnnGetErrorString(status));
  return *this;
}

Descriptor& Descriptor::finalize(const std::string& what) {
  cudnnStatus_t status = cudnnBackendFinalize(desc_);
  TK_CHECK(status == CUDNN_STATUS_SUCCESS, "cuDNN cannot finalize {}: {}", what, cudnnGetErrorString(status));
  return *this;
}

ExecutionPlan::ExecutionPlan(Descriptor plan, std::vector<Descriptor> parts, int64_t workspace_bytes,
                             int64_t engine, bool deterministic)
    : plan_(std::move(plan)),
      parts_(std::move(parts)),
      workspace_bytes_(workspace_bytes),
      engine_(engine),
      deterministic_(deterministic) {}

void ExecutionPlan::execute(cudnnHandle_t handle, const std::vector<int64_t>& uids,
                            const std::vector<void*>& pointers, void* workspace) const {
  Descriptor pack(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
  pack.set(CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, int64_t(uids.size()), uids.data());
  pack.set(CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, int64_t(pointers.size()), pointers.data());
  pack.set(CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &workspace);
  pack.finalize("a cuDNN variant pack");
  cudnnStatus_t status = cudnnBackendExecute(handle, plan_.get(), pack.get());
  TK_CHECK(status == CUDNN_STATUS_SUCCESS, "cuDNN failed to execute a plan (engine {}): {}", engine_,
           cudnnGetErrorString(status));
}

cudnnBackendDescriptor_t GraphBuilder::keep(Descriptor d) {
  tensors_.push_back(std::move(d));
  return tensors_.back().get();
}

cudnnBackendDescriptor_t GraphBuilder::tensor(int64_t uid, cudnnDataType_t type, const Dims& dims,
                                              const Dims& strides) {
  Descriptor t(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
  t.set_dtype(CUDNN_ATTR_TENSOR_DATA_TYPE, type)
      .set_i64s(CUDNN_ATTR_TENSOR_DIMENSIONS, dims)
      .set_i64s(CUDNN_ATTR_TENSOR_STRIDES, strides)
      .set_i64(CUDNN_ATTR_TENSOR_UNIQUE_ID, uid)
      .set_i64(CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, 16)
      .finalize("a tensor descriptor");
  return keep(std::move(t));
}

cudnnBackendDescriptor_t GraphBuilder::scalar(int64_t uid, cudnnDataType_t type) {
  Descriptor t(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
  t.set_dtype(CUDNN_ATTR_TENSOR_DATA_TYPE, type)
      .set_i64s(CUDNN_ATTR_TENSOR_DIMENSIONS, {1, 1, 1, 1})
      .set_i64s(CUDNN_ATTR_TENSOR_STRIDES, {1, 1, 1, 1})
      .set_i64(CUDNN_ATTR_TENSOR_UNIQUE_ID, uid)
      .set_i64(CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, 16)
      .set_bool(CUDNN_ATTR_TENSOR_IS_BY_VALUE, true)
      .finalize("a by-value scalar descriptor");
  return keep(std::move(t));
}

cudnnBackendDescriptor_t GraphBuilder::virtual_tensor(cudnnDataType_t type, const Dims& dims, const Dims& strides) {
  Descriptor t(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
  t.set_dtype(CUDNN_ATTR_TENSOR_DATA_TYPE, type)
      .set_i64s(CUDNN_ATTR_TENSOR_DIMENSIONS, dims)
      .set_i64s(CUDNN_ATTR_TENSOR_STRIDES, strides)
      .set_i64(CUDNN_ATTR_TENSOR_UNIQUE_ID, next_virtual_uid_++)
      .set_i64(CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, 16)
      .set_bool(CUDNN_ATTR_TENSOR_IS_VIRTUAL, true)
      .finalize("a virtual tensor descriptor");
  return keep(std::move(t));
}

void GraphBuilder::pointwise(cudnnPointwiseMode_t mode, cudnnBackendDescriptor_t y, cudnnBackendDescriptor_t x,
                             cudnnBackendDescriptor_t b, cudnnBackendDescriptor_t t, cudnnDataType_t math,
                             int64_t axis) {
  Descriptor pw(CUDNN_BACKEND_POINTWISE_DESCRIPTOR);
  pw.set(CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode)
      .set_dtype(CUDNN_ATTR_POINTWISE_MATH_PREC, math);
  if (mode == CUDNN_POINTWISE_GEN_INDEX) pw.set_i64(CUDNN_ATTR_POINTWISE_AXIS, axis);
  pw.finalize("a pointwise descriptor");

  Descriptor op(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR);
  op.set_desc(CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, pw.get())
      .set_desc(CUDNN_ATTR_OPERATION_POINTWISE_XDESC, x)
      .set_desc(CUDNN_ATTR_OPERATION_POINTWISE_YDESC, y);
  if (b) op.set_desc(CUDNN_ATTR_OPERATION_POINTWISE_BDESC, b);
  if (t) op.set_desc(CUDNN_ATTR_OPERATION_POINTWISE_TDESC, t);
  op.finalize("a pointwise operation");
  keep(std::move(pw));
  ops_.push_back(std::move(op));
}

void GraphBuilder::reduction(cudnnReduceTensorOp_t reduce, cudnnBackendDescriptor_t y, cudnnBackendDescriptor_t x) {
  Descriptor r(CUDNN_BACKEND_REDUCTION_DESCRIPTOR);
  r.set(CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, 1, &reduce)
      .set_dtype(CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_DATA_FLOAT)
      .finalize("a reduction descriptor");
  Descriptor op(CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR);
  op.set_desc(CUDNN_ATTR_OPERATION_REDUCTION_DESC, r.get())
      .set_desc(CUDNN_ATTR_OPERATION_REDUCTION_XDESC, x)
      .set_desc(CUDNN_ATTR_OPERATION_REDUCTION_YDESC, y)
      .finalize("a reduction operation");
  keep(std::move(r));
  ops_.push_back(std::move(op));
}

void GraphBuilder::matmul(cudnnBackendDescriptor_t c, cudnnBackendDescriptor_t a, cudnnBackendDescriptor_t b,
                          cudnnBackendDescriptor_t m_override, cudnnBackendDescriptor_t n_override,
                          cudnnBackendDescriptor_t k_override) {
  Descriptor mm(CUDNN_BACKEND_MATMUL_DESCRIPTOR);
  mm.set_dtype(CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_DATA_FLOAT).finalize("a matmul descriptor");
  Descriptor op(CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR);
  op.set_desc(CUDNN_ATTR_OPERATION_MATMUL_ADESC, a)
      .set_desc(CUDNN_ATTR_OPERATION_MATMUL_BDESC, b)
      .set_desc(CUDNN_ATTR_OPERATION_MATMUL_CDESC, c)
      .set_desc(CUDNN_ATTR_OPERATION_MATMUL_DESC, mm.get());
  if (m_override) op.set_desc(CUDNN_ATTR_OPERATION_MATMUL_GEMM_M_OVERRIDE_DESC, m_override);
  if (n_override) op.set_desc(CUDNN_ATTR_OPERATION_MATMUL_GEMM_N_OVERRIDE_DESC, n_override);
  if (k_override) op.set_desc(CUDNN_ATTR_OPERATION_MATMUL_GEMM_K_OVERRIDE_DESC, k_override);
  op.finalize("a matmul operation");
  keep(std::move(mm));
  ops_.push_back(std::move(op));
}

void GraphBuilder::reshape(cudnnBackendDescriptor_t y, cudnnBackendDescriptor_t x) {
  Descriptor op(CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR);
  op.set_desc(CUDNN_ATTR_OPERATION_RESHAPE_XDESC, x)
      .set_desc(CUDNN_ATTR_OPERATION_RESHAPE_YDESC, y)
      .finalize("a reshape operation");
  ops_.push_back(std::move(op));
}

namespace {

// The engine behind an engine configuration: its global index and whether it says it is nondeterministic.
struct EngineInfo {
  int64_t index = -1;
  bool nondeterministic = false;
};

EngineInfo engine_info(const Descriptor& config) {
  EngineInfo info;
  Descriptor engine(CUDNN_BACKEND_ENGINE_DESCRIPTOR);
  cudnnBackendDescriptor_t raw = engine.get();
  int64_t n = 0;
  if (cudnnBackendGetAttribute(config.get(), CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &n,
                               &raw) != CUDNN_STATUS_SUCCESS)
    return info;
  cudnnBackendGetAttribute(engine.get(), CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &n, &info.index);
  cudnnBackendNumericalNote_t notes[CUDNN_NUMERICAL_NOTE_TYPE_COUNT];
  int64_t n_notes = 0;
  if (cudnnBackendGetAttribute(engine.get(), CUDNN_ATTR_ENGINE_NUMERICAL_NOTE, CUDNN_TYPE_NUMERICAL_NOTE,
                               CUDNN_NUMERICAL_NOTE_TYPE_COUNT, &n_notes, notes) == CUDNN_STATUS_SUCCESS) {
    for (int64_t i = 0; i < n_notes; i++)
      if (notes[i] == CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC) info.nondeterministic = true;
  }
  return info;
}

// The engine configurations cuDNN's heuristics propose in `mode`, best first; none (and the reason in
// `error`) when the heuristics cannot handle the graph.
std::vector<Descriptor> heuristic_configs(const Descriptor& graph, cudnnBackendHeurMode_t mode, std::string& error) {
  Descriptor heur(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
  heur.set_desc(CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, graph.get())
      .set(CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode);
  std::vector<Descriptor> configs;
  cudnnStatus_t status = cudnnBackendFinalize(heur.get());
  int64_t count = 0;
  if (status == CUDNN_STATUS_SUCCESS)
    status = cudnnBackendGetAttribute(heur.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 0,
                                      &count, nullptr);
  if (status != CUDNN_STATUS_SUCCESS) {
    error = fmt::format("heuristics mode {}: {}", int(mode), cudnnGetErrorString(status));
    return configs;
  }
  std::vector<cudnnBackendDescriptor_t> raw;
  for (int64_t i = 0; i < count; i++) {
    configs.emplace_back(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR);
    raw.push_back(configs.back().get());
  }
  int64_t got = 0;
  status = cudnnBackendGetAttribute(heur.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, count,
                                    &got, raw.data());
  if (status != CUDNN_STATUS_SUCCESS) {
    error = fmt::format("heuristics mode {}: {}", int(mode), cudnnGetErrorString(status));
    got = 0;
  }
  configs.erase(configs.begin() + got, configs.end());
  return configs;
}

}  // namespace

ExecutionPlan GraphBuilder::build(const std::string& what) {
  Descriptor graph(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
  std::vector<cudnnBackendDescriptor_t> ops;
  for (const Descriptor& op : ops_) ops.push_back(op.get());
  graph.set(CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle_)
      .set(CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, int64_t(ops.size()), ops.data())
      .finalize(what);

  std::string last_error = "no engine configuration was proposed";
  // Mode A's ranked list first, then the fallback list; within each, deterministic engines first.
  for (cudnnBackendHeurMode_t mode : {CUDNN_HEUR_MODE_A, CUDNN_HEUR_MODE_FALLBACK}) {
    std::vector<Descriptor> configs = heuristic_configs(graph, mode, last_error);
    for (bool deterministic_pass : {true, false}) {
      for (Descriptor& config : configs) {
        EngineInfo engine = engine_info(config);
        if (engine.nondeterministic == deterministic_pass) continue;
        Descriptor plan(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
        cudnnBackendDescriptor_t cfg = config.get();
        plan.set(CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle_)
            .set_desc(CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, cfg);
        cudnnStatus_t status = cudnnBackendFinalize(plan.get());
        if (status != CUDNN_STATUS_SUCCESS) {
          last_error = fmt::format("engine {}: {}", engine.index, cudnnGetErrorString(status));
          continue;
        }
        int64_t workspace = 0, n = 0;
        cudnnBackendGetAttribute(plan.get(), CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, &n,
                                 &workspace);
        if (engine.nondeterministic)
          log::warn("cuDNN offers only a nondeterministic engine ({}) for {}: results may vary in the last bits",
                    engine.index, what);
        std::vector<Descriptor> parts = std::move(tensors_);
        for (Descriptor& op : ops_) parts.push_back(std::move(op));
        parts.push_back(std::move(graph));
        parts.push_back(std::move(config));
        return ExecutionPlan(std::move(plan), std::move(parts), workspace, engine.index, !engine.nondeterministic);
      }
    }
  }
  fail("cuDNN has no engine that runs {} on this GPU and cuDNN {} (last: {})", what, cudnnGetVersion(), last_error);
}

}  // namespace tk::cuda::cudnn
