// Choosing the communicator for a rank (NCCL on the GPU, MPI on the CPU) and the timeout every one of them keeps.
#include "dist/communicator.h"

#include <charconv>
#include <cstdlib>
#include <cstring>

#include "core/error.h"
#include "dist/mpi_communicator.h"
#include "dist/session.h"

#ifdef TK_HAVE_NCCL
#include "dist/nccl/nccl_communicator.h"
#endif

namespace tk::dist {

const char* reduce_op_name(ReduceOp op) { return op == ReduceOp::Sum ? "sum" : "max"; }

std::chrono::milliseconds collective_timeout() {
  const char* v = std::getenv("TOKAMAK_COLLECTIVE_TIMEOUT");
  if (v == nullptr || *v == '\0') return std::chrono::seconds(300);
  double seconds = 0;
  const char* end = v + std::strlen(v);
  auto [p, ec] = std::from_chars(v, end, seconds);
  TK_CHECK(ec == std::errc() && p == end && seconds > 0,
           "TOKAMAK_COLLECTIVE_TIMEOUT={} is not a number of seconds above 0", v);
  return std::chrono::milliseconds(int64_t(seconds * 1000));
}

std::unique_ptr<Communicator> make_communicator(const Session& session, bool gpu) {
  const World& w = session.world();
  if (!gpu) return make_mpi_communicator(w, session.mpi());
#ifdef TK_HAVE_NCCL
  return make_nccl_communicator(session);
#else
  fail("rank {} computes on the GPU, but this build of tokamak has no NCCL (it was built without CUDA or without "
       "NCCL's headers and library)",
       w.rank);
#endif
}

}  // namespace tk::dist
