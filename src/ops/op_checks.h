// Shape and dtype checks shared by the backends' ops. A violation is a tk::Error that names the op, the
// tensor, what it is and what it should be, so a schedule bug reads as a sentence, not a crash.
#pragma once
#include <cstdint>
#include <initializer_list>
#include <string>

#include <fmt/format.h>

#include "core/error.h"
#include "core/tensor.h"
#include "ops/ops.h"

namespace tk {

inline std::string shape_string(DType dt, std::initializer_list<int64_t> dims) {
  std::string s = fmt::format("{}[", dtype_name(dt));
  int i = 0;
  for (int64_t d : dims) s += fmt::format("{}{}", i++ ? ", " : "", d);
  return s + "]";
}

// `t` must be present with dtype `dt` and the documented shape `dims`. A view of the same elements in
// another rank is accepted (e.g. qkv as [N, W] or [B, T, H, hd]); a same-rank view must match exactly.
inline void expect(const Tensor& t, DType dt, std::initializer_list<int64_t> dims, const char* op, const char* what) {
  TK_CHECK(!t.empty(), "{}: the tensor {} is required but was not given", op, what);
  int64_t numel = 1;
  bool same_shape = t.ndim == int(dims.size());
  int i = 0;
  for (int64_t d : dims) {
    numel *= d;
    if (same_shape && t.shape[i] != d) same_shape = false;
    i++;
  }
  bool ok = t.dtype == dt && t.numel() == numel && (t.ndim != int(dims.size()) || same_shape);
  TK_CHECK(ok, "{}: {} is {} but must be {}", op, what, t.describe(), shape_string(dt, dims));
}

// The same for an optional slot: an empty tensor passes.
inline void expect_optional(const Tensor& t, DType dt, std::initializer_list<int64_t> dims, const char* op,
                            const char* what) {
  if (!t.empty()) expect(t, dt, dims, op, what);
}

// The attention geometry every q/k/v op relies on: positive sizes, query heads shared evenly by kv heads.
inline void check_attn_shape(const AttnShape& s, const char* op) {
  TK_CHECK(s.B > 0 && s.T > 0 && s.n_heads > 0 && s.n_kv_heads > 0 && s.head_dim > 0,
           "{}: the attention shape B={} T={} heads={} kv_heads={} head_dim={} must be positive", op, s.B, s.T,
           s.n_heads, s.n_kv_heads, s.head_dim);
  TK_CHECK(s.n_heads % s.n_kv_heads == 0, "{}: {} query heads cannot be shared evenly by {} key/value heads", op,
           s.n_heads, s.n_kv_heads);
}

}  // namespace tk
