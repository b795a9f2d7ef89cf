// The MPI communicator (core/dist/comm.h): MPI_COMM_WORLD of the job mpirun or srun started.
// Errors come back as values (MPI_ERRORS_RETURN), each naming the collective and this rank.
// Built only when CMake finds MPI (FTX_HAVE_MPI).
// The C API only: without these, Open MPI's and MPICH's mpi.h also pull in the deprecated C++
// bindings, which need a library this build does not link.
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>

#include <string>

#include "core/dist/comm.h"

namespace ftx {

namespace {

class MpiComm final : public Comm {
 public:
  MpiComm(int rank, int size) : rank_(rank), size_(size) {}
  ~MpiComm() override {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized) MPI_Finalize();
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string engine() const override {
    char version[MPI_MAX_LIBRARY_VERSION_STRING];
    int len = 0;
    MPI_Get_library_version(version, &len);
    std::string v(version, static_cast<size_t>(len));
    if (const size_t comma = v.find(','); comma != std::string::npos) v.resize(comma);
    return v;
  }
  Status allreduce_sum(float* data, size_t n) override {
    return check(MPI_Allreduce(MPI_IN_PLACE, data, count(n), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD), "MPI_Allreduce");
  }
  Status allreduce_sum(double* data, size_t n) override {
    return check(MPI_Allreduce(MPI_IN_PLACE, data, count(n), MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD), "MPI_Allreduce");
  }
  Status broadcast(void* data, size_t bytes, int root) override {
    return check(MPI_Bcast(data, count(bytes), MPI_BYTE, root, MPI_COMM_WORLD), "MPI_Bcast");
  }
  Status allgather(const void* in, size_t bytes, void* out) override {
    return check(MPI_Allgather(in, count(bytes), MPI_BYTE, out, count(bytes), MPI_BYTE, MPI_COMM_WORLD),
                 "MPI_Allgather");
  }

 private:
  // MPI counts are int: the trainer's buffers are its gradients, far below 2^31 floats a call.
  static int count(size_t n) {
    FT_ASSERT(n <= 0x7fffffffu, "one MPI call of %zu elements", n);
    return static_cast<int>(n);
  }
  Status check(int code, const char* what) const {
    if (code == MPI_SUCCESS) return {};
    char text[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(code, text, &len);
    return make_error(std::string(what) + " on rank " + std::to_string(rank_) + " of " + std::to_string(size_) + ": " +
                      std::string(text, static_cast<size_t>(len)));
  }
  int rank_, size_;
};

}  // namespace

Result<std::unique_ptr<Comm>> make_mpi_comm() {
  int initialized = 0;
  MPI_Initialized(&initialized);
  // FUNNELED: only the thread that made the communicator calls MPI (OpenMP threads never do).
  int provided = 0;
  if (!initialized && MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS)
    return make_error("MPI_Init_thread failed: is this process started by mpirun or srun?");
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  return std::unique_ptr<Comm>(std::make_unique<MpiComm>(rank, size));
}

}  // namespace ftx
