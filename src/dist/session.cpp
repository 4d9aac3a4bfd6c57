// MPI's start and end for a run under mpirun or srun: the one place that calls MPI_Init and MPI_Finalize.
#include "dist/session.h"

#include <mpi.h>

#include <string>

#include "core/error.h"
#include "core/log.h"
#include "dist/mpi_communicator.h"

namespace tk::dist {

namespace {

// The world MPI sees, with the launcher's variables where they say more (its local rank is what it bound to the
// rank; MPI's is computed from the ranks sharing this host).
World world_from_mpi(const World& launched) {
  World w = launched;
  TK_MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &w.rank));
  TK_MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &w.size));
  TK_CHECK(launched.size == 0 || launched.size == w.size,
           "{} started {} ranks but MPI sees {}: this build's MPI cannot talk to that launcher (under srun, "
           "try srun --mpi=pmix; under another MPI's mpiexec, use Open MPI's mpirun)",
           launcher_name(launched.launcher), launched.size, w.size);
  TK_CHECK(launched.rank == w.rank, "{} says this is rank {} but MPI says rank {}", launcher_name(launched.launcher),
           launched.rank, w.rank);
  if (w.local_rank < 0) {
    MPI_Comm host;
    TK_MPI_CHECK(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, w.rank, MPI_INFO_NULL, &host));
    TK_MPI_CHECK(MPI_Comm_rank(host, &w.local_rank));
    TK_MPI_CHECK(MPI_Comm_free(&host));
  }
  return w;
}

}  // namespace

Session::Session(const World& launched) : world_(launched) {
  if (!launched.by_mpi()) return;
  // MPI is called from the main thread only (NCCL's watchdog never calls it).
  int provided = 0;
  TK_CHECK(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided) == MPI_SUCCESS,
           "MPI_Init_thread failed ({} started this process as {})", launcher_name(launched.launcher),
           launched.describe());
  mpi_ = true;
  // Errors come back as codes that TK_MPI_CHECK turns into messages, instead of aborting every rank silently.
  TK_MPI_CHECK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
  world_ = world_from_mpi(launched);
  log::debug("distributed: {}", world_.describe());
}

int Session::finish(int exit_code) {
  if (!mpi_ || exit_code != 0) return exit_code;
  try {
    mpi_world_barrier(world_.rank, "the run's last barrier");
  } catch (const Error& e) {
    log::error("{}", e.what());
    return 1;
  }
  MPI_Finalize();
  return 0;
}

std::string mpi_library_version() {
  char text[MPI_MAX_LIBRARY_VERSION_STRING] = {};
  int len = 0;
  if (MPI_Get_library_version(text, &len) != MPI_SUCCESS) return "unknown";
  std::string s(text, size_t(len));
  const size_t eol = s.find_first_of("\r\n");
  return eol == std::string::npos ? s : s.substr(0, eol);
}

}  // namespace tk::dist
