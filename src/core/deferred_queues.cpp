// TOKAMAK_CPU_DEFERRED_QUEUES (deferred_queues.h).
#include "core/deferred_queues.h"

#include <cstdlib>
#include <string>

#include "core/error.h"

namespace tk {

bool deferred_queues_requested() {
  const char* v = std::getenv("TOKAMAK_CPU_DEFERRED_QUEUES");
  if (v == nullptr || *v == '\0' || std::string(v) == "0") return false;
  TK_CHECK(std::string(v) == "1", "TOKAMAK_CPU_DEFERRED_QUEUES must be 1 or 0, not '{}'", v);
  return true;
}

}  // namespace tk
