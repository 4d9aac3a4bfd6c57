// Reading the launcher's variables: each launcher names rank, size and local rank its own way.
#include "dist/world.h"

#include <fmt/format.h>

#include <charconv>
#include <cstdlib>

#include "core/error.h"

namespace tk::dist {

const char* launcher_name(Launcher l) {
  switch (l) {
    case Launcher::none: return "none";
    case Launcher::tokamak: return "tokamak --gpus";
    case Launcher::open_mpi: return "Open MPI";
    case Launcher::pmix: return "PMIx";
    case Launcher::pmi: return "PMI";
    case Launcher::slurm: return "Slurm";
  }
  return "?";
}

std::string World::describe() const {
  if (launcher == Launcher::none) return "a single process";
  const std::string size_text = size > 0 ? std::to_string(size) : "?";
  const std::string local_text = local_rank >= 0 ? std::to_string(local_rank) : "?";
  return fmt::format("rank {} of {} (local rank {}), started by {}", rank, size_text, local_text,
                     launcher_name(launcher));
}

namespace {

// The variable's value as a non-negative integer; -1 when it is not set.
int read_int(const EnvLookup& get, const char* name) {
  const char* v = get(name);
  if (v == nullptr) return -1;
  int x = -1;
  const char* end = v + std::char_traits<char>::length(v);
  auto [p, ec] = std::from_chars(v, end, x);
  TK_CHECK(ec == std::errc() && p == end && x >= 0, "the launcher's variable {}={} is not a rank or a count", name, v);
  return x;
}

struct Names {
  Launcher launcher;
  const char* rank;
  const char* size;   // nullptr: the launcher gives none
  const char* local;  // nullptr: likewise
  const char* guard;  // a variable that must be set too (nullptr: rank alone says it)
};

// In the order of World's comment: a launcher that sets several families (srun --mpi=pmix sets Slurm's and
// PMIx's) is read from the most complete one.
constexpr Names kLaunchers[] = {
    {Launcher::tokamak, kRankVar, kWorldSizeVar, kLocalRankVar, nullptr},
    {Launcher::open_mpi, "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK", nullptr},
    {Launcher::slurm, "SLURM_PROCID", "SLURM_STEP_NUM_TASKS", "SLURM_LOCALID", "SLURM_STEP_NUM_TASKS"},
    {Launcher::pmi, "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", nullptr},
    {Launcher::pmix, "PMIX_RANK", nullptr, nullptr, nullptr},
};

}  // namespace

World read_world(const EnvLookup& lookup) {
  const EnvLookup get = lookup ? lookup : EnvLookup([](const char* n) -> const char* { return std::getenv(n); });
  for (const Names& n : kLaunchers) {
    if (get(n.rank) == nullptr || (n.guard != nullptr && get(n.guard) == nullptr)) continue;
    World w;
    w.launcher = n.launcher;
    w.rank = read_int(get, n.rank);
    w.size = n.size != nullptr ? read_int(get, n.size) : 0;
    w.local_rank = n.local != nullptr ? read_int(get, n.local) : -1;
    if (n.size != nullptr)
      TK_CHECK(w.size >= 1 && w.rank < w.size, "the launcher ({}) says rank {} of {}: not a rank of that world",
               launcher_name(n.launcher), w.rank, w.size);
    if (n.launcher == Launcher::tokamak) {
      TK_CHECK(w.local_rank >= 0, "{} is set but {} is not: tokamak's launcher sets both", kRankVar, kLocalRankVar);
      if (const char* id = get(kNcclIdVar)) w.nccl_id = id;
    }
    return w;
  }
  return World{};
}

}  // namespace tk::dist
