// Llama-family GGUF files as the project's model (see gguf_llama.h): metadata -> ModelConfig and
// BpeVocab, tensor checks, and Hugging Face-named weights dequantized with the q/k rows
// un-permuted. Key names and the tensor table follow llama.cpp (gguf-py constants.py,
// convert_hf_to_gguf.py); every check runs before any weight is read.
#include "core/io/gguf_llama.h"

#include <algorithm>
#include <climits>
#include <optional>
#include <unordered_set>

#include "core/io/safetensors.h"  // quote_name
#include "kernels/base/dtype.h"

namespace ftx {

namespace {

// Tokens llama.cpp treats as end of generation when the vocabulary has them (llama-vocab.cpp).
constexpr const char* kEndOfGenerationTexts[] = {"<|im_end|>", "<|eot_id|>", "<|eom_id|>", "<|endoftext|>",
                                                 "<|end_of_text|>"};

// Per-layer tensors: Hugging Face suffix after "model.layers.N.", GGUF suffix after "blk.N.".
struct LayerName {
  const char* hf;
  const char* gguf;
};
constexpr LayerName kLayerNames[] = {
    {"input_layernorm.weight", "attn_norm.weight"},    {"self_attn.q_proj.weight", "attn_q.weight"},
    {"self_attn.k_proj.weight", "attn_k.weight"},      {"self_attn.v_proj.weight", "attn_v.weight"},
    {"self_attn.o_proj.weight", "attn_output.weight"}, {"self_attn.q_proj.bias", "attn_q.bias"},
    {"self_attn.k_proj.bias", "attn_k.bias"},          {"self_attn.v_proj.bias", "attn_v.bias"},
    {"self_attn.o_proj.bias", "attn_output.bias"},     {"post_attention_layernorm.weight", "ffn_norm.weight"},
    {"mlp.gate_proj.weight", "ffn_gate.weight"},       {"mlp.up_proj.weight", "ffn_up.weight"},
    {"mlp.down_proj.weight", "ffn_down.weight"},
};

// A tensor the model needs, with its dims in GGUF order.
struct Expected {
  std::string name;
  std::vector<int64_t> ne;
};

// The GGUF tensors of a layer given the config (biases only when the config has them).
void layer_tensors(const ModelConfig& c, int layer, std::vector<Expected>* out) {
  const std::string b = "blk." + std::to_string(layer) + ".";
  const int64_t d = c.dim, q = int64_t(c.n_heads) * c.head_dim, kv = int64_t(c.n_kv_heads) * c.head_dim;
  out->push_back({b + "attn_norm.weight", {d}});
  out->push_back({b + "attn_q.weight", {d, q}});
  out->push_back({b + "attn_k.weight", {d, kv}});
  out->push_back({b + "attn_v.weight", {d, kv}});
  out->push_back({b + "attn_output.weight", {q, d}});
  if (c.qkv_bias) {
    out->push_back({b + "attn_q.bias", {q}});
    out->push_back({b + "attn_k.bias", {kv}});
    out->push_back({b + "attn_v.bias", {kv}});
  }
  if (c.o_bias) out->push_back({b + "attn_output.bias", {d}});
  out->push_back({b + "ffn_norm.weight", {d}});
  out->push_back({b + "ffn_gate.weight", {d, c.ffn_hidden}});
  out->push_back({b + "ffn_up.weight", {d, c.ffn_hidden}});
  out->push_back({b + "ffn_down.weight", {c.ffn_hidden, d}});
}

// Typed, range-checked keys with errors that name the file.
struct Reader {
  const GgufFile& f;
  Error bad(const std::string& what) const { return make_error(f.path() + ": " + what); }

