// The op table (ggml's test-backend-ops idea): every compute op of kernels/backend.h as one row
// that builds cases of it from sizes. One row drives
//   - the CPU backend against the op in double (tests/test_cpu_backend.cpp),
//   - the double op against finite differences, for rows with a gradient (tests/test_ops_grad.cpp),
//   - the CUDA backend against the CPU on a GPU, and in the CPU emulation of CUDA
//     (tests/test_backend_ops.cpp, built twice),
//   - `ftx bench ops`: each op of a real training step timed alone, at the sizes the step called it
//     with (kernels/op_trace.h records them).
// A new op is one row in op_table.cpp (plus its line in OpTraceBackend, which the compiler asks for).
//
// A case holds its inputs on the host, already rounded to what the device stores (floats, bf16),
// so every backend and the double reference see the same numbers. Out buffers start as NaN (they
// must be written), InOut buffers with values (accumulating ops add to them), and each device
// buffer is followed by guard words that an op writing past its end changes.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "kernels/backend.h"

namespace ftx {

// The sizes a case is built from; each op reads the ones its Backend call takes.
struct OpDims {
  size_t n = 1;                      // elements of a flat op (add, swiglu, adamw, ...)
  int N = 1, C = 1, OC = 1, V = 1;   // rows, width (IC of a matmul), matmul outputs, classes
  int H = 1, B = 1, T = 1;           // latent bits; batch and positions (rope, kl_batch_mean)
  int NH = 1, NKV = 1, HS = 2;       // heads, kv heads, head size (rope, attention)
  int Tk = 1, Tk_cap = 1, pos0 = 0;  // attention keys, key rows held, first position
  bool causal = true;
  int variant = 0;  // row-specific: accumulate, in place, bf16 weight, ... (see the row)
};

// An attention call's geometry as OpDims (T holds Tq) and back: the attention rows build their
// cases from it, OpTraceBackend records it.
OpDims op_dims_of(const AttnShape& s);
AttnShape attn_shape_of(const OpDims& d);

// How far a backend may sit from the reference, by the arithmetic of the op.
enum class OpError {
  Exact,        // copies, gathers, single IEEE operations
  Elementwise,  // a few roundings and transcendental functions per element
  Reduction,    // sums over many terms in another order
  Rope,         // angles formed in float on the GPU
  Gemm,         // TF32 tensor cores on CUDA
  Bf16,         // bf16 GEMM inputs on CUDA
  Mapper,       // the binary mapper's backward: a TF32 GEMM, then a cancelling difference
  Attention,    // flash-style fp32 attention, probabilities recomputed in the backward
};
const char* op_error_name(OpError e);
// Relative L2 error ||cuda - cpu|| / ||cpu|| allowed at the CUDA backend's default precision.
double op_limit_gpu(OpError e);
// Relative L2 error allowed for the CPU backend in float against the same op in double.
double op_limit_double(OpError e);

enum class OpElem { F32, I32, U32, BF16 };
enum class OpRole {
  In,       // read only
  Out,      // starts as NaN (0xFFFFFFFF for integers): every element must be written
  InOut,    // starts with values: accumulated into, or updated in place
  Scratch,  // backend-specific contents (attention's saved buffer): only its guard is checked
};

struct OpBuffer {
  std::string name;
  OpRole role = OpRole::In;
  OpElem elem = OpElem::F32;
  std::vector<float> f;         // F32 and BF16 contents (BF16 values are exactly representable)
  std::vector<uint32_t> words;  // I32 and U32 contents (bit patterns)
  // Scratch whose device size is the backend's own (attention_saved_floats); `f` holds the CPU's.
  std::function<size_t(const Backend&)> device_floats;
  // An fp32 weight read by GEMMs: given to Backend::track_weights while the case lives, as the
  // model's parameters are (at bf16 the backend then reads a bf16 copy made once, not per call).
  bool gemm_weight = false;
  size_t count() const;  // elements
  size_t bytes() const;  // bytes on the device
};

// Device pointers of a case's buffers, by index into OpCase::buffers.
struct OpArgs {
  std::vector<void*> ptr;
  std::vector<OpElem> elem;
  double* result = nullptr;  // an op that returns a value on the host (sum_squares) writes it here
  float* f(size_t k) const { return static_cast<float*>(ptr[k]); }
  int32_t* i32(size_t k) const { return static_cast<int32_t*>(ptr[k]); }
  uint32_t* u32(size_t k) const { return static_cast<uint32_t*>(ptr[k]); }
  WeightRef w(size_t k) const { return WeightRef{ptr[k], elem[k] == OpElem::BF16 ? DType::BF16 : DType::F32}; }
};

// Host copies of a case's buffers in double (floats) and as words (integers), for the reference.
struct OpHost {
  std::vector<std::vector<double>> d;
  std::vector<std::vector<uint32_t>> words;
  double result = 0.0;
  double* f(size_t k) { return d[k].data(); }
  int32_t* i32(size_t k) { return reinterpret_cast<int32_t*>(words[k].data()); }
  uint32_t* u32(size_t k) { return words[k].data(); }
};

// The gradient of a forward case for the finite-difference check: given seeds s_o (one per
// buffer in `outputs`, shaped like it), `backward` writes into grads[i] (shaped like buffer
// wrt[i], zeroed before) dL/d wrt[i] of L = sum_o <s_o, output_o>, in double. A buffer may be in
// both lists (an op in place: its contents before are the input, after the output).
struct OpGrad {
  std::vector<size_t> wrt, outputs;
  std::function<void(OpHost& fwd, const std::vector<std::vector<double>>& seeds,
                     std::vector<std::vector<double>>& grads)>
      backward;
};

struct OpCase {
  std::string op;     // the Backend method timed by `run`: "matmul_forward"
  std::string label;  // sizes and variant: "N=333 IC=130 OC=77 accumulate"
  std::vector<OpBuffer> buffers;
  OpError error = OpError::Exact;
  std::function<void(Backend&, const OpArgs&)> prepare;  // optional, untimed (a forward before its backward)
  std::function<void(Backend&, const OpArgs&)> run;
  std::function<void(OpHost&)> reference;  // prepare and run in double (absent: no double form)
  OpGrad grad;                             // empty `backward`: not differentiated
  bool returns_value = false;              // the op returns a number (OpArgs::result), compared too
  bool draws = false;                      // sampled codes: a draw between two roundings of the same p may flip a bit
  double flops = 0.0;                      // per run, for the ops that are products (0: a memory op)
  std::string full_name() const { return op + " " + label; }
};

// One op: its name (the Backend method), how to build a case, and the sizes the tests use.
struct OpRow {
  const char* op;
  std::function<OpCase(const OpDims&, uint64_t seed)> build;
  std::vector<OpDims> test_dims;
};
const std::vector<OpRow>& op_table();
const OpRow* find_op_row(const std::string& op);

// A row at one of its test sizes, built on demand (a test process builds only its own case).
struct OpTestCase {
  const OpRow* row = nullptr;
  OpDims dims;
  uint64_t seed = 0;
  std::string name;  // "matmul_forward_3": the row and the index of the size, for test names
  OpCase build() const { return row->build(dims, seed); }
};
// Every row at every one of its test sizes (seeds differ from case to case).
std::vector<OpTestCase> op_test_cases();
// How GoogleTest prints a case (its name, not its bytes, in test listings and ctest names).
inline void PrintTo(const OpTestCase& c, std::ostream* os) { *os << c.name; }

// One case run on one backend: the contents of its Out and InOut buffers (floats; integers as
// their values), the host result, and the buffers written past their end.
struct OpOutputs {
  std::map<std::string, std::vector<float>> f;
  std::map<std::string, std::vector<uint32_t>> words;
  double result = 0.0;
  std::vector<std::string> overruns;
};
// A case's buffers on a backend, each followed by guard words; released with the object. A
// gemm_weight buffer is the backend's tracked weights meanwhile (track_weights(nullptr, 0) after).
class OpBuffers {
 public:
  // Device allocation failures are errors naming the case (bench sizes), not aborts.
  static Result<std::unique_ptr<OpBuffers>> upload(Backend& be, const OpCase& c);
  ~OpBuffers();
  OpBuffers(const OpBuffers&) = delete;
  OpBuffers& operator=(const OpBuffers&) = delete;
  void prepare() {
    if (c_.prepare) c_.prepare(be_, args_);
  }
  void run() { c_.run(be_, args_); }
  // Synchronizes, then the outputs and the buffers written past their end.
  OpOutputs download() const;
  // Bytes an op moves at least once: inputs and outputs once, InOut buffers twice.
  double traffic_bytes() const;

