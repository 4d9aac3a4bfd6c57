// The reduction of the host collectives: the ranks' copies of a chunk combined element by element in rank order,
// in the dtype's accumulator (f32 for bf16, rounded once to nearest even; 64 bits for 32-bit integers, then
// wrapped to the dtype as NCCL's integer sums wrap), so that the result does not depend on how messages arrived.
#pragma once
#include <cstdint>
#include <vector>

#include "core/tensor.h"
#include "dist/communicator.h"

namespace tk::dist {

// Throws tk::Error for a dtype the collectives cannot reduce (u16).
void check_reducible(DType t, const char* op);

// dst[i] = copies[0][i] op copies[1][i] op ... op copies[W-1][i], for i < n, left to right. dst may be one of
// the copies.
void reduce_in_rank_order(void* dst, const std::vector<const void*>& copies, int64_t n, DType t, ReduceOp op);

}  // namespace tk::dist
