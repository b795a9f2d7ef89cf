// Comm: the processes of one training job and the collectives data-parallel training needs (issue
// 26, docs/distributed.md). One process is rank 0 of 1 and every collective returns at once; a
// job started by mpirun or srun with more than one process talks through Open MPI (comm_mpi.cpp,
// built when CMake finds MPI). The buffers are host memory; a GPU's gradients go through NCCL in
// the CUDA backend, not here.
// Not here: which rank reads which sequences or writes the run store (core/train), process
// launch (mpirun's job), any protocol of our own.
#pragma once
#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "kernels/base/result.h"

namespace ftx {

class Comm {
 public:
  virtual ~Comm() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // "one process", or the MPI library's own name and version ("Open MPI v4.1.4, ...").
  virtual std::string engine() const = 0;
  // In place: every rank's data becomes the element-wise sum over the ranks.
  virtual Status allreduce_sum(float* data, size_t n) = 0;
  virtual Status allreduce_sum(double* data, size_t n) = 0;
  // Rank `root`'s bytes into every rank's `data`.
  virtual Status broadcast(void* data, size_t bytes, int root) = 0;
  // Every rank's `bytes` of `in` into every rank's `out` (size() x bytes), in rank order.
  virtual Status allgather(const void* in, size_t bytes, void* out) = 0;
  // Blocks of floats, counts[q] from rank q, laid end to end in rank order (ZeRO-1's slices):
  // in place, `data` holding this rank's block at its place already, every rank gets all blocks;
  // or every rank's `mine` into rank `root`'s `all` (null elsewhere).
  virtual Status allgather_blocks(float* data, const std::vector<size_t>& counts) = 0;
  virtual Status gather_blocks(const float* mine, float* all, const std::vector<size_t>& counts, int root) = 0;
  bool root() const { return rank() == 0; }
  // Sums that run while the caller computes (gradient buckets during the backward):
  // start_allreduce_sum begins summing `data` in place, which stays untouched until
  // finish_allreduces() has waited for every started sum (within the patience, see below);
  // progress() lets the library move them on between two pieces of work.
  virtual Status start_allreduce_sum(float* data, size_t n) = 0;
  virtual Status progress() = 0;
  virtual Status finish_allreduces() = 0;
  // Ends every process of the job with `code` (MPI_Abort); one process: exits.
  [[noreturn]] virtual void abort_job(int code) = 0;

  // Hang detection. Before each collective every rank reports to rank 0 and waits for its answer:
  // rank 0 names a rank that has not arrived after `seconds`, another rank names rank 0 when it
  // has not answered, and the collective fails with that line (the caller then ends the job).
  // 0 (the default): no deadline. A killed rank needs none: mpirun ends the job at once.
  void set_patience(double seconds) { patience_s_ = seconds; }
  // The next collectives follow rank 0's own work (its evaluation, benchmarks, a checkpoint): the
  // other ranks wait for rank 0 ten times the patience, until busy is false.
  void set_root_busy(bool busy) { root_busy_ = busy; }
  // "step 12": named in the hang messages.
  void set_context(std::string context) { context_ = std::move(context); }

 protected:
  double patience_s_ = 0;
  bool root_busy_ = false;
  std::string context_;
};

// Rank `root`'s text on every rank (its length first, then its bytes).
Result<std::string> broadcast_text(Comm& comm, const std::string& text, int root = 0);

// Rank 0 of 1.
std::unique_ptr<Comm> make_single_comm();

// The SHA-256 of this process's executable (/proc/self/exe): which build a rank runs, compared at
// the start of a job. Computed once; empty when the file cannot be read.
const std::string& build_digest();

// Whether this build can join an MPI job (CMake found MPI).
bool mpi_built();

// How many processes the launcher started this job with, read from its environment (mpirun's
// OMPI_COMM_WORLD_SIZE, PMI_SIZE, srun's SLURM_STEP_NUM_TASKS); 1 when none is set.
int launched_processes();

// This process's rank among the job's processes on its host, from the launcher's environment
// (OMPI_COMM_WORLD_LOCAL_RANK, SLURM_LOCALID, MPI_LOCALRANKID); 0 when none is set. A job's ranks
// on one host take one GPU each by it.
int launched_local_rank();

// The job's communicator: MPI when the launcher started more than one process, else one process.
// Errors: a multi-process launch in a build without MPI; MPI failing to start.
Result<std::unique_ptr<Comm>> make_job_comm();

}  // namespace ftx
