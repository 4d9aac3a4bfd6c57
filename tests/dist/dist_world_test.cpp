// read_world: each launcher's variables give rank, size and local rank; a batch script's own Slurm variables, or
// none at all, give a single process; nonsense is refused.
#include <gtest/gtest.h>

#include <map>
#include <string>

#include "core/error.h"
#include "dist/cpu_binding.h"
#include "dist/world.h"

namespace {

using tk::dist::Launcher;
using tk::dist::World;

World world_of(const std::map<std::string, std::string>& env) {
  return tk::dist::read_world([&](const char* name) -> const char* {
    auto it = env.find(name);
    return it == env.end() ? nullptr : it->second.c_str();
  });
}

TEST(World, NoLauncherIsASingleProcess) {
  const World w = world_of({});
  EXPECT_EQ(w.launcher, Launcher::none);
  EXPECT_EQ(w.rank, 0);
  EXPECT_EQ(w.size, 1);
  EXPECT_EQ(w.local_rank, 0);
  EXPECT_FALSE(w.by_mpi());
  EXPECT_EQ(w.describe(), "a single process");
}

TEST(World, TokamaksOwnLauncher) {
  const World w = world_of({{"TOKAMAK_RANK", "2"}, {"TOKAMAK_WORLD_SIZE", "4"}, {"TOKAMAK_LOCAL_RANK", "2"},
                            {"TOKAMAK_NCCL_ID", "abcd"}});
  EXPECT_EQ(w.launcher, Launcher::tokamak);
  EXPECT_EQ(w.rank, 2);
  EXPECT_EQ(w.size, 4);
  EXPECT_EQ(w.local_rank, 2);
  EXPECT_EQ(w.nccl_id, "abcd");
  EXPECT_FALSE(w.by_mpi());
  EXPECT_EQ(w.describe(), "rank 2 of 4 (local rank 2), started by tokamak --gpus");
}

TEST(World, OpenMpi) {
  const World w = world_of({{"OMPI_COMM_WORLD_RANK", "5"}, {"OMPI_COMM_WORLD_SIZE", "16"},
                            {"OMPI_COMM_WORLD_LOCAL_RANK", "1"}, {"PMIX_RANK", "5"}});
  EXPECT_EQ(w.launcher, Launcher::open_mpi);
  EXPECT_EQ(w.rank, 5);
  EXPECT_EQ(w.size, 16);
  EXPECT_EQ(w.local_rank, 1);
  EXPECT_TRUE(w.by_mpi());
}

TEST(World, SlurmStepButNotABatchScript) {
  const World w = world_of({{"SLURM_PROCID", "3"}, {"SLURM_STEP_NUM_TASKS", "8"}, {"SLURM_NTASKS", "8"},
                            {"SLURM_LOCALID", "3"}, {"PMIX_RANK", "3"}});
  EXPECT_EQ(w.launcher, Launcher::slurm);
  EXPECT_EQ(w.rank, 3);
  EXPECT_EQ(w.size, 8);
  EXPECT_EQ(w.local_rank, 3);
  // A batch script sees SLURM_PROCID and SLURM_NTASKS of its allocation without being a step's task.
  EXPECT_EQ(world_of({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "8"}, {"SLURM_LOCALID", "0"}}).launcher, Launcher::none);
}

TEST(World, PmiAndPmixLeaveWhatTheyDoNotSayToMpi) {
  const World pmi = world_of({{"PMI_RANK", "1"}, {"PMI_SIZE", "2"}});
  EXPECT_EQ(pmi.launcher, Launcher::pmi);
  EXPECT_EQ(pmi.rank, 1);
  EXPECT_EQ(pmi.size, 2);
  EXPECT_EQ(pmi.local_rank, -1);
  const World pmix = world_of({{"PMIX_RANK", "7"}});
  EXPECT_EQ(pmix.launcher, Launcher::pmix);
  EXPECT_EQ(pmix.rank, 7);
  EXPECT_EQ(pmix.size, 0);
  EXPECT_EQ(pmix.describe(), "rank 7 of ? (local rank ?), started by PMIx");
}

TEST(World, RefusesNonsense) {
  EXPECT_THROW(world_of({{"OMPI_COMM_WORLD_RANK", "x"}, {"OMPI_COMM_WORLD_SIZE", "2"}}), tk::Error);
  EXPECT_THROW(world_of({{"OMPI_COMM_WORLD_RANK", "2"}, {"OMPI_COMM_WORLD_SIZE", "2"}}), tk::Error);
  EXPECT_THROW(world_of({{"TOKAMAK_RANK", "0"}, {"TOKAMAK_WORLD_SIZE", "2"}}), tk::Error);  // no local rank
  EXPECT_THROW(world_of({{"PMI_RANK", "-1"}, {"PMI_SIZE", "2"}}), tk::Error);
}

// A CPU rank bound to fewer cores than its share of the host is told how to get its share; one with its share is not.
TEST(CpuBinding, ARankBoundBelowItsShareIsWarned) {
  const std::string w = tk::dist::narrow_binding_warning(0, 1, 16, 2);
  EXPECT_NE(w.find("rank 0 may run on 1 of this host's 16 cores (2 ranks here)"), std::string::npos) << w;
  EXPECT_NE(w.find("--bind-to none, or --map-by slot:PE=8 to give each rank 8 cores"), std::string::npos) << w;
  EXPECT_EQ(tk::dist::narrow_binding_warning(0, 8, 16, 2), "");
  EXPECT_EQ(tk::dist::narrow_binding_warning(1, 1, 2, 2), "") << "two ranks on two cores: each has its share";
  EXPECT_EQ(tk::dist::narrow_binding_warning(0, 1, 16, 0), "") << "the ranks on the host unknown: nothing to say";
}

}  // namespace
