// TOKAMAK_CPU_DEFERRED_QUEUES=1: the queues of a CPU run, which otherwise run their work at its call, run it as late
// as their events and tickets allow: the CPU backend's copy queues (ops/cpu/deferred_copies.h) and the MPI
// communicator's (dist/mpi_communicator.cpp). A wait that the offload pipelines or the data-parallel step are missing
// then shows as wrong numbers in CI, which has no GPU (docs/design.md, "Conventions"). "0" or unset: off.
#pragma once

namespace tk {

// Whether TOKAMAK_CPU_DEFERRED_QUEUES asks for it (a tk::Error for anything but 0 and 1).
bool deferred_queues_requested();

}  // namespace tk