  // A positive int key; `fallback` when absent (an error when there is none).
  Result<int> positive_int(const std::string& key, std::optional<int> fallback = std::nullopt) const {
    if (fallback && !f.has(key)) return *fallback;
    auto v = f.get_int(key);
    if (!v) return v.error();
    if (*v < 1 || *v > INT_MAX)
      return bad("key " + quote_name(key) + " = " + std::to_string(*v) + " must be in 1.." + std::to_string(INT_MAX));
    return int(*v);
  }
  Result<float> positive_float(const std::string& key, std::optional<float> fallback = std::nullopt) const {
    if (fallback && !f.has(key)) return *fallback;
    auto v = f.get_float(key);
    if (!v) return v.error();
    if (!(*v > 0) || *v > 1e30) return bad("key " + quote_name(key) + " = " + std::to_string(*v) + " must be positive");
    return float(*v);
  }
  // A token id key (optional): inside the vocabulary.
  Result<std::optional<int32_t>> token_id(const std::string& key, size_t n_tokens) const {
    if (!f.has(key)) return std::optional<int32_t>{};
    auto v = f.get_int(key);
    if (!v) return v.error();
    if (*v < 0 || uint64_t(*v) >= n_tokens)
      return bad("key " + quote_name(key) + " = " + std::to_string(*v) + " is not a token id (the vocabulary has " +
                 std::to_string(n_tokens) + " tokens)");
    return std::optional<int32_t>(int32_t(*v));
  }
};

// Features the model cannot compute: refused before anything else is read.
Status check_supported(const Reader& r, const std::string& arch) {
  const GgufFile& f = r.f;
  if (f.has(arch + ".expert_count")) {
    auto n = f.get_int(arch + ".expert_count");
    if (!n) return n.error();
    if (*n > 0) return r.bad("mixture of experts (" + std::to_string(*n) + " experts) is not supported");
  }
  if (f.has(arch + ".attention.sliding_window")) return r.bad("sliding-window attention is not supported");
  // llama.cpp: the scaling type defaults to linear, and a factor of 0 or 1 means none.
  std::string type = "linear";
  if (f.has(arch + ".rope.scaling.type")) {
    auto t = f.get_string(arch + ".rope.scaling.type");
    if (!t) return t.error();
    type = *t;
  }
  double factor = 0;
  for (const char* k : {".rope.scaling.factor", ".rope.scale_linear"}) {
    if (!f.has(arch + k)) continue;
    auto v = f.get_float(arch + k);
    if (!v) return v.error();
    factor = *v;
    break;
  }
  const bool scaled = type != "none" && !(type == "linear" && (factor == 0 || factor == 1));
  if (scaled)
    return r.bad("rope scaling " + quote_name(type) + " is not supported (only none and llama3's rope_freqs)");
  return {};
}

// The shape keys of `arch` (vocab_size comes from token_embd.weight).
Status read_config(const Reader& r, const std::string& arch, ModelConfig* c) {
  const GgufFile& f = r.f;
  const std::string p = arch + ".";
  auto get = [&](const std::string& key, int* out, std::optional<int> fallback = std::nullopt) -> Status {
    auto v = r.positive_int(p + key, fallback);
    if (!v) return v.error();
    *out = *v;
    return {};
  };
  c->architecture = arch;
  c->latent_bits = 0;
  FTX_TRY(get("embedding_length", &c->dim));
  FTX_TRY(get("block_count", &c->n_layers));
  FTX_TRY(get("feed_forward_length", &c->ffn_hidden));
  FTX_TRY(get("attention.head_count", &c->n_heads));
  FTX_TRY(get("attention.head_count_kv", &c->n_kv_heads, c->n_heads));
  FTX_TRY(get("context_length", &c->max_seq_len));
  if (!f.has(p + "attention.key_length") && c->dim % c->n_heads != 0)
    return r.bad("embedding_length " + std::to_string(c->dim) + " is not a multiple of head_count " +
                 std::to_string(c->n_heads) + " (and no attention.key_length)");
  FTX_TRY(get("attention.key_length", &c->head_dim, c->dim / c->n_heads));
  int value_length = 0, rope_dims = 0;
  FTX_TRY(get("attention.value_length", &value_length, c->head_dim));
  if (value_length != c->head_dim)
    return r.bad("attention.value_length " + std::to_string(value_length) + " differs from the head size " +
                 std::to_string(c->head_dim) + ": not supported");
  FTX_TRY(get("rope.dimension_count", &rope_dims, c->head_dim));
  if (rope_dims != c->head_dim)
    return r.bad("rope.dimension_count " + std::to_string(rope_dims) + " is not the head size " +
                 std::to_string(c->head_dim) + ": partial rotary embeddings are not supported");
  auto eps = r.positive_float(p + "attention.layer_norm_rms_epsilon");
  if (!eps) return eps.error();
  c->rms_norm_eps = *eps;
  auto theta = r.positive_float(p + "rope.freq_base", 10000.0f);  // llama.cpp's default
  if (!theta) return theta.error();
  c->rope_theta = *theta;
  return {};
}

Status read_vocab(const Reader& r, GgufLlama* m) {
  const GgufFile& f = r.f;
  auto model = f.get_string("tokenizer.ggml.model");
  if (!model) return model.error();
  if (*model != "gpt2")
    return r.bad("tokenizer.ggml.model " + quote_name(*model) + " is not supported: only byte-level BPE ('gpt2') is" +
                 (*model == "llama" ? " (this is a SentencePiece vocabulary)" : ""));
  auto tokens = f.get_string_array("tokenizer.ggml.tokens");
  if (!tokens) return tokens.error();
  if (tokens->empty()) return r.bad("tokenizer.ggml.tokens is empty");
  BpeVocab& v = m->vocab;
  v.tokens.assign(tokens->begin(), tokens->end());
  auto merges = f.get_string_array("tokenizer.ggml.merges");
  if (!merges) return merges.error();
  v.merges.assign(merges->begin(), merges->end());
  if (f.has("tokenizer.ggml.token_type")) {
    auto types = f.get_int_array("tokenizer.ggml.token_type");
    if (!types) return types.error();
    if (types->size() != v.tokens.size())
      return r.bad("tokenizer.ggml.token_type has " + std::to_string(types->size()) + " entries for " +
                   std::to_string(v.tokens.size()) + " tokens");
    v.token_types.resize(types->size());
    for (size_t i = 0; i < types->size(); ++i) {
      if ((*types)[i] < 0 || (*types)[i] > 6)
        return r.bad("tokenizer.ggml.token_type[" + std::to_string(i) + "] = " + std::to_string((*types)[i]) +
                     " is not a token type (0..6)");
      v.token_types[i] = int32_t((*types)[i]);
    }
  }
  v.pre = "default";  // llama.cpp's fallback when the key is absent
  if (f.has("tokenizer.ggml.pre")) {
    auto pre = f.get_string("tokenizer.ggml.pre");
    if (!pre) return pre.error();
    v.pre = *pre;
  }
  const size_t n = v.tokens.size();
  auto bos = r.token_id("tokenizer.ggml.bos_token_id", n);
  auto eos = r.token_id("tokenizer.ggml.eos_token_id", n);
  auto pad = r.token_id("tokenizer.ggml.padding_token_id", n);
  for (auto* id : {&bos, &eos, &pad})
    if (!*id) return id->error();
  v.special = SpecialTokens{*bos, *eos, *pad};
  v.add_bos = v.pre == "llama-bpe" || v.pre == "llama3";  // llama.cpp's default for the pre type
  if (f.has("tokenizer.ggml.add_bos_token")) {
    auto add = f.get_bool("tokenizer.ggml.add_bos_token");
    if (!add) return add.error();
    v.add_bos = *add;
  }
  return {};
}

// eos, then the ids of tokenizer.ggml.eot/eom_token_id and of the end-of-generation texts.
Status read_eos_ids(const Reader& r, GgufLlama* m) {
  const BpeVocab& v = m->vocab;
  auto add = [&](int32_t id) {
    if (std::find(m->eos_ids.begin(), m->eos_ids.end(), id) == m->eos_ids.end()) m->eos_ids.push_back(id);
  };
  if (v.special.eos) add(*v.special.eos);
  for (const char* key : {"tokenizer.ggml.eot_token_id", "tokenizer.ggml.eom_token_id"}) {
    auto id = r.token_id(key, v.tokens.size());
    if (!id) return id.error();
    if (*id) add(**id);
  }
  for (const char* text : kEndOfGenerationTexts)
    for (size_t i = 0; i < v.tokens.size(); ++i)
      if (v.tokens[i] == text) add(int32_t(i));
  return {};
}

Status check_tensor(const Reader& r, const GgufTensor* t, const Expected& e) {
  if (!t) return r.bad("tensor " + quote_name(e.name) + " is missing");
  if (t->ne != e.ne)
    return r.bad("tensor " + quote_name(e.name) + " has dims " + gguf_dims_str(t->ne) + ", expected " +
                 gguf_dims_str(e.ne) + " (GGUF order, ne[0] first)");
  const GgmlTypeInfo& info = ggml_type_info(t->type);
  if (!info.dequantizable)
    return r.bad("tensor " + quote_name(e.name) + " has ggml type " + info.name +
                 ", which cannot be dequantized (supported: " + ggml_dequantizable_names() + ")");
  return {};
}

// Every tensor present with its shape and a dequantizable type, and nothing else in the file.
Status read_tensors(const Reader& r, GgufLlama* m) {
  const GgufFile& f = r.f;
  ModelConfig& c = m->config;
  const GgufTensor* embd = f.find_tensor("token_embd.weight");
  if (!embd) return r.bad("tensor 'token_embd.weight' is missing");
  if (embd->ne.size() != 2 || embd->ne[0] != c.dim || embd->ne[1] < 1 || embd->ne[1] > INT_MAX)
    return r.bad("tensor 'token_embd.weight' has dims " + gguf_dims_str(embd->ne) + ", expected [" +
                 std::to_string(c.dim) + ", vocab_size]");
  c.vocab_size = int(embd->ne[1]);
  if (f.has(c.architecture + ".vocab_size")) {
    auto v = f.get_int(c.architecture + ".vocab_size");
    if (!v) return v.error();
    if (*v != c.vocab_size)
      return r.bad("key '" + c.architecture + ".vocab_size' = " + std::to_string(*v) + " but token_embd.weight has " +
                   std::to_string(c.vocab_size) + " rows");
  }
  if (m->vocab.tokens.size() > size_t(c.vocab_size))
    return r.bad("the vocabulary has " + std::to_string(m->vocab.tokens.size()) + " tokens, more than the " +
                 std::to_string(c.vocab_size) + " rows of token_embd.weight");
  // Each layer holds at least 9 tensors: a block_count the file cannot hold fails before the loop.
  if (uint64_t(c.n_layers) * 9 > f.tensors().size())
    return r.bad("block_count " + std::to_string(c.n_layers) + " needs at least " +
                 std::to_string(uint64_t(c.n_layers) * 9) + " tensors, the file has " +
                 std::to_string(f.tensors().size()));
  c.tie_embeddings = f.find_tensor("output.weight") == nullptr;
  c.qkv_bias = c.architecture == "qwen2" || f.find_tensor("blk.0.attn_q.bias") != nullptr;
  c.o_bias = f.find_tensor("blk.0.attn_output.bias") != nullptr;
  std::vector<Expected> want = {{"token_embd.weight", {c.dim, c.vocab_size}}, {"output_norm.weight", {c.dim}}};
  if (!c.tie_embeddings) want.push_back({"output.weight", {c.dim, c.vocab_size}});
  if (f.find_tensor("rope_freqs.weight")) want.push_back({"rope_freqs.weight", {c.head_dim / 2}});
  for (int l = 0; l < c.n_layers; ++l) layer_tensors(c, l, &want);
  std::unordered_set<std::string> names;
  for (const Expected& e : want) {
    FTX_TRY(check_tensor(r, f.find_tensor(e.name), e));
    names.insert(e.name);
  }
  for (const GgufTensor& t : f.tensors())
    if (!names.count(t.name))
      return r.bad("tensor " + quote_name(t.name) + " is not part of a " + c.architecture + " model with " +
                   std::to_string(c.n_layers) + " layers" + (c.qkv_bias ? "" : " and no attention biases"));
  return {};
}

// The GGUF name of a Hugging Face name and, for q/k, the head count their rows are permuted with.
struct Mapped {
  std::string gguf;
  int permute_heads = 0;  // 0: rows as stored
};

std::optional<Mapped> map_hf_name(const GgufLlama& m, const std::string& hf) {
  const ModelConfig& c = m.config;
  if (hf == "model.embed_tokens.weight") return Mapped{"token_embd.weight"};
  if (hf == "model.norm.weight") return Mapped{"output_norm.weight"};
  if (hf == "lm_head.weight") return Mapped{c.tie_embeddings ? "token_embd.weight" : "output.weight"};
  const std::string prefix = "model.layers.";
  if (hf.compare(0, prefix.size(), prefix) != 0) return std::nullopt;
  size_t pos = prefix.size();
  int64_t layer = 0;
  const size_t digits_begin = pos;
  while (pos < hf.size() && hf[pos] >= '0' && hf[pos] <= '9' && pos - digits_begin < 10)
    layer = layer * 10 + (hf[pos++] - '0');
  if (pos == digits_begin || pos >= hf.size() || hf[pos] != '.' || layer >= c.n_layers ||
      (hf[digits_begin] == '0' && pos - digits_begin > 1))
    return std::nullopt;
  const std::string suffix = hf.substr(pos + 1);
  for (const LayerName& n : kLayerNames) {
    if (suffix != n.hf) continue;
    Mapped out{"blk." + std::to_string(layer) + "." + n.gguf};
    if (m.permuted_qk && suffix.rfind("self_attn.q_proj.", 0) == 0) out.permute_heads = c.n_heads;
    if (m.permuted_qk && suffix.rfind("self_attn.k_proj.", 0) == 0) out.permute_heads = c.n_kv_heads;
    return out;
  }
  return std::nullopt;
}

// The stored row of Hugging Face row r: within a head of hd rows, HF row j*hd/2 + i is GGUF row 2i + j.
inline int64_t stored_row(int64_t r, int64_t hd) {
  const int64_t h = r / hd, rem = r % hd, half = hd / 2;
  return h * hd + 2 * (rem % half) + rem / half;
}

inline void store(float x, float* y) { *y = x; }
inline void store(float x, uint16_t* y) { *y = fp32_to_bf16(x); }
inline void dequantize_row(GgmlType t, const uint8_t* src, int64_t n, float* dst) {
  dequantize_row_f32(t, src, n, dst);
}
inline void dequantize_row(GgmlType t, const uint8_t* src, int64_t n, uint16_t* dst) {
  dequantize_row_bf16(t, src, n, dst);
}

template <class T>
Status read_tensor(const GgufFile& f, const GgufLlama& m, const std::string& hf, T* dst, int64_t numel) {
  auto t = gguf_tensor_for_hf(f, m, hf);
  if (!t) return t.error();
  const GgufTensor& g = **t;
  if (numel != g.numel)
    return make_error(f.path() + ": tensor " + quote_name(g.name) + " (" + hf + ") has " + std::to_string(g.numel) +
                      " elements, the caller expects " + std::to_string(numel));
  if (!ggml_type_info(g.type).dequantizable)
    return make_error(f.path() + ": tensor " + quote_name(g.name) + " has ggml type " + ggml_type_name(g.type) +
                      ", which cannot be dequantized");
  if (numel == 0) return {};
  const int heads = map_hf_name(m, hf)->permute_heads;
  const int64_t hd = heads ? (g.ne.size() == 1 ? g.ne[0] : g.ne[1]) / heads : 0;
  const uint8_t* data = f.tensor_data(g);
  f.will_need(g);
  if (heads && g.ne.size() == 1) {  // a q/k bias: permute its elements
    std::vector<float> tmp(static_cast<size_t>(numel));
    dequantize_row_f32(g.type, data, numel, tmp.data());
    for (int64_t r = 0; r < numel; ++r) store(tmp[size_t(stored_row(r, hd))], dst + r);
    return {};
  }
  const int64_t ne0 = g.ne.empty() ? 1 : g.ne[0], rows = numel / ne0;
  const uint64_t row_bytes = g.row_bytes();
#pragma omp parallel for schedule(static) if (numel >= (int64_t{1} << 16))
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t src = heads ? stored_row(r, hd) : r;
    dequantize_row(g.type, data + uint64_t(src) * row_bytes, ne0, dst + r * ne0);
  }
  return {};
}

}  // namespace

