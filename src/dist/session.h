// Session: this process's part in a run, made once by main(). Under an MPI launcher (mpirun, srun) it initialises
// MPI: rank and size then come from MPI, checked against the launcher's variables, and the local rank from the
// ranks that share this host. MPI is finalised only after a command that succeeded on every rank; a rank that
// fails exits without finalising, which makes mpirun or srun stop the others at once (a rank that finalised
// while the others waited for it in a collective would leave them waiting until their timeout).
#pragma once
#include <string>

#include "dist/world.h"

namespace tk::dist {

class Session {
 public:
  // launched: read_world()'s answer for this process.
  explicit Session(const World& launched);
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  const World& world() const { return world_; }
  bool mpi() const { return mpi_; }  // this session initialised MPI

  // The end of the command, which returned exit_code: with MPI, after a success, waits for every rank (within
  // collective_timeout()) and finalises. Returns the process's exit code (1 when the other ranks did not arrive).
  int finish(int exit_code);

 private:
  World world_;
  bool mpi_ = false;
};

// "Open MPI v4.1.4, ..." (the first line of MPI_Get_library_version), whether or not MPI is initialised.
std::string mpi_library_version();

}  // namespace tk::dist
