// A rank that misbehaves on purpose, run under mpirun by dist_failure_test:
//   dist_rank_probe agree [R]  every rank agrees on a fingerprint, except rank R (when given), whose data differs
//   dist_rank_probe die R      all-reduces in a loop; at the 20th, rank R kills itself with SIGKILL
//   dist_rank_probe hang R     likewise, but rank R stops answering (sleeps) instead
//   dist_rank_probe leave R    rank R skips the collectives and finishes while the others all-reduce
#include <signal.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "core/error.h"
#include "dist/agreement.h"
#include "dist/communicator.h"
#include "dist/session.h"

namespace {

void all_reduce_until_victim_fails(tk::dist::Communicator& comm, int victim, bool die) {
  std::vector<float> buf(1 << 18, 1.0f);
  const tk::Tensor t(buf.data(), tk::DType::F32, {int64_t(buf.size())});
  for (int i = 0; i < 100000; i++) {
    if (i == 20 && comm.rank() == victim) {
      std::fprintf(stderr, "rank %d: %s now\n", victim, die ? "dying" : "hanging");
      if (die) ::raise(SIGKILL);
      std::this_thread::sleep_for(std::chrono::hours(1));
    }
    comm.all_reduce(t, t, tk::dist::ReduceOp::Max);
  }
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  const int victim = argc > 2 ? std::atoi(argv[2]) : -1;
  try {
    tk::dist::Session session(tk::dist::read_world());
    auto comm = tk::dist::make_communicator(session, false);
    if (mode == "agree") {
      tk::dist::Fingerprint f;
      f.add("command line", "train").add("data", comm->rank() == victim ? "other shards" : "shards");
      tk::dist::require_agreement(*comm, f);
      std::printf("rank %d of %d agreed\n", comm->rank(), comm->world_size());
    } else if (mode == "die" || mode == "hang") {
      all_reduce_until_victim_fails(*comm, victim, mode == "die");
    } else if (mode == "leave") {
      if (comm->rank() != victim) all_reduce_until_victim_fails(*comm, -1, false);
    } else {
      std::fprintf(stderr, "usage: dist_rank_probe agree [R] | die R | hang R | leave R\n");
      return 2;
    }
    comm.reset();
    return session.finish(0);
  } catch (const tk::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