Result<GgufLlama> read_gguf_llama(const GgufFile& f) {
  Reader r{f};
  auto arch = f.get_string("general.architecture");
  if (!arch) return arch.error();
  if (*arch != "llama" && *arch != "mistral" && *arch != "qwen2")
    return r.bad("architecture " + quote_name(*arch) + " is not supported (llama, mistral, qwen2)");
  GgufLlama m;
  m.permuted_qk = *arch != "qwen2";  // convert_hf_to_gguf permutes q/k for the llama family only
  FTX_TRY(check_supported(r, *arch));
  FTX_TRY(read_config(r, *arch, &m.config));
  if (auto st = m.config.validate(); !st) return r.bad(st.error().message);  // before shapes are derived from it
  FTX_TRY(read_vocab(r, &m));
  FTX_TRY(read_eos_ids(r, &m));
  FTX_TRY(read_tensors(r, &m));
  if (f.find_tensor("rope_freqs.weight")) {
    auto div = gguf_rope_divisors(f);
    if (!div) return div.error();
    m.config.rope_scaling = RopeScaling{.kind = RopeScalingKind::Divisors, .divisors = std::move(*div)};
  }
  if (f.has("tokenizer.chat_template")) {
    auto t = f.get_string("tokenizer.chat_template");
    if (!t) return t.error();
    m.chat_template = std::move(*t);
  }
  if (f.has("general.name")) {
    auto n = f.get_string("general.name");
    if (!n) return n.error();
    m.name = std::move(*n);
  }
  if (auto st = m.config.validate(); !st) return r.bad(st.error().message);
  return m;
}

