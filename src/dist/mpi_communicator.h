// The MPI communicator: the CPU backend's collectives, on host memory, and the channel that hands NCCL its
// unique id under mpirun/srun. Deterministic by construction: every reduction adds the ranks' values in rank
// order, whatever MPI would pick, and moves data with point-to-point messages polled against a timeout, so that
// a rank that died or hangs is named instead of waited for.
#pragma once
#include <memory>

#include "dist/communicator.h"

namespace tk::dist {

// world.size == 1 needs no MPI (mpi_initialised may be false); otherwise MPI must have been initialised
// (Session) and every rank makes its communicator at the same point (the first collective waits for all).
std::unique_ptr<Communicator> make_mpi_communicator(const World& world, bool mpi_initialised);

// A barrier of every rank of MPI_COMM_WORLD, waited for within collective_timeout() (Session::finish's last one: no
// communicator of its own to make, which would wait for the other ranks too). `what` names it in the timeout's error.
void mpi_world_barrier(int rank, const char* what);

// Throws tk::Error "MPI call <call> failed at <file>:<line>: <MPI's message>" (MPI_ERRORS_RETURN is set).
[[noreturn]] void fail_mpi_call(int code, const char* call, const char* file, int line);

}  // namespace tk::dist

#define TK_MPI_CHECK(call)                                                                     \
  do {                                                                                         \
    int tk_mpi_code_ = (call);                                                                 \
    if (tk_mpi_code_ != 0) ::tk::dist::fail_mpi_call(tk_mpi_code_, #call, __FILE__, __LINE__); \
  } while (0)
