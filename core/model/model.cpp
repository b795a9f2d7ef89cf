// Free Transformer forward and backward as straight-line op calls (llm.c style). Backward runs in
// exact reverse order of forward; parameter gradients accumulate (+=) into the grads arena,
// activation gradients overwrite scratch buffers, the residual stream carries its gradient.
//
// Data walk of one forward (the paper's Algorithm 2, docs/design.md section 3):
//   x0 = embed(inputs); x_{l+1} = block_l(x_l) for l < k (k = inject_after)
//   encoder: y = enc_block(q = zeta, kv = x_k, non-causal); bits = readout(rmsnorm(y))
//   p = sigmoid(bits); codes ~ Bernoulli(p) (or given); R = W_post[:, codes]
//   x_{k+1} = block_k(q = x_k, kv = x_k + R); x_{l+1} = block_l(x_l) for l > k
//   logits = lm_head(rmsnorm(x_L)); loss = CE + free bits (core/model/free_bits.h)
#include "core/model/model.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <optional>
#include <string>

#include "core/model/decode_threads.h"
#include "kernels/base/philox.h"

namespace ftx {

namespace {

// Hands out consecutive, 16-float aligned slices of one arena.
class Carver {
 public:
  explicit Carver(float* base) : base_(base) {}
  float* take(size_t n) {
    float* p = base_ ? base_ + used_ : nullptr;
    used_ += (n + 15) / 16 * 16;
    return p;
  }
  size_t used() const { return used_; }

