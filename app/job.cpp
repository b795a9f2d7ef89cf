// A data-parallel job's wiring (app/job.h).
#include "app/job.h"

#include "app/common.h"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <thread>
#include <vector>

namespace ftx::app {

int run_as_job(double patience_s, const std::function<int(Comm&)>& rank_body) {
  auto made = make_job_comm();
  if (!made) return fail(made.error());
  std::unique_ptr<Comm> comm = std::move(*made);
  comm->set_patience(patience_s);
  if (!comm->root() && !std::freopen("/dev/null", "w", stdout)) return fail("/dev/null: cannot open");
  const int rc = rank_body(*comm);
  if (rc == 1 && comm->size() > 1) comm->abort_job(rc);
  return rc;
}

std::string rank_device(const Comm& comm, const std::string& device) {
  if (comm.size() <= 1 || device != "cuda") return device;
  const int gpus = cuda_device_count();
  return gpus > 0 ? "cuda:" + std::to_string(launched_local_rank() % gpus) : device;
}

Result<GradientPath> gradient_path(Comm& comm, Backend& be, const std::string& device) {
  GradientPath path;
  if (comm.size() <= 1) return path;
  const std::string host_path = comm.engine() + " through the host";
  if (be.kind() != DeviceKind::Cuda) {
    path.text = host_path;
    return path;
  }
  if (!nccl_built()) {
    path.text = host_path + " (this build has no NCCL)";
    return path;
  }
  // NCCL refuses two ranks on one GPU: every rank's host and GPU, gathered, find such a pair.
  struct Place {
    char host[64] = {};
    char device[16] = {};
  } mine;
  ::gethostname(mine.host, sizeof mine.host - 1);
  std::snprintf(mine.device, sizeof mine.device, "%s", device.c_str());
  std::vector<Place> all(size_t(comm.size()));
  FTX_TRY(comm.allgather(&mine, sizeof mine, all.data()));
  for (size_t q = 0; q < all.size(); ++q)
    for (size_t r = q + 1; r < all.size(); ++r)
      if (std::strcmp(all[q].host, all[r].host) == 0 && std::strcmp(all[q].device, all[r].device) == 0) {
        path.text = host_path + " (ranks " + std::to_string(q) + " and " + std::to_string(r) + " share " +
                    all[q].device + " of host " + all[q].host + "; NCCL needs one GPU per rank)";
        return path;
      }
  auto id = comm.root() ? device_comm_id() : Result<std::string>(std::string());
  if (!id) return id.error();
  auto shared = broadcast_text(comm, *id);
  if (!shared) return shared.error();
  auto made = make_device_comm(be, *shared, comm.rank(), comm.size());
  if (!made) return made.error();
  path.device = std::move(*made);
  path.text = path.device->engine() + " on the GPUs";
  return path;
}

Status relaunch_as_job(int processes) {
  if (processes <= 1) return {};
  const int launched = launched_processes();
  if (launched == processes) return {};  // this is one of the ranks
  if (launched > 1)
    return make_error("--processes " + std::to_string(processes) + ": already a job of " + std::to_string(launched) +
                      " processes");
  if (!mpi_built())
    return make_error("--processes " + std::to_string(processes) +
                      ": this ftx was built without MPI (install libopenmpi-dev and rebuild; ./test.sh does both)");
  // This command line again (/proc/self/cmdline: NUL-separated), under mpirun.
  std::ifstream in("/proc/self/cmdline", std::ios::binary);
  const std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::string> words;
  for (size_t at = 0; at < all.size();) {
    const size_t end = all.find('\0', at);
    words.push_back(all.substr(at, end == std::string::npos ? std::string::npos : end - at));
    at = end == std::string::npos ? all.size() : end + 1;
  }
  if (words.empty()) return make_error("/proc/self/cmdline: cannot read this command line");
  words[0] = "/proc/self/exe";
  char self[4096];
  const ssize_t n = ::readlink("/proc/self/exe", self, sizeof self - 1);
  if (n > 0) words[0].assign(self, size_t(n));
  std::vector<std::string> argv = {"mpirun", "-np", std::to_string(processes), "--oversubscribe", "--bind-to", "none"};
  argv.insert(argv.end(), words.begin(), words.end());
  const int cores = int(std::thread::hardware_concurrency());
  setenv("OMP_NUM_THREADS", std::to_string(std::max(1, cores / processes)).c_str(), 0);
  if (::geteuid() == 0) {  // Open MPI refuses root unless told; the user already runs as root
    setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 0);
    setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 0);
  }
  std::vector<char*> args;
  for (std::string& w : argv) args.push_back(w.data());
  args.push_back(nullptr);
  std::fflush(stdout);
  ::execvp("mpirun", args.data());
  return make_error(std::string("--processes: cannot start mpirun: ") + std::strerror(errno));
}

}  // namespace ftx::app
