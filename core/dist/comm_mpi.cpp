// The MPI communicator (core/dist/comm.h): MPI_COMM_WORLD of the job mpirun or srun started.
// Errors come back as values (MPI_ERRORS_RETURN), each naming the collective and this rank.
// Built only when CMake finds MPI (FTX_HAVE_MPI).
// The C API only: without these, Open MPI's and MPICH's mpi.h also pull in the deprecated C++
// bindings, which need a library this build does not link.
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "core/dist/comm.h"

namespace ftx {

namespace {

class MpiComm final : public Comm {
 public:
  MpiComm(int rank, int size) : rank_(rank), size_(size) {}
  ~MpiComm() override {
    if (watchdog_.joinable()) {
      {
        std::lock_guard<std::mutex> lock(mu_);
        quit_ = true;
      }
      cv_.notify_all();
      watchdog_.join();
    }
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
  [[noreturn]] void abort_job(int code) override {
    std::fflush(stdout);
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, code);
    std::_Exit(code);  // MPI_Abort does not return; this keeps [[noreturn]] true if it did
  }
  Status allreduce_sum(float* data, size_t n) override {
    return guarded("MPI_Allreduce",
                   [&] { return MPI_Allreduce(MPI_IN_PLACE, data, count(n), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD); });
  }
  Status allreduce_sum(double* data, size_t n) override {
    return guarded("MPI_Allreduce",
                   [&] { return MPI_Allreduce(MPI_IN_PLACE, data, count(n), MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD); });
  }
  Status broadcast(void* data, size_t bytes, int root) override {
    return guarded("MPI_Bcast", [&] { return MPI_Bcast(data, count(bytes), MPI_BYTE, root, MPI_COMM_WORLD); });
  }
  Status start_allreduce_sum(float* data, size_t n) override {
    MPI_Request r;
    FTX_TRY(
        check(MPI_Iallreduce(MPI_IN_PLACE, data, count(n), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, &r), "MPI_Iallreduce"));
    pending_.push_back(r);
    return {};
  }
  Status progress() override {
    if (pending_.empty()) return {};
    int done = 0;
    return check(MPI_Testall(int(pending_.size()), pending_.data(), &done, MPI_STATUSES_IGNORE), "MPI_Testall");
  }
  Status finish_allreduces() override {
    FTX_TRY(arrive("MPI_Iallreduce"));  // a rank that never got here is named, as for the others
    const auto start = Clock::now();
    auto pause = [us = 5]() mutable {
      std::this_thread::sleep_for(std::chrono::microseconds(us));
      us = std::min(us * 2, 200);
    };
    while (!pending_.empty()) {
      int done = 0;
      FTX_TRY(check(MPI_Testall(int(pending_.size()), pending_.data(), &done, MPI_STATUSES_IGNORE), "MPI_Testall"));
      if (done) break;
      if (patience_s_ > 0 && std::chrono::duration<double>(Clock::now() - start).count() > patience_s_)
        return make_error(std::to_string(pending_.size()) + " gradient sums (MPI_Iallreduce" +
                          (context_.empty() ? "" : ", " + context_) + ") on rank " + std::to_string(rank_) + " of " +
                          std::to_string(size_) + " have not completed within " + seconds_text(patience_s_) +
                          " after every rank arrived: a rank hung or was cut off in them; ending the job");
      pause();
    }
    pending_.clear();
    return {};
  }
  Status allgather_blocks(float* data, const std::vector<size_t>& counts) override {
    std::vector<int> n, at;
    layout(counts, n, at);
    return guarded("MPI_Allgatherv", [&] {
      return MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, data, n.data(), at.data(), MPI_FLOAT, MPI_COMM_WORLD);
    });
  }
  Status gather_blocks(const float* mine, float* all, const std::vector<size_t>& counts, int root) override {
    std::vector<int> n, at;
    layout(counts, n, at);
    return guarded("MPI_Gatherv", [&] {
      return MPI_Gatherv(mine, n[size_t(rank_)], MPI_FLOAT, all, n.data(), at.data(), MPI_FLOAT, root, MPI_COMM_WORLD);
    });
  }
  Status allgather(const void* in, size_t bytes, void* out) override {
    return guarded("MPI_Allgather", [&] {
      return MPI_Allgather(in, count(bytes), MPI_BYTE, out, count(bytes), MPI_BYTE, MPI_COMM_WORLD);
    });
  }

 private:
  static constexpr int kTagArrive = 7301, kTagAnswer = 7302;
  static constexpr double kBusyFactor = 10;  // rank 0's own work may take 10 times the patience
  using Clock = std::chrono::steady_clock;

