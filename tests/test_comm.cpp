// core/dist/comm.h: the job's communicator. Run alone it is one process (rank 0 of 1, collectives
// that leave the data as they are); ctest also runs it under `mpirun -np 2` (tests/CMakeLists.txt),
// where every collective is checked against the sum or copy it must give.
#include "core/dist/comm.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <vector>

namespace ftx {
namespace {

Comm& job() {
  static std::unique_ptr<Comm> comm = [] {
    auto made = make_job_comm();
    if (!made) {
      std::fprintf(stderr, "test_comm: %s\n", made.error().message.c_str());
      std::exit(1);
    }
    return std::move(*made);
  }();
  return *comm;
}

TEST(Comm, RankAndSizeFollowTheLauncher) {
  Comm& c = job();
  EXPECT_EQ(c.size(), launched_processes());
  EXPECT_GE(c.rank(), 0);
  EXPECT_LT(c.rank(), c.size());
  EXPECT_EQ(c.root(), c.rank() == 0);
  EXPECT_FALSE(c.engine().empty());
  if (c.size() > 1) {
    EXPECT_TRUE(mpi_built());
  }
}

// Each rank holds values that depend on the rank and the index; the sum over the ranks is known.
TEST(Comm, AllreduceSumsOverTheRanks) {
  Comm& c = job();
  const int n = 1000, P = c.size(), r = c.rank();
  std::vector<float> f(n);
  std::vector<double> d(n);
  for (int i = 0; i < n; ++i) f[size_t(i)] = float(i + 1000 * r), d[size_t(i)] = 0.5 * i - r;
  ASSERT_TRUE(c.allreduce_sum(f.data(), f.size()).ok());
  ASSERT_TRUE(c.allreduce_sum(d.data(), d.size()).ok());
  for (int i = 0; i < n; ++i) {
    EXPECT_EQ(f[size_t(i)], float(P * i + 1000 * P * (P - 1) / 2)) << i;  // exact: small integers
    EXPECT_EQ(d[size_t(i)], P * 0.5 * i - P * (P - 1) / 2.0) << i;
  }
  ASSERT_TRUE(c.allreduce_sum(f.data(), 0).ok()) << "an empty reduce is fine";
}

TEST(Comm, BroadcastAndAllgather) {
  Comm& c = job();
  const int P = c.size(), r = c.rank();
  std::vector<char> word(16, 0);
  if (r == 0) std::snprintf(word.data(), word.size(), "from rank 0");
  ASSERT_TRUE(c.broadcast(word.data(), word.size(), 0).ok());
  EXPECT_STREQ(word.data(), "from rank 0");
  const int mine = 7 * r + 3;
  std::vector<int> all(size_t(P), -1);
  ASSERT_TRUE(c.allgather(&mine, sizeof mine, all.data()).ok());
  for (int q = 0; q < P; ++q) EXPECT_EQ(all[size_t(q)], 7 * q + 3);
}

// ZeRO-1's blocks: rank q holds q + 2 floats (uneven on purpose), laid end to end in rank order.
TEST(Comm, BlocksGatherInRankOrder) {
  Comm& c = job();
  const int P = c.size(), r = c.rank();
  std::vector<size_t> counts;
  size_t total = 0, mine_at = 0;
  for (int q = 0; q < P; ++q) {
    if (q == r) mine_at = total;
    counts.push_back(size_t(q) + 2), total += size_t(q) + 2;
  }
  auto value = [](int q, size_t i) { return float(100 * q) + float(i); };
  std::vector<float> data(total, -1.0f), mine;
  for (size_t i = 0; i < counts[size_t(r)]; ++i) data[mine_at + i] = value(r, i), mine.push_back(value(r, i));
  ASSERT_TRUE(c.allgather_blocks(data.data(), counts).ok());
  std::vector<float> all(total, -1.0f);
  ASSERT_TRUE(c.gather_blocks(mine.data(), c.root() ? all.data() : nullptr, counts, 0).ok());
  size_t at = 0;
  for (int q = 0; q < P; ++q)
    for (size_t i = 0; i < counts[size_t(q)]; ++i, ++at) {
      EXPECT_EQ(data[at], value(q, i)) << "allgather_blocks: rank " << q << ", float " << i;
      if (c.root()) {
        EXPECT_EQ(all[at], value(q, i)) << "gather_blocks: rank " << q << ", float " << i;
      }
    }
}

TEST(Comm, LaunchedProcessesReadsTheLaunchersEnvironment) {
  if (job().size() > 1) GTEST_SKIP() << "changes the environment: one process only";
  EXPECT_EQ(launched_processes(), 1);
  setenv("SLURM_STEP_NUM_TASKS", "4", 1);
  EXPECT_EQ(launched_processes(), 4);
  setenv("SLURM_STEP_NUM_TASKS", "four", 1);
  EXPECT_EQ(launched_processes(), 1) << "not a number: ignored";
  unsetenv("SLURM_STEP_NUM_TASKS");
  EXPECT_EQ(launched_local_rank(), 0);
  setenv("SLURM_LOCALID", "3", 1);
  EXPECT_EQ(launched_local_rank(), 3) << "srun's local rank picks the GPU";
  setenv("SLURM_LOCALID", "-1", 1);
  EXPECT_EQ(launched_local_rank(), 0) << "not a rank: ignored";
  unsetenv("SLURM_LOCALID");
  if (!mpi_built()) {  // a multi-process launch in a build without MPI is a one-line error
    setenv("OMPI_COMM_WORLD_SIZE", "2", 1);
    auto made = make_job_comm();
    unsetenv("OMPI_COMM_WORLD_SIZE");
    ASSERT_FALSE(made.ok());
    EXPECT_NE(made.error().message.find("built without MPI"), std::string::npos) << made.error().message;
  }
}

}  // namespace
}  // namespace ftx
