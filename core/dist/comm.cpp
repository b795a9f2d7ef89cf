// The single-process communicator and the choice of the job's (core/dist/comm.h).
#include "core/dist/comm.h"

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <initializer_list>

#include "core/util/sha256.h"

namespace ftx {

#ifdef FTX_HAVE_MPI
Result<std::unique_ptr<Comm>> make_mpi_comm();  // comm_mpi.cpp
#endif

namespace {

class SingleComm final : public Comm {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  std::string engine() const override { return "one process"; }
  [[noreturn]] void abort_job(int code) override { std::exit(code); }
  Status allreduce_sum(float*, size_t) override { return {}; }
  Status allreduce_sum(double*, size_t) override { return {}; }
  Status broadcast(void*, size_t, int) override { return {}; }
  Status allgather(const void* in, size_t bytes, void* out) override {
    if (bytes > 0) std::memcpy(out, in, bytes);
    return {};
  }
  Status start_allreduce_sum(float*, size_t) override { return {}; }
  Status progress() override { return {}; }
  Status finish_allreduces() override { return {}; }
  Status allgather_blocks(float*, const std::vector<size_t>&) override { return {}; }
  Status gather_blocks(const float* mine, float* all, const std::vector<size_t>& counts, int) override {
    if (all != mine && !counts.empty()) std::memcpy(all, mine, counts[0] * sizeof(float));
    return {};
  }
};

}  // namespace

Result<std::string> broadcast_text(Comm& comm, const std::string& text, int root) {
  uint64_t n = text.size();
  FTX_TRY(comm.broadcast(&n, sizeof n, root));
  std::string out = comm.rank() == root ? text : std::string(n, '\0');
  if (n > 0) FTX_TRY(comm.broadcast(out.data(), n, root));
  return out;
}

const std::string& build_digest() {
  static const std::string digest = sha256_file("/proc/self/exe").value_or(std::string());
  return digest;
}

std::unique_ptr<Comm> make_single_comm() { return std::make_unique<SingleComm>(); }

bool mpi_built() {
#ifdef FTX_HAVE_MPI
  return true;
#else
  return false;
#endif
}

namespace {
// The first of `vars` set to a whole number >= `least`; `fallback` when none is.
int env_number(std::initializer_list<const char*> vars, int least, int fallback) {
  for (const char* var : vars) {
    const char* v = std::getenv(var);
    if (v == nullptr || *v == '\0') continue;
    char* end = nullptr;
    const long n = std::strtol(v, &end, 10);
    if (*end == '\0' && n >= least) return static_cast<int>(n);
  }
  return fallback;
}
}  // namespace

int launched_processes() { return env_number({"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_STEP_NUM_TASKS"}, 1, 1); }

int launched_local_rank() {
  return env_number({"OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID", "MPI_LOCALRANKID"}, 0, 0);
}

Result<std::unique_ptr<Comm>> make_job_comm() {
  const int n = launched_processes();
  if (n <= 1) return make_single_comm();
#ifdef FTX_HAVE_MPI
  return make_mpi_comm();
#else
  return make_error("started as " + std::to_string(n) +
                    " processes (mpirun or srun), but this ftx was built without MPI: install libopenmpi-dev "
                    "and rebuild (./test.sh does both), or run one process");
#endif
}

}  // namespace ftx