std::vector<std::string> gguf_hf_tensor_names(const GgufLlama& m) {
  const ModelConfig& c = m.config;
  std::vector<std::string> out = {"model.embed_tokens.weight"};
  for (int l = 0; l < c.n_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    for (const LayerName& n : kLayerNames) {
      const std::string s = n.hf;
      const bool bias = s.size() > 5 && s.compare(s.size() - 5, 5, ".bias") == 0;
      if (bias && (s == "self_attn.o_proj.bias" ? !c.o_bias : !c.qkv_bias)) continue;
      out.push_back(p + s);
    }
  }
  out.push_back("model.norm.weight");
  if (!c.tie_embeddings) out.push_back("lm_head.weight");
  return out;
}

Result<const GgufTensor*> gguf_tensor_for_hf(const GgufFile& f, const GgufLlama& m, const std::string& hf_name) {
  const auto mapped = map_hf_name(m, hf_name);
  const GgufTensor* t = mapped ? f.find_tensor(mapped->gguf) : nullptr;
  if (!t) return make_error(f.path() + ": no tensor for Hugging Face name " + quote_name(hf_name));
  return t;
}

Status gguf_tensor_f32(const GgufFile& f, const GgufLlama& m, const std::string& hf_name, float* dst, int64_t numel) {
  return read_tensor(f, m, hf_name, dst, numel);
}

Status gguf_tensor_bf16(const GgufFile& f, const GgufLlama& m, const std::string& hf_name, uint16_t* dst,
                        int64_t numel) {
  return read_tensor(f, m, hf_name, dst, numel);
}

Result<std::vector<float>> gguf_rope_divisors(const GgufFile& f) {
  const GgufTensor* t = f.find_tensor("rope_freqs.weight");
  if (!t) return std::vector<float>{};
  if (t->ne.size() != 1 || !ggml_type_info(t->type).dequantizable)
    return make_error(f.path() + ": tensor 'rope_freqs.weight' must be a 1-D float vector, got " +
                      ggml_type_name(t->type) + " " + gguf_dims_str(t->ne));
  std::vector<float> out(size_t(t->numel));
  dequantize_row_f32(t->type, f.tensor_data(*t), t->numel, out.data());
  return out;
}

}  // namespace ftx
