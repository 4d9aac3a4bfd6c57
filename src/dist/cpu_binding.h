// A rank on the CPU backend computes on the cores its launcher lets it use. mpirun binds each rank to one core by
// default when it starts two or fewer (Open MPI), which leaves most of a many-core host idle: say so, with the flags
// that give each rank its share.
#pragma once
#include <string>

namespace tk::dist {

// The warning for rank `rank`, allowed `allowed` of the host's `cores` cores, one of `ranks_here` ranks on it; "" when
// it has at least its share (cores / ranks_here), or when ranks_here is unknown (0).
std::string narrow_binding_warning(int rank, int allowed, int cores, int ranks_here);

// This process's: the cores it may run on (its affinity), the host's, and the ranks on this host as Open MPI or
// Slurm say (0 when neither does).
std::string narrow_binding_warning_here(int rank);

}  // namespace tk::dist
