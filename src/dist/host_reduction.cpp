// Element-wise reductions in rank order, one template over (element type, accumulator).
#include "dist/host_reduction.h"

#include <cstring>

#include "core/bf16.h"
#include "core/error.h"

namespace tk::dist {

namespace {

// A dtype's element as its accumulator sees it, and back.
template <class T, class Acc>
struct Plain {
  using Elem = T;
  using Accum = Acc;
  static Acc load(T x) { return Acc(x); }
  static T store(Acc a) { return T(a); }
};

// bf16: the top half of a float32; stored rounded to nearest even (NaN stays NaN).
struct Bf16 {
  using Elem = uint16_t;
  using Accum = float;
  static float load(uint16_t h) { return bf16_to_float(h); }
  static uint16_t store(float f) { return float_to_bf16(f); }
};

template <class E>
void reduce(void* dst, const std::vector<const void*>& copies, int64_t n, ReduceOp op) {
  using T = typename E::Elem;
  using A = typename E::Accum;
  auto* out = static_cast<T*>(dst);
  const size_t W = copies.size();
  for (int64_t i = 0; i < n; i++) {
    A a = E::load(static_cast<const T*>(copies[0])[i]);
    for (size_t r = 1; r < W; r++) {
      const A x = E::load(static_cast<const T*>(copies[r])[i]);
      a = op == ReduceOp::Sum ? A(a + x) : (x > a ? x : a);
    }
    out[i] = E::store(a);
  }
}

}  // namespace

void check_reducible(DType t, const char* op) {
  TK_CHECK(t != DType::U16, "{}: u16 buffers can be moved (all_gather, broadcast) but not reduced", op);
}

void reduce_in_rank_order(void* dst, const std::vector<const void*>& copies, int64_t n, DType t, ReduceOp op) {
  TK_CHECK(!copies.empty(), "reduce_in_rank_order: no copies");
  switch (t) {
    case DType::F32: return reduce<Plain<float, float>>(dst, copies, n, op);
    case DType::F64: return reduce<Plain<double, double>>(dst, copies, n, op);
    case DType::BF16: return reduce<Bf16>(dst, copies, n, op);
    case DType::I32: return reduce<Plain<int32_t, int64_t>>(dst, copies, n, op);
    case DType::U32: return reduce<Plain<uint32_t, uint64_t>>(dst, copies, n, op);
    case DType::I8: return reduce<Plain<int8_t, int32_t>>(dst, copies, n, op);
    case DType::U8: return reduce<Plain<uint8_t, uint32_t>>(dst, copies, n, op);
    case DType::U16: break;
  }
  fail("reduce_in_rank_order: {} cannot be reduced", dtype_name(t));
}

}  // namespace tk::dist
