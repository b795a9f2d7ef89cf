// What the ftx bench commands share (app/cmd_bench*.cpp): the data of a reshaped model (random
// tokens when the synthetic task does not have its vocabulary or length), timing, the report
// every benchmark starts with, and backend buffers released together.
#pragma once
#include <memory>
#include <vector>

#include <chrono>
#include <nlohmann/json.hpp>

#include "app/commands.h"
#include "core/data/batch_source.h"
#include "core/model/config.h"
#include "core/train/trainer.h"
#include "kernels/backend.h"

namespace ftx::app {

inline constexpr uint64_t kGenerateSeed = 1;  // random weights and prior codes of `bench generate`

// The synthetic task when the shape is its own (vocabulary 29, T = 65), else uniform random
// tokens of --vocab and --seq-len (sequence i a pure function of (seed, i)).
Result<std::unique_ptr<BatchSource>> bench_data(const BenchArgs& a, const TrainConfig& t);
double median(std::vector<double> v);
// What every bench report says: where it ran, the model's shape, the batch and the peak memory.
nlohmann::json common_report(const BenchArgs& a, const Backend& be, const ModelConfig& m, int64_t params);
double physical_memory_gib();
// Uploads n values lo + (hi - lo) * u, u uniform from Philox(seed, stream).
void upload_uniform(Backend& be, float* dst, size_t n, uint64_t stream, float lo, float hi);

// Milliseconds of each of `steps` calls of f after `warmup` untimed ones.
template <class F>
std::vector<double> time_calls(Backend& be, int warmup, int steps, F&& f) {
  for (int i = 0; i < warmup; ++i) f();
  std::vector<double> ms;
  for (int i = 0; i < steps; ++i) {
    be.synchronize();
    const auto t0 = std::chrono::steady_clock::now();
    f();
    be.synchronize();
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  return ms;
}

// What bench train and bench ops train: the data (bench_data), the model's shape and the
// training configuration of --batch, --warmup and --steps (no evaluation, no checkpoints).
struct BenchTraining {
  std::unique_ptr<BatchSource> data;
  ModelConfig model;
  TrainConfig train;
};
Result<BenchTraining> bench_training(const BenchArgs& a);
// A trainer of that model on `be`, in a ":memory:" run store.
Result<std::unique_ptr<Trainer>> start_bench_trainer(Backend& be, const BenchTraining& t);
// Seconds of each of `steps` training steps after `warmup` untimed ones.
std::vector<double> time_train_steps(Backend& be, Trainer& trainer, BatchSource& data, int warmup, int steps);

// Backend buffers released together (also on the early returns of a refused allocation).
class DeviceBuffers {
 public:
  explicit DeviceBuffers(Backend& be) : be_(be) {}
  ~DeviceBuffers() {
    for (void* p : ptrs_) be_.release(p);
  }
  DeviceBuffers(const DeviceBuffers&) = delete;
  DeviceBuffers& operator=(const DeviceBuffers&) = delete;
  float* floats(size_t n) {  // null when out of memory: the caller says what did not fit
    void* p = be_.try_alloc(n * sizeof(float)).value_or(nullptr);
    if (p) ptrs_.push_back(p);
    return static_cast<float*>(p);
  }

 private:
  Backend& be_;
  std::vector<void*> ptrs_;
};

// The benchmarks, each in its own cmd_bench_<name>.cpp.
int run_bench_train(const BenchArgs& a);
int run_bench_ops(const BenchArgs& a);
int run_bench_mapper(const BenchArgs::Mapper& m);
int run_bench_generate(const BenchArgs& a);

}  // namespace ftx::app