 private:
  float* base_;
  size_t used_ = 0;
};

// Standard normal from two Philox uniforms (Box-Muller).
float philox_normal(uint64_t seed, uint64_t stream, uint64_t i) {
  float u1 = philox_uniform(seed, stream, 2 * i);
  float u2 = philox_uniform(seed, stream, 2 * i + 1);
  u1 = u1 < 1e-7f ? 1e-7f : u1;
  return std::sqrt(-2.0f * std::log(u1)) * std::cos(6.28318530718f * u2);
}

}  // namespace

Model::Model(Backend& backend, const ModelConfig& config, LayoutOnly) : be_(backend), cfg_(config) {
  FT_ASSERT(cfg_.validate().ok(), "invalid config reached Model: %s", cfg_.validate().error().message.c_str());
  specs_ = param_specs(cfg_);
  n_params_ = param_count(specs_);
  const std::vector<float> freq = rope_inv_freq(cfg_);
  rope_freq_ = static_cast<float*>(be_.alloc(freq.size() * sizeof(float)));
  be_.upload(rope_freq_, freq.data(), freq.size() * sizeof(float));
}

Model::Model(Backend& backend, const ModelConfig& config, std::nullptr_t) : Model(backend, config, LayoutOnly{}) {
  params_ = static_cast<float*>(be_.try_alloc(n_params_ * sizeof(float)).value_or(nullptr));
  if (params_ == nullptr) return;
  be_.track_weights(params_, static_cast<size_t>(n_params_));  // bf16 GEMMs read a bf16 copy
  std::vector<WeightRef> refs;
  refs.reserve(specs_.size());
  for (const ParamSpec& s : specs_) refs.push_back(f32_weight(params_ + s.offset));
  set_tensors(std::move(refs));
}

void Model::set_tensors(std::vector<WeightRef> refs) {
  refs_ = std::move(refs);
  w_ = resolve_params(cfg_, specs_, refs_);
}

Model::Model(Backend& backend, const ModelConfig& config) : Model(backend, config, nullptr) {
  FT_ASSERT(params_ != nullptr, "%s: out of memory for %lld parameters", be_.name(), static_cast<long long>(n_params_));
}

namespace {
std::string gib(double bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f GiB", bytes / double(1ull << 30));
  return buf;
}
}  // namespace

Result<std::unique_ptr<Model>> Model::create(Backend& backend, const ModelConfig& config) {
  std::unique_ptr<Model> m(new Model(backend, config, nullptr));
  if (m->params_ == nullptr)
    return make_error(std::string(backend.name()) + ": not enough memory for the model's weights (" +
                      std::to_string(m->n_params_) + " parameters, " + gib(4.0 * double(m->n_params_)) + " in fp32)");
  return m;
}

Result<std::unique_ptr<Model>> Model::create_inference(Backend& backend, const ModelConfig& config,
                                                       const TensorSource& source) {
  FTX_TRY(config.validate());
  std::unique_ptr<Model> m(new Model(backend, config, LayoutOnly{}));
  FTX_TRY(m->take_tensors(source));
  return m;
}

namespace {
// Tensors inside the inference model's buffers start at multiples of 256 bytes (any vector load,
// and cuBLAS's preferred alignment).
size_t padded(size_t bytes) { return (bytes + 255) / 256 * 256; }

// n elements of src (fp32 or bf16) as fp32.
void widen(float* dst, WeightRef src, size_t n) {
  switch (src.dtype) {
    case DType::F32:
      std::memcpy(dst, src.ptr, n * sizeof(float));
      return;
    case DType::BF16:
      bf16_to_fp32(dst, src.bf16(), n);
      return;
  }
  FT_ASSERT(false, "widen: no %s path", dtype_name(src.dtype));
}
}  // namespace

// create_inference's work: the fp32 tensors into params_ (compact, in specs order), GEMM weights in
// place on a host backend, else uploaded in their dtype into uploaded_.
Status Model::take_tensors(const TensorSource& source) {
  inference_ = true;
  const bool in_place = be_.kind() == DeviceKind::Cpu;  // backend memory is host memory
  std::vector<WeightRef> given(specs_.size());
  size_t fp32_bytes = 0, upload_bytes = 0;
  for (size_t i = 0; i < specs_.size(); ++i) {
    ParamSpec& s = specs_[i];
    given[i] = source(s);
    if (given[i].ptr == nullptr) return make_error("model tensor " + s.name + ": not given");
    s.dtype = s.gemm_weight ? given[i].dtype : DType::F32;
    const size_t bytes = padded(size_t(s.numel) * dtype_size(s.dtype));
    if (!s.gemm_weight)
      fp32_bytes += bytes;
    else if (!in_place)
      upload_bytes += bytes;
  }
  auto fp32 = be_.try_alloc(fp32_bytes);
  if (!fp32) return fp32.error();
  params_ = static_cast<float*>(*fp32);
  if (upload_bytes > 0) {
    auto up = be_.try_alloc(upload_bytes);
    if (!up) return up.error();
    uploaded_ = *up;
  }
  std::vector<WeightRef> refs(specs_.size());
  std::vector<float> host;
  char* fp32_at = reinterpret_cast<char*>(params_);
  char* upload_at = static_cast<char*>(uploaded_);
  for (size_t i = 0; i < specs_.size(); ++i) {
    const ParamSpec& s = specs_[i];
    const size_t bytes = size_t(s.numel) * dtype_size(s.dtype);
    if (!s.gemm_weight) {
      host.resize(size_t(s.numel));
      widen(host.data(), given[i], host.size());
      be_.upload(fp32_at, host.data(), bytes);
      refs[i] = f32_weight(reinterpret_cast<const float*>(fp32_at));
      fp32_at += padded(bytes);
    } else if (in_place) {
      refs[i] = given[i];
    } else {
      be_.upload(upload_at, given[i].ptr, bytes);
      refs[i] = WeightRef{upload_at, s.dtype};
      upload_at += padded(bytes);
    }
  }
  set_tensors(std::move(refs));
  return {};
}

float* Model::params() {
  FT_ASSERT(!inference_, "params(): an inference-only model has no fp32 arena");
  return params_;
}

Status Model::allocate_grads() {
  FT_ASSERT(!inference_, "an inference-only model has no gradients");
  if (grads_ != nullptr) return {};
  auto g = be_.try_alloc(n_params_ * sizeof(float));
  if (!g) return g.error();
  grads_ = static_cast<float*>(*g);
  g_ = resolve_grads(cfg_, specs_, grads_);
  return {};
}

float* Model::grads() {
  const Status st = allocate_grads();
  FT_ASSERT(st.ok(), "the gradients: %s", st.error().message.c_str());
  return grads_;
}

Model::~Model() {
  be_.release(params_);
  be_.release(grads_);
  be_.release(uploaded_);
  be_.release(rope_freq_);
}

void Model::init_weights(uint64_t seed, const InitConfig& init) {
  std::vector<float> host(n_params_);
  const float resid_scale = init.scale_residual ? 1.0f / std::sqrt(2.0f * cfg_.n_layers) : 1.0f;
  for (size_t ti = 0; ti < specs_.size(); ++ti) {
    const ParamSpec& s = specs_[ti];
    float* dst = host.data() + s.offset;
    float std = init.std;
    if (s.name.ends_with("o_proj.weight") || s.name.ends_with("down_proj.weight")) std *= resid_scale;
    if (s.name == "free.post_sampler.weight") std = init.post_sampler_std;
    if (s.name == "free.zeta") std = init.zeta_std;
    for (int64_t i = 0; i < s.numel; ++i) {
      dst[i] =
          s.init == ParamInit::Normal ? std * philox_normal(seed, kStreamInit + ti, i) : fixed_init_value(s.init, i);
    }
  }
  if (init.post_sampler_bitlinear && cfg_.is_free()) init_bitlinear_post_sampler(host, seed, init.post_sampler_std);
  load_params(host.data());
}

void Model::init_bitlinear_post_sampler(std::vector<float>& host, uint64_t seed, float std) const {
  const ParamSpec* s = find_param(specs_, "free.post_sampler.weight");
  const int64_t C = cfg_.dim, H = cfg_.latent_bits, codes = cfg_.num_codes();
  std::vector<float> v(size_t(H) * C);  // (H, C) one direction per bit
  for (size_t i = 0; i < v.size(); ++i) v[i] = std * philox_normal(seed, kStreamInit + 999, i);
  float* w = host.data() + s->offset;  // (C, 2^H)
  for (int64_t c = 0; c < C; ++c)
    for (int64_t d = 0; d < codes; ++d) {
      float acc = 0;
      for (int64_t h = 0; h < H; ++h) acc += ((d >> h) & 1 ? 1.0f : -1.0f) * v[size_t(h) * C + c];
      w[c * codes + d] = acc;
    }
}

void Model::load_params(const float* host) {
  FT_ASSERT(!inference_, "load_params: an inference-only model takes its tensors at creation");
  be_.upload(params_, host, n_params_ * sizeof(float));
}
void Model::save_params(float* host) const {
  FT_ASSERT(!inference_, "save_params: an inference-only model has no fp32 arena");
  be_.download(host, params_, n_params_ * sizeof(float));
}
void Model::zero_grad() { be_.fill(grads(), 0.0f, n_params_); }

// ---------------------------------------------------------------------------------------------
// State allocation

// The attention's saved state for (B, Tq, Tk) on `be`; without a backend (sizing ahead of one),
// the CPU's probabilities, the largest any backend keeps.
static size_t attention_saved(const Backend* be, const ModelConfig& m, int B, int Tq, int Tk) {
  const AttnShape sh{B, m.n_heads, m.n_kv_heads, m.head_dim, Tq, Tk, Tk, 0, true};
  return be ? be->attention_saved_floats(sh) : size_t(B) * m.n_heads * Tq * Tk;
}

static void carve_block(Carver& c, BlockActs& a, const ModelConfig& m, int B, int Tq, int Tk, bool two_inputs,
                        const Backend* be) {
  const size_t N = size_t(B) * Tq, C = m.dim, QD = size_t(m.n_heads) * m.head_dim,
               KD = size_t(m.n_kv_heads) * m.head_dim;
  a.ln_q = c.take(N * C);
  a.rstd_q = c.take(N);
  a.ln_kv = two_inputs ? c.take(N * C) : a.ln_q;
  a.rstd_kv = two_inputs ? c.take(N) : a.rstd_q;
  a.q = c.take(N * QD);
  a.k = c.take(N * KD);
  a.v = c.take(N * KD);
  a.att = c.take(attention_saved(be, m, B, Tq, Tk));
  a.atty = c.take(N * QD);
  a.a = c.take(N * C);
  a.ln2 = c.take(N * C);
  a.rstd2 = c.take(N);
  a.gate = c.take(N * m.ffn_hidden);
  a.up = c.take(N * m.ffn_hidden);
  a.hmid = c.take(N * m.ffn_hidden);
}

// Integers carved from the float arena (4-byte words).
static int32_t* take_ints(Carver& c, size_t n) { return reinterpret_cast<int32_t*>(c.take(n)); }

// The surprise gate's buffers for N tokens (SDT, STT): the change, the prior's pass and guess, the
// statistics and their moving average.
static void carve_surprise(Carver& c, RouteActs& r, size_t N, size_t C, size_t P) {
  r.change = c.take(N * C);
  r.prior_ln = c.take(N * C);
  r.prior_rstd = c.take(N);
  r.prior_gate = c.take(N * P);
  r.prior_up = c.take(N * P);
  r.prior_h = c.take(N * P);
  r.change_hat = c.take(N * C);
  r.st_ch = c.take(2 * N);
  r.ma = c.take(N);
}

// A routed model's buffers (docs/subjective_depth.md): per routed block, and shared scratch.
static void carve_routes(Carver& c, ModelState& s, const ModelConfig& m, const Backend* be) {
  // The selection buffers hold up to every token: a per-token choice may take them all.
  const int B = s.B, T = s.T, k = T;
  const size_t N = size_t(B) * T, C = m.dim, P = m.route_prior_hidden(), M = size_t(B) * k;
  const Routing kind = m.routing.kind;
  const bool surprise = m.routing.surprise();
  s.routes.assign(size_t(m.n_layers), RouteActs{});
  for (int l = 0; l < m.n_layers; ++l) {
    if (!m.routed(l)) continue;
    RouteActs& r = s.routes[size_t(l)];
    r.k = m.route_k(T);
    r.score = c.take(N);
    r.g_app = c.take(N);
    if (m.routing.has_student()) {
      r.mask = take_ints(c, N);
      r.st_in = c.take(N * 2 * C);
      r.st_logits = c.take(N * 2);
      r.st_loss = c.take(N);
    }
    r.g = r.score;  // MoD, SDT and STT rank by the gate itself
    r.pos = take_ints(c, M);
    r.rows = take_ints(c, M);
    r.x_sel = c.take(M * C);
    r.y_sel = c.take(M * C);
    carve_block(c, r.sel, m, B, k, k, false, be);
    if (!surprise) continue;
    carve_surprise(c, r, N, C, P);
    r.teacher_out = kind == Routing::Stt ? c.take(N * C) : nullptr;
    // STT's input one token late; SDT's is the decision block's input.
    r.prior_in = kind == Routing::Stt ? c.take(N * C) : s.xs[size_t(l - 1)];
  }
  if (kind == Routing::Stt) carve_block(c, s.teacher, m, B, T, T, false, be);
  s.ones = c.take(N);
  s.d_g = c.take(N);
  if (m.routing.has_student()) s.d_st_logits = c.take(N * 2);
  s.d_y_sel = c.take(M * C);
  s.d_x_sel = c.take(M * C);
  s.d_st_ch = c.take(2 * N);
  s.d_change = c.take(N * C);
  s.d_change_hat = c.take(N * C);
  s.d_aux_hat = c.take(N * C);
  s.d_carry = c.take(N * C);
  s.d_junk = c.take(N * C);
  s.d_prior_h = c.take(N * P);
  s.d_prior_gate = c.take(N * P);
  s.d_prior_up = c.take(N * P);
}

// Lays out every buffer of a ModelState; with base == nullptr it only measures.
static size_t carve_state(ModelState& s, const ModelConfig& m, float* base, const Backend* be) {
  Carver c(base);
  const int B = s.B, T = s.T, L = m.n_layers;
  const size_t N = size_t(B) * T, C = m.dim, H = m.latent_bits, F = m.ffn_hidden;
  const size_t QD = size_t(m.n_heads) * m.head_dim, KD = size_t(m.n_kv_heads) * m.head_dim;
  s.xs.assign(L + 1, nullptr);
  for (auto& x : s.xs) x = c.take(N * C);
  s.blocks.assign(L, {});
  for (int l = 0; l < L; ++l) carve_block(c, s.blocks[l], m, B, T, T, m.is_free() && l == m.inject_after, be);
  if (m.is_free()) {
    carve_block(c, s.enc, m, B, T, T, true, be);
    s.zeta_b = c.take(N * C);
    s.kv_inj = c.take(N * C);
    s.enc_out = c.take(N * C);
    s.enc_ln = c.take(N * C);
    s.enc_rstd = c.take(N);
    s.bit_logits = c.take(N * H);
    s.p = c.take(N * H);
    s.kl = c.take(N);
    s.kl_mean = c.take(T);
    s.R = c.take(N * C);
    s.d_enc_q = c.take(N * C);
    s.d_enc_kv = c.take(N * C);
    s.d_enc_out = c.take(N * C);
    s.d_bits = c.take(N * H);
  }
  if (m.routing.kind != Routing::None) carve_routes(c, s, m, be);
  s.ln_f = c.take(N * C);
  s.rstd_f = c.take(N);
  s.logits = c.take(N * m.vocab_size);
  s.losses = c.take(N);
  s.dx = c.take(N * C);
  s.d_ln = c.take(N * C);
  s.d_ln_kv = c.take(N * C);
  s.d_atty = c.take(N * QD);
  s.dq = c.take(N * QD);
  s.dk = c.take(N * KD);
  s.dv = c.take(N * KD);
  s.d_hmid = c.take(N * F);
  // int buffers: 2N tokens + N codes, stored as 4-byte words inside the float arena
  float* ints = c.take(3 * N);
  s.tokens = reinterpret_cast<int32_t*>(ints);
  s.codes = reinterpret_cast<uint32_t*>(ints ? ints + 2 * N : nullptr);
  return c.used();
}

int64_t Model::state_bytes(const ModelConfig& cfg, int B, int T) {
  ModelState s(nullptr);
  s.B = B, s.T = T, s.free = cfg.is_free();
  return static_cast<int64_t>(carve_state(s, cfg, nullptr, nullptr) * sizeof(float));
}

std::unique_ptr<ModelState> Model::make_state(int B, int T) {
  FT_ASSERT(B > 0 && T > 0 && T <= cfg_.max_seq_len, "bad state shape B=%d T=%d", B, T);
  auto s = std::make_unique<ModelState>(&be_);
  s->B = B, s->T = T, s->free = cfg_.is_free();
  s->arena_floats = carve_state(*s, cfg_, nullptr, &be_);
  s->arena = static_cast<float*>(be_.alloc(s->arena_floats * sizeof(float)));
  carve_state(*s, cfg_, s->arena, &be_);
  if (s->ones) be_.fill(s->ones, 1.0f, size_t(B) * T);
  return s;
}

// ---------------------------------------------------------------------------------------------
// Blocks

void Model::linear(float* out, const float* inp, WeightRef w, const float* bias, int N, int IC, int OC) {
  if (bias != nullptr) be_.broadcast_rows(out, bias, N, OC);
  be_.matmul_forward(out, inp, w, N, IC, OC, bias != nullptr);
}

void Model::block_forward(const BlockW& w, BlockActs& a, const float* q_in, const float* kv_in, float* out, int B,
                          int T, bool causal, int pos0, const KvCache* cache, const int32_t* pos) {
  FT_ASSERT(cache != nullptr || pos0 == 0, "block_forward at position %d needs a KV cache", pos0);
  const int N = B * T, C = cfg_.dim, NH = cfg_.n_heads, NKV = cfg_.n_kv_heads, HS = cfg_.head_dim;
  const int QD = NH * HS, KD = NKV * HS;
  const float eps = cfg_.rms_norm_eps;
  const float* ln_kv = kv_in != q_in ? a.ln_kv : a.ln_q;  // one input: one norm
  be_.rmsnorm_forward(a.ln_q, a.rstd_q, q_in, w.ln1, N, C, eps);
  if (kv_in != q_in) be_.rmsnorm_forward(a.ln_kv, a.rstd_kv, kv_in, w.ln1, N, C, eps);
  linear(a.q, a.ln_q, w.wq, w.bq, N, C, QD);
  linear(a.k, ln_kv, w.wk, w.bk, N, C, KD);
  linear(a.v, ln_kv, w.wv, w.bv, N, C, KD);
  if (pos != nullptr) {
    be_.rope_forward_at(a.q, pos, B, T, NH, HS, rope_freq_);
    be_.rope_forward_at(a.k, pos, B, T, NKV, HS, rope_freq_);
  } else {
    be_.rope_forward(a.q, B, T, NH, HS, pos0, rope_freq_);
    be_.rope_forward(a.k, B, T, NKV, HS, pos0, rope_freq_);
  }
  AttnShape sh{B, NH, NKV, HS, T, T, T, pos0, causal};
  const float *keys = a.k, *values = a.v;
  if (cache != nullptr) {
    // Sequence b's T rows go to rows pos0.. of its (cap, KD) slice: one strided copy per tensor.
    const size_t pitch = size_t(cache->cap) * KD * sizeof(float), rows = size_t(T) * KD * sizeof(float);
    be_.copy_rows(cache->k + size_t(pos0) * KD, pitch, a.k, rows, rows, size_t(B));
    be_.copy_rows(cache->v + size_t(pos0) * KD, pitch, a.v, rows, rows, size_t(B));
    sh.Tk = pos0 + T, sh.Tk_cap = cache->cap;
    keys = cache->k, values = cache->v;
  }
  be_.attention_forward(a.atty, a.att, a.q, keys, values, sh);
  block_tail(w, a, q_in, out, N);
}

// One token per row, row i of sequence seq[i] at position pos[i], its K and V at cache slot slot[i]:
// the projections and the MLP run batched; RoPE, the cache append and attention per row.
void Model::block_decode(const BlockW& w, BlockActs& a, const float* q_in, const float* kv_in, float* out, int B,
                         const int* pos, const KvCache& cache, const int* seq, const int* slot) {
  const int C = cfg_.dim, NH = cfg_.n_heads, NKV = cfg_.n_kv_heads, HS = cfg_.head_dim;
  const int QD = NH * HS, KD = NKV * HS;
  const float* ln_kv = kv_in != q_in ? a.ln_kv : a.ln_q;
  be_.rmsnorm_forward(a.ln_q, a.rstd_q, q_in, w.ln1, B, C, cfg_.rms_norm_eps);
  if (kv_in != q_in) be_.rmsnorm_forward(a.ln_kv, a.rstd_kv, kv_in, w.ln1, B, C, cfg_.rms_norm_eps);
  linear(a.q, a.ln_q, w.wq, w.bq, B, C, QD);
  linear(a.k, ln_kv, w.wk, w.bk, B, C, KD);
  linear(a.v, ln_kv, w.wv, w.bv, B, C, KD);
  const AttnShape full{1, NH, NKV, HS, 1, cache.cap, cache.cap, 0, true};
  const size_t saved = be_.attention_saved_floats(full);
  for (int i = 0; i < B; ++i) {
    const int p = pos[i], b = seq != nullptr ? seq[i] : i, at = slot != nullptr ? slot[i] : p;
    float* q = a.q + size_t(i) * QD;
    float* k = a.k + size_t(i) * KD;
    float* v = a.v + size_t(i) * KD;
    be_.rope_forward(q, 1, 1, NH, HS, p, rope_freq_);
    be_.rope_forward(k, 1, 1, NKV, HS, p, rope_freq_);
    const size_t row = (size_t(b) * cache.cap + size_t(at)) * KD;
    be_.copy(cache.k + row, k, size_t(KD) * sizeof(float));
    be_.copy(cache.v + row, v, size_t(KD) * sizeof(float));
    const AttnShape sh{1, NH, NKV, HS, 1, at + 1, cache.cap, at, true};
    const size_t sq = size_t(b) * cache.cap * KD;
    be_.attention_forward(a.atty + size_t(i) * QD, a.att + size_t(i) * saved, q, cache.k + sq, cache.v + sq, sh);
  }
  block_tail(w, a, q_in, out, B);
}

// a = q_in + o_proj(atty), then out = a + mlp(norm2(a)): the part of a block after attention.
void Model::block_tail(const BlockW& w, BlockActs& a, const float* q_in, float* out, int N) {
  const int C = cfg_.dim, QD = cfg_.n_heads * cfg_.head_dim, F = cfg_.ffn_hidden;
  const float eps = cfg_.rms_norm_eps;
  if (w.bo != nullptr) {
    be_.broadcast_rows(a.a, w.bo, N, C);
    be_.add_inplace(a.a, q_in, size_t(N) * C);
  } else {
    be_.copy(a.a, q_in, size_t(N) * C * sizeof(float));
  }
  be_.matmul_forward(a.a, a.atty, w.wo, N, QD, C, true);
  be_.rmsnorm_forward(a.ln2, a.rstd2, a.a, w.ln2, N, C, eps);
  be_.matmul_forward(a.gate, a.ln2, w.wg, N, C, F, false);
  be_.matmul_forward(a.up, a.ln2, w.wu, N, C, F, false);
  be_.swiglu_forward(a.hmid, a.gate, a.up, size_t(N) * F);
  be_.copy(out, a.a, size_t(N) * C * sizeof(float));
  be_.matmul_forward(out, a.hmid, w.wd, N, F, C, true);  // out = a + down(hmid)
}

// dout: gradient w.r.t. the block output. Writes the gradient w.r.t. q_in into dq_in (=) and,
// for a two-input block, w.r.t. kv_in into dkv_in (=). Parameter gradients accumulate into dw.
// dq_in may be dout: the residual stream's gradient then flows in place, without a copy (each
// copy of an (N, C) buffer cost about 0.14 ms of a small-preset step, docs/performance.md).
void Model::block_backward(const BlockW& w, const BlockG& dw, BlockActs& a, const float* q_in, const float* kv_in,
                           const float* dout, float* dq_in, float* dkv_in, ModelState& s, bool causal, int B, int T,
                           const int32_t* pos) {
  const int N = B * T, C = cfg_.dim, NH = cfg_.n_heads, NKV = cfg_.n_kv_heads;
  const int HS = cfg_.head_dim, QD = NH * HS, KD = NKV * HS, F = cfg_.ffn_hidden;
  const bool two = kv_in != q_in;
  // The residual stream's gradient d lives in dq_in: dout, then d(a), then d(q_in).
  float* d = dq_in;
  if (dq_in != dout) be_.copy(dq_in, dout, size_t(N) * C * sizeof(float));
  // out = a + down(hmid)
  be_.matmul_backward(s.d_hmid, dw.wd, d, a.hmid, w.wd, N, F, C, false);
  // In place: the gradients of gate and up overwrite them (read by nothing after), so the writes
  // go to lines just read instead of cold ones.
  float *d_gate = a.gate, *d_up = a.up;
  be_.swiglu_backward(d_gate, d_up, s.d_hmid, a.gate, a.up, size_t(N) * F);
  be_.matmul_backward(s.d_ln, dw.wg, d_gate, a.ln2, w.wg, N, C, F, false);
  be_.matmul_backward(s.d_ln, dw.wu, d_up, a.ln2, w.wu, N, C, F, true);
  be_.rmsnorm_backward(d, dw.ln2, s.d_ln, a.a, w.ln2, a.rstd2, N, C);
  // a = q_in + o_proj(atty)
  if (dw.bo) be_.sum_rows(dw.bo, d, N, C);
  be_.matmul_backward(s.d_atty, dw.wo, d, a.atty, w.wo, N, QD, C, false);
  AttnShape sh{B, NH, NKV, HS, T, T, T, 0, causal};
  be_.attention_backward(s.dq, s.dk, s.dv, s.d_atty, a.atty, a.att, a.q, a.k, a.v, sh);
  if (pos != nullptr) {
    be_.rope_backward_at(s.dq, pos, B, T, NH, HS, rope_freq_);
    be_.rope_backward_at(s.dk, pos, B, T, NKV, HS, rope_freq_);
  } else {
    be_.rope_backward(s.dq, B, T, NH, HS, 0, rope_freq_);
    be_.rope_backward(s.dk, B, T, NKV, HS, 0, rope_freq_);
  }
  if (dw.bq) {  // the biases enter before RoPE: their gradient is the un-rotated one
    be_.sum_rows(dw.bq, s.dq, N, QD);
    be_.sum_rows(dw.bk, s.dk, N, KD);
    be_.sum_rows(dw.bv, s.dv, N, KD);
  }
  float* d_ln_kv = two ? s.d_ln_kv : s.d_ln;
  be_.matmul_backward(s.d_ln, dw.wq, s.dq, a.ln_q, w.wq, N, C, QD, false);
  be_.matmul_backward(d_ln_kv, dw.wk, s.dk, a.ln_kv, w.wk, N, C, KD, two ? false : true);
  be_.matmul_backward(d_ln_kv, dw.wv, s.dv, a.ln_kv, w.wv, N, C, KD, true);
  be_.rmsnorm_backward(d, dw.ln1, s.d_ln, q_in, w.ln1, a.rstd_q, N, C);
  if (two) {
    be_.fill(dkv_in, 0.0f, size_t(N) * C);
    be_.rmsnorm_backward(dkv_in, dw.ln1, s.d_ln_kv, kv_in, w.ln1, a.rstd_kv, N, C);
  }
}

// ---------------------------------------------------------------------------------------------
// Routed blocks (docs/subjective_depth.md)

// out = after - before (n floats), a block's change: before negated, then after added.
static void difference(Backend& be, float* out, const float* after, const float* before, size_t n) {
  be.copy(out, before, n * sizeof(float));
  be.scale(out, -1.0f, n);
  be.add_inplace(out, after, n);
}

// Random routing and a hard gate take the block's output whole; the others scale the change by a
// learned gate (MoD's score, the SDT/STT surprise gate, on the student path of STT the student's
// probability).
static bool learned_gate(const ModelConfig& m) { return !(m.routing.kind == Routing::Random || m.routing.hard_gate); }

// The gate a routed block scales its selected tokens' change by: under a per-token choice g_app
// (0 on the skipped tokens), else ones or the router's gate.
static const float* applied_gate(const ModelConfig& m, const ModelState& s, const RouteActs& r) {
  if (r.per_token) return r.g_app;
  return learned_gate(m) ? r.g : s.ones;
}

// change_hat = down(silu(gate(norm(prior_in))) * up(norm(prior_in))): the SDT prior / STT
// transition network.
void Model::prior_forward(const RouteW& w, RouteActs& r, int N) {
  const int C = cfg_.dim, P = cfg_.route_prior_hidden();
  be_.rmsnorm_forward(r.prior_ln, r.prior_rstd, r.prior_in, w.prior_norm, N, C, cfg_.rms_norm_eps);
  be_.matmul_forward(r.prior_gate, r.prior_ln, w.prior_wg, N, C, P, false);
  be_.matmul_forward(r.prior_up, r.prior_ln, w.prior_wu, N, C, P, false);
  be_.swiglu_forward(r.prior_h, r.prior_gate, r.prior_up, size_t(N) * P);
  be_.matmul_forward(r.change_hat, r.prior_h, w.prior_wd, N, P, C, false);
}

// From s.d_change_hat; the gradient to prior_in accumulates into d_in (+=).
void Model::prior_backward(const RouteW& w, const RouteG& dw, RouteActs& r, ModelState& s, float* d_in) {
  const int N = s.B * s.T, C = cfg_.dim, P = cfg_.route_prior_hidden();
  be_.matmul_backward(s.d_prior_h, dw.prior_wd, s.d_change_hat, r.prior_h, w.prior_wd, N, P, C, false);
  be_.swiglu_backward(s.d_prior_gate, s.d_prior_up, s.d_prior_h, r.prior_gate, r.prior_up, size_t(N) * P);
  be_.matmul_backward(s.d_ln, dw.prior_wg, s.d_prior_gate, r.prior_ln, w.prior_wg, N, C, P, false);
  be_.matmul_backward(s.d_ln, dw.prior_wu, s.d_prior_up, r.prior_ln, w.prior_wu, N, C, P, true);
  be_.rmsnorm_backward(d_in, dw.prior_norm, s.d_ln, r.prior_in, w.prior_norm, r.prior_rstd, N, C);
}

// The student router's logits (skip, compute) for every token, from [x_t, x_(t-1)] (zero before a
// sequence's first token). Its input is read, never trained through; with the routing frozen it is
// held at the last forward's value, as a stopped input is for finite differences.
void Model::student_forward(const RouteW& w, RouteActs& r, const float* x, int B, int T, bool frozen) {
  const int C = cfg_.dim, N = B * T;
  const size_t row = size_t(C) * sizeof(float);
  if (frozen) return linear(r.st_logits, r.st_in, w.student, w.student_bias, N, 2 * C, 2);
  be_.copy_rows(r.st_in, 2 * row, x, row, row, size_t(N));
  if (N > 1) be_.copy_rows(r.st_in + 3 * size_t(C), 2 * row, x, row, row, size_t(N - 1));
  for (int b = 0; b < B; ++b) be_.fill(r.st_in + size_t(b) * T * 2 * C + C, 0.0f, size_t(C));
  linear(r.st_logits, r.st_in, w.student, w.student_bias, N, 2 * C, 2);
}

// A per-token choice (threshold mode, the student path): r.chosen (B, T) becomes the gathered layout
// of RouteActs, each sequence's chosen positions in time order, then skipped ones as fillers up to
// the batch's largest count.
void Model::lay_out_choice(RouteActs& r, int B, int T) {
  int k = 0;
  for (int b = 0; b < B; ++b) {
    int n = 0;
    for (int t = 0; t < T; ++t) n += r.chosen[size_t(b) * T + size_t(t)];
    k = std::max(k, n);
  }
  r.k = k, r.per_token = true;
  r.host_pos.assign(size_t(B) * k, 0);
  std::vector<int32_t> rows(size_t(B) * k);
  for (int b = 0; b < B; ++b) {
    int i = 0;
    for (int pass = 1; pass >= 0; --pass)  // chosen first, then fillers
      for (int t = 0; t < T && i < k; ++t)
        if (r.chosen[size_t(b) * T + size_t(t)] == pass) r.host_pos[size_t(b) * k + size_t(i++)] = t;
    for (int j = 0; j < k; ++j) rows[size_t(b) * k + size_t(j)] = b * T + r.host_pos[size_t(b) * k + size_t(j)];
  }
  be_.upload(r.pos, r.host_pos.data(), r.host_pos.size() * sizeof(int32_t));
  be_.upload(r.rows, rows.data(), rows.size() * sizeof(int32_t));
}

void Model::route_forward(ModelState& s, int l) {
  const int B = s.B, T = s.T, N = B * T, C = cfg_.dim;
  const size_t NC = size_t(N) * C;
  const RoutingConfig& ro = cfg_.routing;
  const RouteW& w = w_.routes[size_t(l)];
  RouteActs& r = s.routes[size_t(l)];
  const float* x = s.xs[size_t(l)];
  float* out = s.xs[size_t(l) + 1];
  if (cfg_.route_k(T) == 0) {  // capacity 0: the block computes nothing
    r.k = 0, r.per_token = false;
    be_.copy(out, x, NC * sizeof(float));
    return;
  }
  const bool student = s.route_student;
  switch (ro.kind) {
    case Routing::Random:  // the draws upload_batch placed in r.score
      break;
    case Routing::Mod:  // a linear score per token; the change is scaled by it (Mixture-of-Depths)
      be_.matmul_forward(r.score, x, w.router, N, C, 1, false);
      break;
    case Routing::Sdt:
    case Routing::Stt:
      if (ro.kind == Routing::Stt && student) break;  // the student path runs no teacher
      if (ro.kind == Routing::Sdt) {
        // The decision block l - 1 ran densely: its change, against the prior's guess from its input.
        difference(be_, r.change, x, r.prior_in, NC);
      } else if (!s.freeze_routing) {
        // The teacher: block l on every token, then its change; the transition network reads the
        // teacher's output one token earlier (zero before the first).
        block_forward(w_.layers[size_t(l)], s.teacher, x, x, r.teacher_out, B, T, true);
        difference(be_, r.change, r.teacher_out, x, NC);
        be_.fill(r.prior_in, 0.0f, NC);
        const size_t pitch = size_t(T) * C * sizeof(float);
        if (T > 1)
          be_.copy_rows(r.prior_in + C, pitch, r.teacher_out, pitch, size_t(T - 1) * C * sizeof(float), size_t(B));
      }
      prior_forward(w, r, N);
      be_.route_stats_forward(r.st_ch, s.freeze_routing ? s.d_junk : r.ma, r.change, r.change_hat, B, T, C,
                              std::min(ro.ma_window, T));
      be_.route_gate_forward(r.g, r.st_ch, r.ma, w.gate, N);
      break;
    case Routing::None:
      FT_ASSERT(false, "route_forward on a model without routing");
  }
  if (ro.has_student()) student_forward(w, r, x, B, T, s.freeze_routing);
  // The choice: top-k on the device, or per token on the host (threshold, the student).
  const bool per_token = student || ro.mode == RouteMode::Threshold;
  std::vector<float> host(per_token ? size_t(N) * 2 : 0);
  if (!s.freeze_routing) {
    if (!per_token) {
      r.k = cfg_.route_k(T), r.per_token = false;
      be_.topk_rows(r.pos, r.rows, r.score, B, T, r.k);
    } else {
      r.chosen.assign(size_t(N), 0);
      if (student && ro.kind == Routing::Random) {  // a draw in the top gamma of [0, 1)
        be_.download(host.data(), r.score, size_t(N) * sizeof(float));
        for (int n = 0; n < N; ++n) r.chosen[size_t(n)] = host[size_t(n)] >= 1.0f - ro.capacity;
      } else if (student) {  // the student says compute
        be_.download(host.data(), r.st_logits, size_t(N) * 2 * sizeof(float));
        for (int n = 0; n < N; ++n) r.chosen[size_t(n)] = host[2 * size_t(n) + 1] > host[2 * size_t(n)];
      } else {  // threshold mode: the gate reaches g_th
        be_.download(host.data(), r.g, size_t(N) * sizeof(float));
        for (int n = 0; n < N; ++n) r.chosen[size_t(n)] = host[size_t(n)] >= ro.g_th;
      }
      lay_out_choice(r, B, T);
    }
  }
  if (r.per_token) {  // g_app: the gate on the chosen tokens, 0 elsewhere
    std::vector<float> g(size_t(N), 1.0f);
    if (student && ro.kind == Routing::Stt && !ro.hard_gate) {  // the student's probability of computing
      read_route_student(s, l, g.data());
    } else if (learned_gate(cfg_)) {
      be_.download(g.data(), r.g, size_t(N) * sizeof(float));
    }
    for (int n = 0; n < N; ++n)
      if (!r.chosen[size_t(n)]) g[size_t(n)] = 0.0f;
    be_.upload(r.g_app, g.data(), size_t(N) * sizeof(float));
  }
  if (ro.has_student() && !student) {  // the student learns the teacher's choice
    if (r.per_token) {
      const std::vector<int32_t> mask(r.chosen.begin(), r.chosen.end());
      be_.upload(r.mask, mask.data(), size_t(N) * sizeof(int32_t));
    } else {
      be_.route_mask(r.mask, r.rows, N, B * r.k);
    }
    be_.crossentropy_forward(r.st_loss, r.st_logits, r.mask, N, 2);
  }
  if (r.k == 0) {  // no token of the batch chosen
    be_.copy(out, x, NC * sizeof(float));
    return;
  }
  const float* g = applied_gate(cfg_, s, r);
  const int M = B * r.k;
  be_.embedding_forward(r.x_sel, r.rows, f32_weight(x), M, C);
  block_forward(w_.layers[size_t(l)], r.sel, r.x_sel, r.x_sel, r.y_sel, B, r.k, true, 0, nullptr, r.pos);
  be_.route_scatter_forward(out, x, r.y_sel, g, r.rows, N, M, C);
}

void Model::route_backward(ModelState& s, int l) {
  const int B = s.B, T = s.T, N = B * T, C = cfg_.dim;
  const size_t NC = size_t(N) * C;
  const RoutingConfig& ro = cfg_.routing;
  const RouteW& w = w_.routes[size_t(l)];
  const RouteG& dw = g_.routes[size_t(l)];
  RouteActs& r = s.routes[size_t(l)];
  FT_ASSERT(!s.route_student, "backward follows the teacher's forward only");
  if (cfg_.route_k(T) == 0) return;  // the identity: s.dx passes through
  const float* x = s.xs[size_t(l)];
  const float inv_n = 1.0f / float(N);
  if (ro.has_student() && ro.student_weight > 0) {  // the student's cross-entropy, to its weights only
    be_.crossentropy_backward(s.d_st_logits, r.st_logits, r.mask, N, 2, ro.student_weight * inv_n);
    be_.matmul_backward(nullptr, dw.student, s.d_st_logits, r.st_in, w.student, N, 2 * C, 2, false);
    be_.sum_rows(dw.student_bias, s.d_st_logits, N, 2);
  }
  const bool learned = learned_gate(cfg_);
  be_.fill(s.d_g, 0.0f, size_t(N));
  if (r.k > 0) {
    // The write-back, then the block on the selection; its input gradient adds at the selected rows.
    const float* g = applied_gate(cfg_, s, r);
    const int M = B * r.k;
    be_.route_scatter_backward(s.dx, s.d_y_sel, s.d_g, s.dx, x, r.y_sel, g, r.rows, N, M, C);
    block_backward(w_.layers[size_t(l)], g_.layers[size_t(l)], r.sel, r.x_sel, r.x_sel, s.d_y_sel, s.d_x_sel, nullptr,
                   s, true, B, r.k, r.pos);
    be_.embedding_backward(s.dx, s.d_x_sel, r.rows, M, C);
    if (r.per_token && learned) {  // g_app = g on the chosen tokens only: the fillers' share is not g's
      std::vector<float> d(static_cast<size_t>(N));
      be_.download(d.data(), s.d_g, size_t(N) * sizeof(float));
      for (int n = 0; n < N; ++n)
        if (!r.chosen[size_t(n)]) d[size_t(n)] = 0.0f;
      be_.upload(s.d_g, d.data(), size_t(N) * sizeof(float));
    }
  }
  if (ro.kind == Routing::Mod) {
    if (learned) be_.matmul_backward(s.dx, dw.router, s.d_g, x, w.router, N, C, 1, true);
    return;
  }
  if (!ro.surprise()) return;
  if (learned) {
    if (ro.kind == Routing::Stt && ro.gate_penalty > 0) {  // + gate_penalty * mean(g)
      be_.fill(s.d_junk, ro.gate_penalty * inv_n, size_t(N));
      be_.add_inplace(s.d_g, s.d_junk, size_t(N));
    }
    be_.route_gate_backward(s.d_st_ch, dw.gate, s.d_g, r.st_ch, r.ma, w.gate, N);
    be_.route_stats_backward(s.d_change, s.d_change_hat, s.d_st_ch, r.change, r.change_hat, N, C);
  } else {
    be_.fill(s.d_change, 0.0f, NC);
    be_.fill(s.d_change_hat, 0.0f, NC);
  }
  // The prior's own loss, aux_weight * mean(d_ch), reaches the prediction only (the change it
  // predicts is stopped).
  be_.fill(s.d_st_ch, 0.0f, size_t(N));
  be_.fill(s.d_st_ch + N, ro.aux_weight * inv_n, size_t(N));
  be_.route_stats_backward(s.d_junk, s.d_aux_hat, s.d_st_ch, r.change, r.change_hat, N, C);
  be_.add_inplace(s.d_change_hat, s.d_aux_hat, NC);
  if (ro.kind == Routing::Stt) {
    // The teacher's pass is a measurement: no gradient through it or the prior's input.
    be_.fill(s.d_junk, 0.0f, NC);
    prior_backward(w, dw, r, s, s.d_junk);
    return;
  }
  // SDT: change = xs[l] - xs[l - 1], and the prior reads xs[l - 1]. The share of xs[l] adds here;
  // that of xs[l - 1] waits in d_carry for the decision block's backward.
  be_.add_inplace(s.dx, s.d_change, NC);
  be_.fill(s.d_carry, 0.0f, NC);
  prior_backward(w, dw, r, s, s.d_carry);
  be_.scale(s.d_change, -1.0f, NC);
  be_.add_inplace(s.d_carry, s.d_change, NC);
}

double Model::route_loss(const ModelState& s) const {
  const RoutingConfig& ro = cfg_.routing;
  if (s.route_student || cfg_.route_k(s.T) == 0) return 0.0;  // the student path trains nothing
  const size_t N = size_t(s.B) * s.T;
  std::vector<float> host(N);
  auto mean = [&](const float* dev) {
    be_.download(host.data(), dev, N * sizeof(float));
    double sum = 0.0;
    for (float v : host) sum += v;
    return sum / double(N);
  };
  double loss = 0.0;
  for (int l = 0; l < cfg_.n_layers; ++l) {
    if (!cfg_.routed(l)) continue;
    const RouteActs& r = s.routes[size_t(l)];
    if (ro.has_student()) loss += ro.student_weight * mean(r.st_loss);
    if (!ro.surprise()) continue;
    loss += ro.aux_weight * mean(r.st_ch + N);
    if (ro.kind == Routing::Stt && !ro.hard_gate) loss += ro.gate_penalty * mean(r.g);
  }
  return loss;
}

// ---------------------------------------------------------------------------------------------
// Whole model

StepStats Model::forward(ModelState& s, const int32_t* inputs, const int32_t* targets, const uint32_t* codes,
                         uint64_t seed, uint64_t stream, float kappa, FreeBitsForm form) {
  upload_batch(s, inputs, targets, seed, stream);
  forward_ops(s, codes, seed, stream, kappa, form);
  return read_stats(s);
}

void Model::upload_batch(ModelState& s, const int32_t* inputs, const int32_t* targets, uint64_t seed, uint64_t stream) {
  const size_t N = size_t(s.B) * s.T;
  be_.upload(s.tokens, inputs, N * sizeof(int32_t));
  s.has_targets = targets != nullptr;
  if (targets) be_.upload(s.tokens + N, targets, N * sizeof(int32_t));
  if (cfg_.routing.kind != Routing::Random) return;
  // Random routing ranks tokens by uniform draws, a function of (seed, stream, layer).
  std::vector<float> u(N);
  const uint64_t n0 = uint64_t(s.first_seq) * uint64_t(s.T);  // by global token row
  for (int l = 0; l < cfg_.n_layers; ++l) {
    if (!cfg_.routed(l)) continue;
    const uint64_t rs = derive_seed(seed, stream, uint64_t(l));
    for (size_t n = 0; n < N; ++n) u[n] = philox_uniform(rs, kStreamRoute + uint64_t(l), n0 + n);
    be_.upload(s.routes[size_t(l)].score, u.data(), N * sizeof(float));
  }
}

// The binary mapper's bits again, on the host, as the rows first_seq T .. of one process's batch
// draw them: the mapper's comparison (the float uniform below the float p) on its own p, so the
// codes are those a single process would sample. Only data-parallel ranks past the first need it.
void Model::redraw_codes(ModelState& s, uint64_t seed, uint64_t stream) {
  const size_t N = size_t(s.B) * s.T, H = size_t(cfg_.latent_bits);
  std::vector<float> p(N * H);
  std::vector<uint32_t> codes(N);
  be_.download(p.data(), s.p, p.size() * sizeof(float));
  const uint64_t i0 = uint64_t(s.first_seq) * uint64_t(s.T) * H;
  for (size_t n = 0; n < N; ++n) {
    uint32_t code = 0;
    for (size_t h = 0; h < H; ++h)
      code |= static_cast<uint32_t>(philox_uniform(seed, stream, i0 + n * H + h) < p[n * H + h]) << h;
    codes[n] = code;
  }
  be_.upload(s.codes, codes.data(), N * sizeof(uint32_t));
}

void Model::forward_ops(ModelState& s, const uint32_t* codes, uint64_t seed, uint64_t stream, float kappa,
                        FreeBitsForm form) {
  const int B = s.B, T = s.T, N = B * T, C = cfg_.dim, V = cfg_.vocab_size, L = cfg_.n_layers;
  const int k = cfg_.inject_after, H = cfg_.latent_bits;
  const float eps = cfg_.rms_norm_eps;
  s.kappa = kappa;
  s.free_bits_form = form;

  be_.embedding_forward(s.xs[0], s.tokens, w_.embed, N, C);
  for (int l = 0; l < L; ++l) {
    const float* kv = s.xs[l];
    if (s.free && l == k) {
      // Encoder: one non-causal block, queries from the learned constant zeta, keys/values X_k.
      be_.broadcast_rows(s.zeta_b, w_.zeta, N, C);
      block_forward(w_.enc, s.enc, s.zeta_b, s.xs[k], s.enc_out, B, T, false);
      be_.rmsnorm_forward(s.enc_ln, s.enc_rstd, s.enc_out, w_.enc_norm, N, C, eps);
      be_.matmul_forward(s.bit_logits, s.enc_ln, w_.readout, N, C, H, false);
      if (cfg_.readout_bias) {
        // bit_logits += bias on every row (d_bits is free scratch until backward)
        be_.broadcast_rows(s.d_bits, w_.readout_bias, N, H);
        be_.add_inplace(s.bit_logits, s.d_bits, size_t(N) * H);
      }
      // Binary mapper: sample codes from Bernoulli(p) (or take the given ones), then gather R.
      be_.binary_mapper_forward(s.codes, s.p, s.bit_logits, N, H, seed, stream);
      if (!codes && s.first_seq > 0) redraw_codes(s, seed, stream);
      if (codes) be_.upload(s.codes, codes, size_t(N) * sizeof(uint32_t));
      be_.kl_forward(s.kl, s.p, N, H);
      be_.kl_batch_mean(s.kl_mean, s.kl, B, T);
      be_.post_sampler_forward(s.R, s.codes, w_.post_sampler, N, C, H);
      be_.add(s.kv_inj, s.xs[k], s.R, size_t(N) * C);
      kv = s.kv_inj;
    }
    if (cfg_.routed(l))
      route_forward(s, l);
    else
      block_forward(w_.layers[l], s.blocks[l], s.xs[l], kv, s.xs[l + 1], B, T, true);
  }
  be_.rmsnorm_forward(s.ln_f, s.rstd_f, s.xs[L], w_.norm, N, C, eps);
  be_.matmul_forward(s.logits, s.ln_f, w_.head, N, C, V, false);
  if (s.has_targets) be_.crossentropy_forward(s.losses, s.logits, s.tokens + N, N, V);
}

StepStats Model::read_stats(const ModelState& s) const {
  const size_t N = size_t(s.B) * s.T;
  StepStats st;
  std::vector<float> host(N);
  if (s.has_targets) {
    read_token_losses(s, host.data());
    double sum = 0;
    for (float x : host) sum += x;
    st.ce = sum / N;
  }
  if (s.free) {
    read_kl(s, host.data());
    const KlSummary k = summarize_kl(host.data(), s.B, s.T, s.kappa, s.free_bits_form);
    st.kl = k.kl;
    st.kl_excess = k.excess;
  }
  st.route = route_loss(s);
  st.loss = st.ce + st.kl_excess + st.route;
  return st;
}

void Model::backward(ModelState& s, const std::function<void(int layer)>& block_done) {
  FT_ASSERT(s.has_targets, "backward needs a forward with targets");
  (void)grads();  // allocated on first use: inference never holds them
  const int B = s.B, T = s.T, N = B * T, C = cfg_.dim, V = cfg_.vocab_size, L = cfg_.n_layers;
  const int k = cfg_.inject_after, H = cfg_.latent_bits;
  const size_t NC = size_t(N) * C;
  // loss = mean CE over N = B*T positions + free bits; either form's gradient is 1/N dKL on the
  // rows it penalises (core/model/free_bits.h).
  const float inv_n = 1.0f / N;
  be_.crossentropy_backward(s.logits, s.logits, s.tokens + N, N, V, inv_n);         // in place: dlogits
  be_.matmul_backward(s.d_ln, g_.head, s.logits, s.ln_f, w_.head, N, C, V, false);  // tied: head is embed
  be_.fill(s.dx, 0.0f, NC);
  be_.rmsnorm_backward(s.dx, g_.norm, s.d_ln, s.xs[L], w_.norm, s.rstd_f, N, C);

  // s.dx holds d(loss)/d(x_{l+1}) on entry of each iteration and d(loss)/d(x_l) after it.
  for (int l = L - 1; l >= 0; --l) {
    if (cfg_.routed(l)) {
      route_backward(s, l);  // in place on s.dx
      if (block_done) block_done(l);
      continue;
    }
    const bool inj = s.free && l == k;
    block_backward(w_.layers[l], g_.layers[l], s.blocks[l], s.xs[l], inj ? s.kv_inj : s.xs[l], s.dx, s.dx,
                   inj ? s.d_enc_kv : nullptr, s, true, B, T);
    if (block_done) block_done(l);
    // SDT: block l decided for block l + 1, whose gate measured this block's change and the prior
    // read this block's input: their gradients to the input wait in d_carry.
    if (cfg_.routing.kind == Routing::Sdt && cfg_.routed(l + 1) && cfg_.route_k(T) > 0)
      be_.add_inplace(s.dx, s.d_carry, NC);
    if (!inj) continue;
    // kv_in = x_k + R: the residual gets d_kv too; R's gradient drives the post-sampler and, through
    // G (pass-through over every code, not only the sampled one), the encoder's bit logits.
    be_.add_inplace(s.dx, s.d_enc_kv, NC);
    be_.post_sampler_backward(g_.post_sampler, s.d_enc_kv, s.codes, N, C, H);
    be_.fill(s.d_bits, 0.0f, size_t(N) * H);
    be_.binary_mapper_backward(s.d_bits, s.d_enc_kv, w_.post_sampler, s.p, N, C, H);
    if (s.free_bits_form == FreeBitsForm::BatchMean)
      be_.kl_backward(s.d_bits, s.p, s.kl_mean, T, N, H, s.kappa, inv_n);
    else
      be_.kl_backward(s.d_bits, s.p, s.kl, N, N, H, s.kappa, inv_n);
    if (cfg_.readout_bias) be_.sum_rows(g_.readout_bias, s.d_bits, N, H);
    be_.matmul_backward(s.d_enc_out, g_.readout, s.d_bits, s.enc_ln, w_.readout, N, C, H, false);
    float* d_y = s.d_ln_kv;  // free at this point: reuse as d(encoder block output)
    be_.fill(d_y, 0.0f, NC);
    be_.rmsnorm_backward(d_y, g_.enc_norm, s.d_enc_out, s.enc_out, w_.enc_norm, s.enc_rstd, N, C);
    be_.copy(s.d_enc_out, d_y, NC * sizeof(float));
    block_backward(w_.enc, g_.enc, s.enc, s.zeta_b, s.xs[k], s.d_enc_out, s.d_enc_q, s.d_enc_kv, s, false, B, T);
    be_.sum_rows(g_.zeta, s.d_enc_q, N, C);
    be_.add_inplace(s.dx, s.d_enc_kv, NC);
  }
  be_.embedding_backward(g_.embed, s.dx, s.tokens, N, C);
}

void Model::read_codes(const ModelState& s, uint32_t* host) const {
  be_.download(host, s.codes, size_t(s.B) * s.T * sizeof(uint32_t));
}
void Model::read_bit_probs(const ModelState& s, float* host) const {
  be_.download(host, s.p, size_t(s.B) * s.T * cfg_.latent_bits * sizeof(float));
}
void Model::read_kl(const ModelState& s, float* host) const {
  be_.download(host, s.kl, size_t(s.B) * s.T * sizeof(float));
}
void Model::read_kl_batch_mean(const ModelState& s, float* host) const {
  be_.download(host, s.kl_mean, size_t(s.T) * sizeof(float));
}
void Model::write_kl_batch_mean(ModelState& s, const float* host) {
  be_.upload(s.kl_mean, host, size_t(s.T) * sizeof(float));
}
void Model::read_token_losses(const ModelState& s, float* host) const {
  be_.download(host, s.losses, size_t(s.B) * s.T * sizeof(float));
}
void Model::read_logits(const ModelState& s, float* host) const {
  be_.download(host, s.logits, size_t(s.B) * s.T * cfg_.vocab_size * sizeof(float));
}

std::vector<std::vector<int32_t>> Model::read_route_choice(const ModelState& s, int layer) const {
  FT_ASSERT(cfg_.routed(layer), "block %d is not routed", layer);
  const RouteActs& r = s.routes[size_t(layer)];
  std::vector<std::vector<int32_t>> out(size_t(s.B));
  if (r.k == 0) return out;
  std::vector<int32_t> pos(size_t(s.B) * r.k);
  if (r.per_token)
    pos = r.host_pos;
  else
    be_.download(pos.data(), r.pos, pos.size() * sizeof(int32_t));
  for (int b = 0; b < s.B; ++b)
    for (int i = 0; i < r.k; ++i) {
      const int32_t t = pos[size_t(b) * r.k + size_t(i)];
      if (!r.per_token || r.chosen[size_t(b) * s.T + size_t(t)]) out[size_t(b)].push_back(t);
    }
  return out;
}
void Model::read_route_student(const ModelState& s, int layer, float* host) const {
  FT_ASSERT(cfg_.routed(layer) && cfg_.routing.has_student(), "block %d has no student router", layer);
  const size_t N = size_t(s.B) * s.T;
  std::vector<float> logits(2 * N);
  be_.download(logits.data(), s.routes[size_t(layer)].st_logits, logits.size() * sizeof(float));
  for (size_t n = 0; n < N; ++n) host[n] = float(1.0 / (1.0 + std::exp(double(logits[2 * n]) - logits[2 * n + 1])));
}
void Model::read_route_gate(const ModelState& s, int layer, float* host) const {
  FT_ASSERT(cfg_.routed(layer), "block %d is not routed", layer);
  const size_t N = size_t(s.B) * s.T;
  if (s.route_student && cfg_.routing.kind == Routing::Stt && learned_gate(cfg_))
    read_route_student(s, layer, host);  // no teacher ran: the student's probability is the gate
  else if (learned_gate(cfg_))
    be_.download(host, s.routes[size_t(layer)].g, N * sizeof(float));
  else
    std::fill(host, host + N, 1.0f);
}
void Model::read_route_surprise(const ModelState& s, int layer, float* host) const {
  FT_ASSERT(cfg_.routed(layer) && cfg_.routing.surprise(), "block %d has no surprise gate", layer);
  const RouteActs& r = s.routes[size_t(layer)];
  const size_t N = size_t(s.B) * s.T;
  be_.download(host, r.st_ch, 2 * N * sizeof(float));
  be_.download(host + 2 * N, r.ma, N * sizeof(float));
}
std::array<float, 4> Model::read_route_gate_params(int layer) const {
  FT_ASSERT(cfg_.routed(layer) && cfg_.routing.surprise(), "block %d has no surprise gate", layer);
  std::array<float, 4> p{};
  be_.download(p.data(), w_.routes[size_t(layer)].gate, sizeof p);
  return p;
}

// ---------------------------------------------------------------------------------------------
// Generation with a KV cache

// Rows of a prefill chunk: large enough for GEMM speed, small enough that the attention's saved
// state of one chunk (the CPU keeps (NH, chunk, max_len) probabilities) stays under 32M floats.
static int prefill_chunk(const ModelConfig& m, int max_len) {
  const int64_t limit = (int64_t{32} << 20) / (int64_t{m.n_heads} * max_len);
  return int(std::clamp<int64_t>(limit, 16, 512));
}

// Rows of logits computed at once when a prefill returns every position's (at most 16M floats).
static int logit_rows(const ModelConfig& m, int chunk) {
  return int(std::clamp<int64_t>((int64_t{16} << 20) / m.vocab_size, 1, chunk));
}

static size_t carve_decode(DecodeState& d, const ModelConfig& m, float* base, const Backend* be) {
  Carver c(base);
  const size_t B = d.B, C = m.dim, KD = size_t(m.n_kv_heads) * m.head_dim, P = d.chunk;
  d.kcache.assign(m.n_layers, nullptr);
  d.vcache.assign(m.n_layers, nullptr);
  for (int l = 0; l < m.n_layers; ++l) {
    d.kcache[l] = c.take(B * d.max_len * KD);
    d.vcache[l] = c.take(B * d.max_len * KD);
  }
  carve_block(c, d.scratch, m, d.B, 1, d.max_len, true, be);
  carve_block(c, d.pre, m, 1, d.chunk, d.max_len, true, be);
  const size_t rows = std::max(B, P);  // residual buffers serve a decode step and a prefill chunk
  d.x = c.take(rows * C);
  d.x2 = c.take(rows * C);
  d.kv_in = c.take(rows * C);
  d.R = c.take(rows * C);
  d.ln_f = c.take(rows * C);
  d.rstd_f = c.take(rows);
  d.logits = c.take(std::max(B, size_t(logit_rows(m, d.chunk))) * m.vocab_size);
  float* ints = c.take(2 * rows);
  d.tokens = reinterpret_cast<int32_t*>(ints);
  d.codes = reinterpret_cast<uint32_t*>(ints ? ints + rows : nullptr);
  if (m.routing.kind == Routing::None) return c.used();
  // The student path of a routed model (route_decode): scratch for a step or a chunk's rows, and
  // each routed block's kept inputs.
  RouteActs& r = d.route;
  const size_t Pr = m.route_prior_hidden();
  r.score = c.take(rows);
  r.g = r.score;
  r.g_app = c.take(rows);
  r.rows = take_ints(c, rows);
  r.x_sel = c.take(rows * C);
  r.y_sel = c.take(rows * C);
  if (m.routing.has_student()) {
    r.st_in = c.take(rows * 2 * C);
    r.st_logits = c.take(rows * 2);
  }
  if (m.routing.kind == Routing::Sdt) carve_surprise(c, r, rows, C, Pr);
  d.past.assign(size_t(m.n_layers), RoutedPast{});
  for (int l = 0; l < m.n_layers; ++l)
    if (m.routed(l)) d.past[size_t(l)].prev_x = c.take(2 * B * C);
  return c.used();
}

int64_t Model::decode_state_bytes(const ModelConfig& cfg, int B, int max_len) {
  DecodeState d(nullptr);
  d.B = B, d.max_len = max_len, d.chunk = prefill_chunk(cfg, max_len);
  return int64_t(carve_decode(d, cfg, nullptr, nullptr) * sizeof(float));
}

Result<std::unique_ptr<DecodeState>> Model::try_make_decode_state(int B, int max_len, bool teacher) {
  if (B <= 0 || max_len <= 0 || max_len > cfg_.max_seq_len)
    return make_error("decode state: " + std::to_string(B) + " sequences of " + std::to_string(max_len) +
                      " positions (the model's context is " + std::to_string(cfg_.max_seq_len) + ")");
  if (teacher && cfg_.routing.kind == Routing::None)
    return make_error("the teacher's path needs a routed model (this one has no routing)");
  auto d = std::make_unique<DecodeState>(&be_);
  d->B = B, d->max_len = max_len, d->chunk = prefill_chunk(cfg_, max_len);
  if (teacher) {  // no cache: the training forward over each sequence so far
    d->teacher = true;
    d->history.assign(size_t(B), {});
    d->history_codes.assign(size_t(B), {});
    return d;
  }
  const size_t n = carve_decode(*d, cfg_, nullptr, &be_);
  auto arena = be_.try_alloc(n * sizeof(float));
  if (!arena) return arena.error();
  d->arena = static_cast<float*>(*arena);
  carve_decode(*d, cfg_, d->arena, &be_);
  if (cfg_.routing.kind != Routing::None) {
    d->len.assign(size_t(B), 0);
    for (int l = 0; l < cfg_.n_layers; ++l) {
      if (!cfg_.routed(l)) continue;
      d->past[size_t(l)].cached.assign(size_t(B) * (size_t(max_len) + 1), 0);
      if (cfg_.routing.kind == Routing::Sdt) d->past[size_t(l)].d_st.assign(size_t(B) * max_len, 0.0f);
    }
  }
  return d;
}

std::unique_ptr<DecodeState> Model::make_decode_state(int B, int max_len, bool teacher) {
  auto d = try_make_decode_state(B, max_len, teacher);
  FT_ASSERT(d.ok(), "%s", d.ok() ? "" : d.error().message.c_str());
  return std::move(*d);
}

// Z enters before block inject_after: kv_in = x + W_post[:, codes] for a Free Transformer.
const float* Model::inject_latent(DecodeState& d, const float* x, const uint32_t* codes, int N) {
  be_.upload(d.codes, codes, size_t(N) * sizeof(uint32_t));
  be_.post_sampler_forward(d.R, d.codes, w_.post_sampler, N, cfg_.dim, cfg_.latent_bits);
  be_.add(d.kv_in, x, d.R, size_t(N) * cfg_.dim);
  return d.kv_in;
}

// A routed model's past is kept by position: a sequence goes on (p == len), repeats its last
// position (p == len - 1: a stopped sequence in a batch) or starts over (p == 0).
static void advance_routed(DecodeState& d, int b, int p, int n) {
  const int len = d.len[size_t(b)];
  FT_ASSERT(p == 0 || p == len || p == len - 1, "routed generation: sequence %d at position %d after %d positions", b,
            p, len);
  d.len[size_t(b)] = p + n;
}

void Model::route_decode(DecodeState& d, BlockActs& scratch, int l, const float* x, const float* x_before, float* out,
                         int n, const int* seq, const int* pos) {
  const int C = cfg_.dim, B = d.B;
  const size_t row = size_t(C) * sizeof(float), S = size_t(d.max_len) + 1;
  const RoutingConfig& ro = cfg_.routing;
  const RouteW& w = w_.routes[size_t(l)];
  RouteActs& r = d.route;
  RoutedPast& past = d.past[size_t(l)];
  auto kept = [&](int b, int p) { return past.prev_x + (size_t(p & 1) * B + size_t(b)) * C; };
  // Rows i and i + 1 are one sequence's consecutive positions.
  auto follows = [&](int i) { return i > 0 && seq[i] == seq[i - 1] && pos[i] == pos[i - 1] + 1; };
  if (ro.has_student()) {  // [x_t, x_(t-1)]: the row before, or the kept input, zero at the start
    be_.copy_rows(r.st_in, 2 * row, x, row, row, size_t(n));
    for (int i = 0; i < n;) {
      float* dst = r.st_in + (2 * size_t(i) + 1) * C;
      if (pos[i] == 0)
        be_.fill(dst, 0.0f, size_t(C));
      else if (!follows(i))
        be_.copy(dst, kept(seq[i], pos[i] - 1), row);
      int j = i + 1;
      while (j < n && follows(j)) ++j;
      if (j - i > 1) be_.copy_rows(dst + 2 * size_t(C), 2 * row, x + size_t(i) * C, row, row, size_t(j - i - 1));
      i = j;
    }
    linear(r.st_logits, r.st_in, w.student, w.student_bias, n, 2 * C, 2);
  }
  // The choice per row, and the gate its change is scaled by (as route_forward on the student path).
  std::vector<uint8_t> chosen(size_t(n), 0);
  std::vector<float> g(size_t(n), 1.0f), logits(ro.has_student() ? 2 * size_t(n) : 0);
  if (ro.has_student()) be_.download(logits.data(), r.st_logits, logits.size() * sizeof(float));
  switch (ro.kind) {
    case Routing::Random:
      for (int i = 0; i < n; ++i) {
        const uint64_t rs = derive_seed(d.route_seed, uint64_t(seq[i]), uint64_t(l));
        chosen[size_t(i)] = philox_uniform(rs, kStreamRoute + uint64_t(l), uint64_t(pos[i])) >= 1.0f - ro.capacity;
      }
      break;
    case Routing::Mod:
      be_.matmul_forward(r.score, x, w.router, n, C, 1, false);
      break;
    case Routing::Sdt: {  // the decision block's change against the prior's guess; D_st's average kept by position
      difference(be_, r.change, x, x_before, size_t(n) * C);
      r.prior_in = const_cast<float*>(x_before);
      prior_forward(w, r, n);
      be_.route_stats_forward(r.st_ch, r.ma, r.change, r.change_hat, 1, n, C, 1);
      std::vector<float> st(static_cast<size_t>(n)), ma(static_cast<size_t>(n));
      be_.download(st.data(), r.st_ch, st.size() * sizeof(float));
      for (int i = 0; i < n; ++i) past.d_st[size_t(seq[i]) * d.max_len + size_t(pos[i])] = st[size_t(i)];
      for (int i = 0; i < n; ++i) {
        const float* h = past.d_st.data() + size_t(seq[i]) * d.max_len;
        const int t0 = std::max(0, pos[i] - ro.ma_window + 1);
        double sum = 0.0;
        for (int u = t0; u <= pos[i]; ++u) sum += double(h[u]);
        ma[size_t(i)] = float(sum / (pos[i] - t0 + 1));
      }
      be_.upload(r.ma, ma.data(), ma.size() * sizeof(float));
      be_.route_gate_forward(r.g, r.st_ch, r.ma, w.gate, n);
      break;
    }
    case Routing::Stt:  // no teacher: the student's probability is the gate
    case Routing::None:
      break;
  }
  if (ro.has_student())
    for (int i = 0; i < n; ++i) chosen[size_t(i)] = logits[2 * size_t(i) + 1] > logits[2 * size_t(i)];
  if (ro.kind == Routing::Stt && learned_gate(cfg_)) {
    for (int i = 0; i < n; ++i)
      g[size_t(i)] = float(1.0 / (1.0 + std::exp(double(logits[2 * size_t(i)]) - logits[2 * size_t(i) + 1])));
  } else if (learned_gate(cfg_)) {
    be_.download(g.data(), r.g, g.size() * sizeof(float));
  }
  if (!(ro.capacity > 0)) std::fill(chosen.begin(), chosen.end(), 0);  // capacity 0 computes nothing
  // The chosen rows take the next slots of their sequence's routed cache.
  std::vector<int32_t> rows;
  std::vector<int> sel_seq, sel_pos, sel_slot;
  for (int i = 0; i < n; ++i) {
    int32_t* slots = past.cached.data() + size_t(seq[i]) * S;
    const int32_t at = slots[pos[i]];
    slots[pos[i] + 1] = at + chosen[size_t(i)];
    if (!chosen[size_t(i)]) {
      g[size_t(i)] = 0.0f;
      continue;
    }
    rows.push_back(i), sel_seq.push_back(seq[i]), sel_pos.push_back(pos[i]), sel_slot.push_back(at);
  }
  const int M = int(rows.size());
  if (M == 0) {
    be_.copy(out, x, size_t(n) * row);
  } else {
    be_.upload(r.rows, rows.data(), rows.size() * sizeof(int32_t));
    be_.upload(r.g_app, g.data(), g.size() * sizeof(float));
    be_.embedding_forward(r.x_sel, r.rows, f32_weight(x), M, C);
    block_decode(w_.layers[size_t(l)], scratch, r.x_sel, r.x_sel, r.y_sel, M, sel_pos.data(),
                 KvCache{d.kcache[size_t(l)], d.vcache[size_t(l)], d.max_len}, sel_seq.data(), sel_slot.data());
  }
  // Keep each sequence's inputs at its last two positions here (the next step's x_(t-1), and a
  // repeated last step's).
  for (int i = 0; i < n; ++i)
    if (i + 2 >= n || seq[i + 2] != seq[i]) be_.copy(kept(seq[i], pos[i]), x + size_t(i) * C, row);
  if (M > 0) be_.route_scatter_forward(out, x, r.y_sel, r.g_app, r.rows, n, M, C);
}

void Model::teacher_step(DecodeState& d, int b, const int32_t* tokens, const uint32_t* codes, int n, int pos0, int rows,
                         float* logits_host) {
  std::vector<int32_t>& h = d.history[size_t(b)];
  std::vector<uint32_t>& hc = d.history_codes[size_t(b)];
  FT_ASSERT(pos0 <= int(h.size()), "teacher's path: sequence %d at position %d after %zu", b, pos0, h.size());
  h.resize(size_t(pos0));
  h.insert(h.end(), tokens, tokens + n);
  if (cfg_.is_free()) {
    hc.resize(size_t(pos0));
    hc.insert(hc.end(), codes, codes + n);
  }
  if (rows == 0) return;
  const int T = int(h.size()), V = cfg_.vocab_size;
  auto s = make_state(1, T);
  s->route_student = false;
  forward(*s, h.data(), nullptr, cfg_.is_free() ? hc.data() : nullptr, d.route_seed, uint64_t(b), 0.0f);
  std::vector<float> all(size_t(T) * V);
  read_logits(*s, all.data());
  std::copy(all.end() - std::ptrdiff_t(rows) * V, all.end(), logits_host);
}

std::vector<int32_t> Model::decode_route_positions(const DecodeState& d, int layer, int b) const {
  FT_ASSERT(cfg_.routed(layer) && b >= 0 && b < d.B, "block %d of sequence %d is not routed", layer, b);
  const int32_t* slots = d.past[size_t(layer)].cached.data() + size_t(b) * (size_t(d.max_len) + 1);
  std::vector<int32_t> out;
  for (int p = 0; p < d.len[size_t(b)]; ++p)
    if (slots[p + 1] > slots[p]) out.push_back(p);
  return out;
}

void Model::decode_step(DecodeState& d, const int32_t* tokens, const uint32_t* codes, int pos, float* logits_host) {
  std::vector<int> positions(size_t(d.B), pos);
  decode_step(d, tokens, codes, positions.data(), logits_host);
}

void Model::decode_step(DecodeState& d, const int32_t* tokens, const uint32_t* codes, const int* pos,
                        float* logits_host) {
  std::optional<DecodeThreadScope> threads;  // on the CPU: the faster of the thread counts, measured
  if (be_.kind() == DeviceKind::Cpu) threads.emplace(&d);
  const int B = d.B, C = cfg_.dim, V = cfg_.vocab_size;
  for (int b = 0; b < B; ++b)
    FT_ASSERT(pos[b] >= 0 && pos[b] < d.max_len, "decode position %d outside 0..%d", pos[b], d.max_len - 1);
  if (d.teacher) {
    for (int b = 0; b < B; ++b)
      teacher_step(d, b, tokens + b, codes != nullptr ? codes + b : nullptr, 1, pos[b], 1, logits_host + size_t(b) * V);
    return;
  }
  std::vector<int> seq;
  if (!d.len.empty()) {
    seq.resize(size_t(B));
    for (int b = 0; b < B; ++b) seq[size_t(b)] = b, advance_routed(d, b, pos[b], 1);
  }
  be_.upload(d.tokens, tokens, B * sizeof(int32_t));
  be_.embedding_forward(d.x, d.tokens, w_.embed, B, C);
  float *x = d.x, *x2 = d.x2;  // x2: the previous block's input until this block writes its output
  for (int l = 0; l < cfg_.n_layers; ++l) {
    if (cfg_.routed(l)) {
      route_decode(d, d.scratch, l, x, x2, x2, B, seq.data(), pos);
    } else {
      const float* kv_in = cfg_.is_free() && l == cfg_.inject_after ? inject_latent(d, x, codes, B) : x;
      block_decode(w_.layers[l], d.scratch, x, kv_in, x2, B, pos, KvCache{d.kcache[l], d.vcache[l], d.max_len});
    }
    std::swap(x, x2);
  }
  be_.rmsnorm_forward(d.ln_f, d.rstd_f, x, w_.norm, B, C, cfg_.rms_norm_eps);
  be_.matmul_forward(d.logits, d.ln_f, w_.head, B, C, V, false);
  be_.download(logits_host, d.logits, size_t(B) * V * sizeof(float));
}

void Model::prefill(DecodeState& d, int b, const int32_t* tokens, const uint32_t* codes, int n, int pos0,
                    PrefillLogits which, float* logits_host) {
  FT_ASSERT(b >= 0 && b < d.B && n > 0 && pos0 >= 0 && pos0 + n <= d.max_len, "prefill of %d tokens at %d (row %d)", n,
            pos0, b);
  const int C = cfg_.dim, V = cfg_.vocab_size, KD = cfg_.n_kv_heads * cfg_.head_dim;
  if (d.teacher) {
    const int rows = which == PrefillLogits::All ? n : which == PrefillLogits::Last ? 1 : 0;
    return teacher_step(d, b, tokens, codes, n, pos0, rows, logits_host);
  }
  if (!d.len.empty()) {
    FT_ASSERT(pos0 == 0 || pos0 == d.len[size_t(b)], "routed prefill of sequence %d at %d after %d positions", b, pos0,
              d.len[size_t(b)]);
    advance_routed(d, b, pos0, n);
  }
  std::vector<int> seq(size_t(d.len.empty() ? 0 : d.chunk), b), pos(seq.size());
  for (int c0 = 0; c0 < n; c0 += d.chunk) {
    const int T = std::min(d.chunk, n - c0);
    be_.upload(d.tokens, tokens + c0, size_t(T) * sizeof(int32_t));
    be_.embedding_forward(d.x, d.tokens, w_.embed, T, C);
    float *x = d.x, *x2 = d.x2;
    for (int i = 0; i < int(pos.size()); ++i) pos[size_t(i)] = pos0 + c0 + i;
    for (int l = 0; l < cfg_.n_layers; ++l) {
      if (cfg_.routed(l)) {  // the student path, token after token through the routed cache
        route_decode(d, d.pre, l, x, x2, x2, T, seq.data(), pos.data());
        std::swap(x, x2);
        continue;
      }
      const float* kv_in = cfg_.is_free() && l == cfg_.inject_after ? inject_latent(d, x, codes + c0, T) : x;
      // Row b of the cache as a one-sequence cache.
      const size_t row = size_t(b) * d.max_len * KD;
      const KvCache cache{d.kcache[l] + row, d.vcache[l] + row, d.max_len};
      block_forward(w_.layers[l], d.pre, x, kv_in, x2, 1, T, true, pos0 + c0, &cache);
      std::swap(x, x2);
    }
    // Logits: of every row (scoring), or of the prompt's last position only (generation).
    int r0 = 0, r1 = 0;
    if (which == PrefillLogits::All) r0 = 0, r1 = T;
    if (which == PrefillLogits::Last && c0 + T == n) r0 = T - 1, r1 = T;
    const int group = logit_rows(cfg_, d.chunk);
    for (int g0 = r0; g0 < r1; g0 += group) {
      const int rows = std::min(group, r1 - g0);
      be_.rmsnorm_forward(d.ln_f, d.rstd_f, x + size_t(g0) * C, w_.norm, rows, C, cfg_.rms_norm_eps);
      be_.matmul_forward(d.logits, d.ln_f, w_.head, rows, C, V, false);
      float* dst = logits_host + (which == PrefillLogits::All ? size_t(c0 + g0) * V : 0);
      be_.download(dst, d.logits, size_t(rows) * V * sizeof(float));
    }
  }
}

}  // namespace ftx
