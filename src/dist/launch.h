// Launching a run of many ranks on one host, `tokamak <command> ... --gpus N`: this process starts N copies of
// itself, rank r on GPU r, tells each who it is through the variables world.h reads, makes the NCCL unique id
// they share, and watches them as one process group (process_group.h). Across hosts, mpirun or srun start the
// ranks instead, and Session picks them up.
#pragma once
#include <string>
#include <vector>

namespace tk::dist {

// Runs `args` (this program's argv, --gpus N included: the ranks see the launcher's variables and do not launch
// again) as N ranks and returns the run's exit code: 0, or that of the first rank that failed. Throws tk::Error
// before starting anything when this process is itself a rank (of mpirun, srun or tokamak), when the build has no
// NCCL, or when fewer than N GPUs are visible (saying how many are).
int launch_local_ranks(const std::vector<std::string>& args, int gpus);

}  // namespace tk::dist
