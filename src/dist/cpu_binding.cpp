// cpu_binding.h: the cores this rank may use against its share of the host.
#include "dist/cpu_binding.h"

#include <sched.h>

#include <cstdlib>
#include <thread>

#include <fmt/format.h>

namespace tk::dist {

std::string narrow_binding_warning(int rank, int allowed, int cores, int ranks_here) {
  if (ranks_here <= 0 || allowed <= 0 || cores <= 0) return "";
  const int share = cores / ranks_here;
  if (allowed >= share) return "";
  return fmt::format("rank {} may run on {} of this host's {} cores ({} rank{} here), and the CPU backend computes on "
                     "those alone: start mpirun with --bind-to none, or --map-by slot:PE={} to give each rank {} cores",
                     rank, allowed, cores, ranks_here, ranks_here == 1 ? "" : "s", share, share);
}

std::string narrow_binding_warning_here(int rank) {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) != 0) return "";
  int ranks_here = 0;
  for (const char* var : {"OMPI_COMM_WORLD_LOCAL_SIZE", "SLURM_NTASKS_PER_NODE"})
    if (const char* v = std::getenv(var); v != nullptr && ranks_here == 0) ranks_here = std::atoi(v);
  return narrow_binding_warning(rank, CPU_COUNT(&set), int(std::thread::hardware_concurrency()), ranks_here);
}

}  // namespace tk::dist
