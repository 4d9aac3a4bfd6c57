// World: who this process is in a run (rank, world size, rank on its host) and what started it, read from the
// variables its launcher sets: tokamak's own `--gpus N`, Open MPI's mpirun, PMIx or PMI launchers, or Slurm's srun.
#pragma once
#include <functional>
#include <string>

namespace tk::dist {

enum class Launcher { none, tokamak, open_mpi, pmix, pmi, slurm };
const char* launcher_name(Launcher l);  // "none", "tokamak --gpus", "Open MPI", "PMIx", "PMI", "Slurm"

// The variables `tokamak ... --gpus N` gives each rank it starts.
inline constexpr const char* kRankVar = "TOKAMAK_RANK";
inline constexpr const char* kWorldSizeVar = "TOKAMAK_WORLD_SIZE";
inline constexpr const char* kLocalRankVar = "TOKAMAK_LOCAL_RANK";
inline constexpr const char* kNcclIdVar = "TOKAMAK_NCCL_ID";  // the NCCL unique id, hex

struct World {
  int rank = 0;
  int size = 1;        // 0 until MPI says (PMIx gives no size variable)
  int local_rank = 0;  // among the ranks on this host: the GPU it takes; -1 until MPI says
  Launcher launcher = Launcher::none;
  std::string nccl_id;  // hex, from kNcclIdVar (tokamak's launcher only)

  // Started by an MPI launcher (mpirun, srun, a PMI/PMIx launcher): MPI connects the ranks.
  bool by_mpi() const { return launcher != Launcher::none && launcher != Launcher::tokamak; }
  // "a single process", "rank 1 of 4 (local rank 1), started by Open MPI"
  std::string describe() const;
};

// The world the environment describes, looked up with `get` (getenv by default), from the first launcher whose
// variables are set: tokamak's, Open MPI's (OMPI_COMM_WORLD_RANK/SIZE/LOCAL_RANK), Slurm's within an srun step
// (SLURM_PROCID, SLURM_STEP_NUM_TASKS, SLURM_LOCALID: a batch script's own variables do not count), PMI's (PMI_RANK,
// PMI_SIZE, MPI_LOCALRANKID), PMIx's (PMIX_RANK). A single process when none is set. Throws tk::Error on a value
// that is not a number or out of range.
using EnvLookup = std::function<const char*(const char*)>;
World read_world(const EnvLookup& get = {});

}  // namespace tk::dist
