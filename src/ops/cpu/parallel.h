// When the CPU ops go parallel. Opening an OpenMP region costs microseconds on an idle machine but can
// cost a scheduler time slice on a busy one, so loops over less work than this stay on one thread.
#pragma once
#include <cstdint>

namespace tk::cpu {

constexpr int64_t kParallelMinWork = int64_t(1) << 15;  // elements (or multiply-adds) touched by the loop

}  // namespace tk::cpu
