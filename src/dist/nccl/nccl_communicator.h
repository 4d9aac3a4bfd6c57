// The NCCL communicator (CUDA builds with NCCL): collectives on a CUDA stream of their own, ordered against the
// CUDA backend's compute stream by events, and a watchdog thread that turns a dead or hung peer into an error
// message and an exit within seconds of NCCL reporting it (or of the collective timeout), never a silent hang.
#pragma once
#include <memory>
#include <string>

#include "dist/communicator.h"
#include "dist/session.h"

namespace tk::dist {

// The communicator of this rank on CUDA device world.local_rank. The NCCL unique id comes from rank 0 over MPI under
// mpirun/srun, from TOKAMAK_NCCL_ID under tokamak's own launcher, or is made here for a single rank.
std::unique_ptr<Communicator> make_nccl_communicator(const Session& session);

// A new NCCL unique id, as hex, for tokamak's launcher to hand its ranks: NCCL's bootstrap root for it listens in
// this process, which must live until the ranks have connected.
std::string nccl_unique_id_hex();

// The CUDA devices visible to this process (0 without a driver or a device); never throws.
int cuda_device_count();

// "2.28.9": the NCCL library this build runs with.
std::string nccl_version();

}  // namespace tk::dist
