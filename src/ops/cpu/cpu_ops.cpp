// The CPU backend's class instantiations (its vtable lives here) and the factory that picks the
// precision. The ops themselves are in one file per family: embedding.cpp, rmsnorm.cpp, linear.cpp ...
#include "ops/cpu/cpu_ops.h"

namespace tk {

template class CpuOps<float>;
template class CpuOps<double>;

std::unique_ptr<Ops> make_cpu_ops(DType dtype) {
  switch (dtype) {
    case DType::F32: return std::make_unique<CpuOps<float>>();
    case DType::F64: return std::make_unique<CpuOps<double>>();
    default: fail("the CPU backend computes in f32 or f64, not {}", dtype_name(dtype));
  }
}

}  // namespace tk
