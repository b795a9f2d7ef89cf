// A data-parallel job's wiring for `ftx train` and `ftx bench train` (docs/distributed.md): which
// GPU this rank takes, the device communicator that sums its gradients there, and the relaunch of
// `--processes N` under mpirun. The job itself (ranks, collectives) is core/dist/comm.h.
#pragma once
#include <functional>
#include <memory>
#include <string>

#include "core/dist/comm.h"
#include "kernels/backend.h"
#include "kernels/device_comm.h"

namespace ftx::app {

// Runs `rank_body` as this process's part of the job the launcher started (one process when none):
// the job's communicator with the hang deadline `patience_s` (Comm::set_patience), standard
// output closed on every rank but 0 (rank 0 reports), and a rank whose body fails (exit code 1)
// ends the whole job, so the others do not wait for it until their deadline.
int run_as_job(double patience_s, const std::function<int(Comm&)>& rank_body);

// --device as this rank uses it: in a job, "cuda" becomes "cuda:<local rank mod the GPUs>", so the
// ranks on a host take one GPU each; anything else is kept.
std::string rank_device(const Comm& comm, const std::string& device);

// How this rank's gradients are summed in a job: on its GPU through NCCL (`device` set; rank 0
// makes the communicator's id, which travels over `comm`), or through the host and `comm`. `text`
// says which, and why not NCCL on a CUDA backend: "NCCL 2.28.3 on the GPUs", "Open MPI v4.1.4
// through the host (ranks 0 and 1 share GPU 0 of host gpu1; NCCL needs one GPU per rank)". One
// process: no device communicator and no text. `device` is this rank's --device (rank_device).
struct GradientPath {
  std::unique_ptr<DeviceComm> device;
  std::string text;
};
Result<GradientPath> gradient_path(Comm& comm, Backend& be, const std::string& device);

// --processes N of a command run outside a job: starts this command again as N processes under
// mpirun (--oversubscribe, OMP_NUM_THREADS = cores / N unless set) and does not return when that
// works. Inside a job of N processes it returns at once; an error names a job of another size or
// a build without MPI.
Status relaunch_as_job(int processes);

}  // namespace ftx::app
