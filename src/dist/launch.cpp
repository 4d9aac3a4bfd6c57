// `--gpus N`: checks that the host can run N ranks, then starts them with the variables that make each a rank.
#include "dist/launch.h"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <thread>

#include <fmt/format.h>

#include "core/error.h"
#include "dist/process_group.h"
#include "dist/world.h"

#ifdef TK_HAVE_NCCL
#include "dist/nccl/nccl_communicator.h"
#endif

namespace tk::dist {

namespace {

std::vector<ChildCommand> rank_commands(const std::vector<std::string>& args, int gpus, const std::string& nccl_id) {
  std::vector<std::string> argv = args;
  argv[0] = std::filesystem::read_symlink("/proc/self/exe").string();
  // Each rank's OpenMP threads (CPU-side work) get an equal share of the cores unless the user chose.
  const bool omp_chosen = std::getenv("OMP_NUM_THREADS") != nullptr;
  const int threads = std::max(1, int(std::thread::hardware_concurrency()) / gpus);
  std::vector<ChildCommand> commands;
  for (int r = 0; r < gpus; r++) {
    ChildCommand c;
    c.argv = argv;
    c.env = {std::string(kRankVar) + "=" + std::to_string(r), std::string(kWorldSizeVar) + "=" + std::to_string(gpus),
             std::string(kLocalRankVar) + "=" + std::to_string(r), std::string(kNcclIdVar) + "=" + nccl_id};
    if (!omp_chosen) c.env.push_back("OMP_NUM_THREADS=" + std::to_string(threads));
    commands.push_back(std::move(c));
  }
  return commands;
}

}  // namespace

int launch_local_ranks(const std::vector<std::string>& args, int gpus) {
  TK_CHECK(!args.empty() && gpus >= 1, "--gpus {}: at least one GPU", gpus);
  const World here = read_world();
  TK_CHECK(here.launcher == Launcher::none,
           "--gpus {} starts ranks of its own, but this process is already {}: leave --gpus out under a launcher",
           gpus, here.describe());
#ifdef TK_HAVE_NCCL
  const int visible = cuda_device_count();
  TK_CHECK(visible >= gpus, "--gpus {}: this machine has {} GPU{} visible{}", gpus, visible, visible == 1 ? "" : "s",
           visible > 0 ? fmt::format(" (use --gpus {} or fewer)", visible) : " (check nvidia-smi and CUDA_VISIBLE_DEVICES)");
  return run_process_group(rank_commands(args, gpus, nccl_unique_id_hex())).exit_code;
#else
  fail("--gpus {} starts one process per GPU, connected by NCCL, but this build of tokamak has no NCCL. On the CPU, "
       "start ranks with mpirun: mpirun -np {} tokamak ... --device cpu",
       gpus, gpus);
#endif
}

}  // namespace tk::dist