 private:
  OpBuffers(Backend& be, const OpCase& c) : be_(be), c_(c) {}
  Backend& be_;
  const OpCase& c_;
  OpArgs args_;
  std::vector<size_t> bytes_;
  double result_ = 0.0;
  bool tracking_ = false;
};
// Uploads the case's buffers, runs prepare and run, downloads.
Result<OpOutputs> run_op_case(Backend& be, const OpCase& c);
// The case's reference in double; outputs rounded to float like run_op_case's.
OpOutputs run_op_reference(const OpCase& c);
OpHost op_host(const OpCase& c);

// ||got - ref|| / ||ref|| (the norm of the difference when ref is zero); infinite when the sizes
// differ or either holds NaN or Inf. And the normalized MSE, its square.
double op_rel_error(const std::vector<float>& ref, const std::vector<float>& got);
// "worst at [i]: ref x, got y" for failure messages.
std::string op_worst_element(const std::vector<float>& ref, const std::vector<float>& got);
// Every output of `got` against `ref` within `limit` (relative L2; integer outputs exactly, or
// allowing 1 % of words to differ for a case that draws), and for InOut buffers also the change
// from the initial contents within max(10 limit, 1e-3) of itself (or of 1e-3 of the values, when
// smaller), so that large initial values cannot hide a lost or doubled increment: one line per
// output that is not, empty when all are.
std::vector<std::string> op_compare(const OpCase& c, const OpOutputs& ref, const OpOutputs& got, double limit);

}  // namespace ftx