  // A collective with the hang checks: the arrival check names a rank that never came; once all
  // have arrived, the watchdog thread ends this process if the collective itself does not complete
  // within the patience (a rank stopped or cut off in the middle of it). It calls no MPI function:
  // it prints the line and exits, and mpirun then ends the job.
  template <class Call>
  Status guarded(const char* what, Call call) {
    FTX_TRY(arrive(what));
    if (patience_s_ <= 0 || size_ == 1) return check(call(), what);
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!watchdog_.joinable()) watchdog_ = std::thread([this] { watch(); });
      deadline_ =
          Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(patience_s_));
      alarm_ = "ftx: " + std::string(what) + (context_.empty() ? "" : " (" + context_ + ")") + " on rank " +
               std::to_string(rank_) + " of " + std::to_string(size_) + " has not completed within " +
               seconds_text(patience_s_) +
               " after every rank arrived: a rank hung or was cut off in it; ending the job";
    }
    cv_.notify_all();
    const int code = call();
    {
      std::lock_guard<std::mutex> lock(mu_);
      deadline_.reset();
    }
    return check(code, what);
  }
  void watch() {
    std::unique_lock<std::mutex> lock(mu_);
    while (!quit_) {
      if (!deadline_) {
        cv_.wait(lock);
        continue;
      }
      if (Clock::now() >= *deadline_) {
        std::fprintf(stderr, "%s\n", alarm_.c_str());
        std::fflush(stderr);
        std::_Exit(1);
      }
      cv_.wait_until(lock, *deadline_);
    }
  }

  // The arrival check before a collective (Comm::set_patience): each rank sends rank 0 the number
  // of the collective it is about to enter; rank 0 answers every rank once all have arrived.
  // Waits poll with a sleep that grows to 1 ms, so a waiting rank leaves the cores to the others.
  Status arrive(const char* what) {
    if (patience_s_ <= 0 || size_ == 1) return {};
    ++seq_;
    const auto start = std::chrono::steady_clock::now();
    const double patience = (!root() && root_busy_) ? kBusyFactor * patience_s_ : patience_s_;
    auto waited_out = [&] {
      return patience > 0 && std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() > patience;
    };
    auto pause = [us = 20]() mutable {
      std::this_thread::sleep_for(std::chrono::microseconds(us));
      us = std::min(us * 2, 1000);
    };
    const std::string at = " (" + std::string(what) + (context_.empty() ? "" : ", " + context_) + ")";
    if (root()) {
      std::vector<int64_t> seqs(size_t(size_), 0);
      std::vector<MPI_Request> req(size_t(size_ - 1));
      for (int q = 1; q < size_; ++q)
        FTX_TRY(check(MPI_Irecv(&seqs[size_t(q)], 1, MPI_INT64_T, q, kTagArrive, MPI_COMM_WORLD, &req[size_t(q - 1)]),
                      "MPI_Irecv"));
      for (;;) {
        int done = 0;
        FTX_TRY(check(MPI_Testall(int(req.size()), req.data(), &done, MPI_STATUSES_IGNORE), "MPI_Testall"));
        if (done) break;
        if (waited_out()) {
          std::string missing;
          for (int q = 1; q < size_; ++q)
            if (req[size_t(q - 1)] != MPI_REQUEST_NULL) missing += (missing.empty() ? "" : ", ") + std::to_string(q);
          return make_error("rank " + missing + " of " + std::to_string(size_) + " has not arrived within " +
                            seconds_text(patience) + at + ": hung, stopped or cut off; ending the job");
        }
        pause();
      }
      for (int q = 1; q < size_; ++q)
        if (seqs[size_t(q)] != seq_)
          return make_error("rank " + std::to_string(q) + " is at collective " + std::to_string(seqs[size_t(q)]) +
                            " where rank 0 is at " + std::to_string(seq_) + at + ": the ranks run different code");
      for (int q = 1; q < size_; ++q)
        FTX_TRY(check(MPI_Send(&seq_, 1, MPI_INT64_T, q, kTagAnswer, MPI_COMM_WORLD), "MPI_Send"));
      return {};
    }
    int64_t answer = 0;
    MPI_Request req[2];
    FTX_TRY(check(MPI_Isend(&seq_, 1, MPI_INT64_T, 0, kTagArrive, MPI_COMM_WORLD, &req[0]), "MPI_Isend"));
    FTX_TRY(check(MPI_Irecv(&answer, 1, MPI_INT64_T, 0, kTagAnswer, MPI_COMM_WORLD, &req[1]), "MPI_Irecv"));
    for (;;) {
      int done = 0;
      FTX_TRY(check(MPI_Testall(2, req, &done, MPI_STATUSES_IGNORE), "MPI_Testall"));
      if (done) return {};
      if (waited_out())
        return make_error("rank 0 of " + std::to_string(size_) + " has not answered rank " + std::to_string(rank_) +
                          " within " + seconds_text(patience) + at + ": hung, stopped or cut off; ending the job");
      pause();
    }
  }
  static std::string seconds_text(double s) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%g s", s);
    return buf;
  }

  // Counts and displacements of blocks laid end to end, as MPI's v-collectives take them.
  void layout(const std::vector<size_t>& counts, std::vector<int>& n, std::vector<int>& at) const {
    FT_ASSERT(counts.size() == size_t(size_), "%zu block counts for %d ranks", counts.size(), size_);
    size_t sum = 0;
    for (size_t c : counts) n.push_back(count(c)), at.push_back(count(sum)), sum += c;
  }
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
  int64_t seq_ = 0;                   // collectives entered with the arrival check
  std::vector<MPI_Request> pending_;  // started sums (start_allreduce_sum)
  // The watchdog of the collective in progress (guarded).
  std::thread watchdog_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::optional<Clock::time_point> deadline_;  // none: no collective in progress
  std::string alarm_;                          // its line
  bool quit_ = false;
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
