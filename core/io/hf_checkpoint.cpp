// Hugging Face-layout checkpoints, memory-mapped (see hf_checkpoint.h). Order of checks in open():
// config.json, the side files (generation config, chat template), the index and every shard
// header, then the tensor set against param_specs(config). No tensor byte is read before
// tensor_for or check_finite asks for it.
#include "core/io/hf_checkpoint.h"

#include <sys/stat.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <map>
#include <set>

#include "core/io/checkpoint.h"
#include "core/io/config_json.h"
#include "core/util/fs.h"

namespace ftx {
namespace {

using nlohmann::json;

constexpr uint64_t kMaxJsonFile = uint64_t{64} << 20;  // config, index, tokenizer config, template
constexpr const char* kIgnoredSuffix = "rotary_emb.inv_freq";

Result<json> read_json_file(const std::string& path) {
  auto text = read_small_file(path, kMaxJsonFile);
  if (!text) return text.error();
  return parse_json_strict(*text, path);
}

// ---- shards -------------------------------------------------------------------------------------

struct Shard {
  std::string path;
  MappedFile map;
  SafetensorsHeader header;
};

Result<Shard> open_shard(const std::string& path) {
  auto m = MappedFile::open(path);
  if (!m) return m.error();
  auto h = parse_safetensors(path, m->data(), m->size());
  if (!h) return h.error();
  return Shard{path, std::move(*m), std::move(*h)};
}

// Every tensor of a shard is mapped to that shard by the index, and every mapped tensor is there.
Status check_shard_contents(const std::string& index_path, const std::map<std::string, std::string>& wm,
                            const std::vector<std::string>& names, const std::vector<Shard>& shards) {
  std::set<std::string> found;
  for (size_t fi = 0; fi < shards.size(); ++fi)
    for (const auto& t : shards[fi].header.tensors) {
      auto it = wm.find(t.name);
      if (it == wm.end())
        return make_error(shards[fi].path + ": tensor " + quote_name(t.name) + " is not listed in " + index_path);
      if (it->second != names[fi])
        return make_error(shards[fi].path + ": tensor " + quote_name(t.name) + " is also in this shard, but " +
                          index_path + " maps it to " + quote_name(it->second));
      found.insert(t.name);
    }
  for (const auto& [name, file] : wm)
    if (!found.count(name))
      return make_error(index_path + ": tensor " + quote_name(name) + " is mapped to " + quote_name(file) +
                        " but that shard lacks it");
  return {};
}

Result<std::vector<Shard>> open_sharded(const std::string& dir, const std::string& index_path) {
  auto j = read_json_file(index_path);
  if (!j) return j.error();
  auto wm = read_weight_map(index_path, *j);
  if (!wm) return wm.error();
  std::vector<std::string> names;  // distinct shards, in name order
  for (const auto& [tensor, file] : *wm) names.push_back(file);
  std::sort(names.begin(), names.end());
  names.erase(std::unique(names.begin(), names.end()), names.end());
  std::vector<Shard> shards;
  for (const auto& name : names) {
    const std::string path = join(dir, name);
    if (!path_exists(path))
      return make_error(index_path + ": weight_map names shard " + quote_name(name) + ", which is missing from " + dir);
    auto s = open_shard(path);
    if (!s) return s.error();
    shards.push_back(std::move(*s));
  }
  FTX_TRY(check_shard_contents(index_path, *wm, names, shards));
  return shards;
}

// The shards of `dir` and what errors about the set as a whole name (*label).
Result<std::vector<Shard>> open_shards(const std::string& dir, std::string* label) {
  const std::string single = join(dir, kModelFileName), index = join(dir, kModelIndexFileName);
  if (path_exists(single)) {
    *label = single;
    auto s = open_shard(single);
    if (!s) return s.error();
    std::vector<Shard> one;
    one.push_back(std::move(*s));
    return one;
  }
  if (path_exists(index)) {
    *label = index;
    return open_sharded(dir, index);
  }
  std::string hint;
  if (path_exists(join(dir, "pytorch_model.bin")) || path_exists(join(dir, "pytorch_model.bin.index.json")))
    hint = " (pytorch_model.bin is not read: convert the checkpoint to safetensors)";
  return make_error(dir + ": checkpoint has neither " + std::string(kModelFileName) + " nor " + kModelIndexFileName +
                    hint);
}

// ---- the tensor set against the config ----------------------------------------------------------

bool supported_dtype(SafetensorsDType d) {
  return d == SafetensorsDType::F32 || d == SafetensorsDType::BF16 || d == SafetensorsDType::F16;
}

bool is_attention_bias(const std::string& name) {
  return name.find("self_attn.") != std::string::npos && name.ends_with("_proj.bias");
}

// Why an expected tensor is absent, in the terms of config.json.
std::string missing_hint(const std::string& name, const ModelConfig& c) {
  if (name == "lm_head.weight") return " (config.json has tie_word_embeddings false)";
  if (name.rfind("free.", 0) == 0) return " (config.json has free_transformer, so free.* tensors are required)";
  if (is_attention_bias(name))
    return c.architecture == "qwen2" ? " (qwen2 has q, k and v biases)" : " (config.json has attention_bias true)";
  return "";
}

// Why a present tensor is not expected.
std::string extra_hint(const std::string& name, const ModelConfig& c) {
  if (name.rfind("free.", 0) == 0 && !c.is_free())
    return "is a Free Transformer tensor but config.json has no free_transformer (latent_bits 0)";
  if (is_attention_bias(name))
    return "is an attention bias but config.json has none (model_type " + c.architecture +
           (c.architecture == "llama" ? ", attention_bias false)" : ")");
  return "is not part of the model config.json describes";
}

// The config keys a shape comes from, for a mismatch message.
std::string shape_hint(const std::string& name, const ModelConfig& c) {
  if (name == "model.embed_tokens.weight" || name == "lm_head.weight")
    return " (vocab_size " + std::to_string(c.vocab_size) + ", hidden_size " + std::to_string(c.dim) + ")";
  return "";
}

Status check_tensor_set(const std::vector<HfTensor>& tensors, const std::unordered_map<std::string, size_t>& by_name,
                        const ModelConfig& c, const std::string& label, const std::string& config_path) {
  std::set<std::string> expected;
  for (const ParamSpec& s : param_specs(c)) {
    expected.insert(s.name);
    auto it = by_name.find(s.name);
    if (it == by_name.end())
      return make_error(label + ": tensor " + quote_name(s.name) + " is missing" + missing_hint(s.name, c));
    const HfTensor& t = tensors[it->second];
    if (t.shape != s.shape)
      return make_error(t.file + ": tensor " + quote_name(s.name) + ": shape " + shape_str(t.shape) +
                        " does not match " + shape_str(s.shape) + " from " + config_path + shape_hint(s.name, c));
    if (!supported_dtype(t.dtype))
      return make_error(t.file + ": tensor " + quote_name(s.name) + ": dtype " + dtype_name(t.dtype) +
                        " is not supported (expected F32, BF16 or F16)");
  }
  for (const HfTensor& t : tensors) {
    if (expected.count(t.name) || t.name.ends_with(kIgnoredSuffix)) continue;
    if (t.name == "lm_head.weight" && c.tie_embeddings) {
      const std::vector<int64_t> want = {c.vocab_size, c.dim};
      if (t.shape != want)
        return make_error(t.file + ": tensor 'lm_head.weight' (ignored: tie_word_embeddings true): shape " +
                          shape_str(t.shape) + " does not match " + shape_str(want) + " from " + config_path);
      continue;
    }
    return make_error(t.file + ": unexpected tensor " + quote_name(t.name) + " " + extra_hint(t.name, c));
  }
  return {};
}

// ---- side files -----------------------------------------------------------------------------------

// tokenizer_config.json's "chat_template": a string, or [{"name", "template"}, ...] of which the
// one named "default" is used (none: no template).
Result<std::string> chat_template_from(const std::string& path, const json& j) {
  if (!j.is_object()) return make_error(path + ": must be a JSON object");
  auto it = j.find("chat_template");
  if (it == j.end() || it->is_null()) return std::string();
  if (it->is_string()) return it->get<std::string>();
  const std::string bad = path + ": key 'chat_template': must be a string or a list of {\"name\", \"template\"}";
  if (!it->is_array()) return make_error(bad + ", got " + it->type_name());
  std::string chosen;
  for (const json& e : *it) {
    if (!e.is_object() || !e.contains("name") || !e.contains("template") || !e["name"].is_string() ||
        !e["template"].is_string())
      return make_error(bad + ", got an entry " + e.dump().substr(0, 80));
    if (e["name"] == "default") chosen = e["template"].get<std::string>();
  }
  return chosen;
}

Result<std::string> read_chat_template(const std::string& dir) {
  const std::string jinja = join(dir, kChatTemplateFileName), tc = join(dir, kTokenizerConfigFileName);
  if (path_exists(jinja)) return read_small_file(jinja, kMaxJsonFile);
  if (!path_exists(tc)) return std::string();
  auto j = read_json_file(tc);
  if (!j) return j.error();
  return chat_template_from(tc, *j);
}

// ---- values ---------------------------------------------------------------------------------------

bool aligned(const void* p, size_t a) { return reinterpret_cast<uintptr_t>(p) % a == 0; }

}  // namespace

Result<HfCheckpoint> HfCheckpoint::open(const std::string& dir_in) {
  try {
    std::string dir = dir_in;
    while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
    HfCheckpoint ck;
    ck.dir_ = dir;
    const std::string config_path = join(dir, kConfigFileName);
    auto cj = read_json_file(config_path);
    if (!cj) return cj.error();
    auto cfg = config_from_json(*cj, config_path, &ck.tokenizer_);
    if (!cfg) return cfg.error();
    ck.config_ = *cfg;
    auto ids = special_token_ids_from_json(*cj, config_path, cfg->vocab_size);
    if (!ids) return ids.error();
    const std::string gen_path = join(dir, kGenerationConfigFileName);
    if (path_exists(gen_path)) {
      auto gj = read_json_file(gen_path);
      if (!gj) return gj.error();
      auto gen = special_token_ids_from_json(*gj, gen_path, cfg->vocab_size);
      if (!gen) return gen.error();
      if (gen->eos) ids->eos = gen->eos;
      if (gen->bos) ids->bos = gen->bos;
    }
    ck.eos_ = ids->eos.value_or(std::vector<int32_t>{});
    ck.bos_ = ids->bos;
    auto tmpl = read_chat_template(dir);
    if (!tmpl) return tmpl.error();
    ck.chat_template_ = std::move(*tmpl);
    if (path_exists(join(dir, kTokenizerJsonFileName))) ck.tokenizer_json_ = join(dir, kTokenizerJsonFileName);

    std::string label;
    auto shards = open_shards(dir, &label);
    if (!shards) return shards.error();
    for (size_t si = 0; si < shards->size(); ++si) {
      Shard& s = (*shards)[si];
      for (const TensorInfo& t : s.header.tensors) {
        const uint8_t* at = s.map.data() + s.header.data_offset() + t.begin;
        ck.by_name_.emplace(t.name, ck.tensors_.size());
        ck.tensors_.push_back(HfTensor{t.name, t.dtype, t.shape, s.path, at, t.end - t.begin});
        ck.shard_of_.push_back(si);
      }
      ck.file_bytes_ += int64_t(s.map.size());
      ck.maps_.push_back(std::move(s.map));
    }
    if (ck.config_.is_free() && ck.find("free.encoder_readout.bias")) ck.config_.readout_bias = true;
    FTX_TRY(check_tensor_set(ck.tensors_, ck.by_name_, ck.config_, label, config_path));
    return ck;
  } catch (const std::exception& e) {
    return make_error(dir_in + ": cannot open checkpoint: " + e.what());
  }
}

const HfTensor* HfCheckpoint::find(const std::string& name) const {
  auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : &tensors_[it->second];
}

Result<const HfTensor*> HfCheckpoint::lookup(const ParamSpec& spec) const {
  const HfTensor* t = find(spec.name);
  if (!t) return make_error(dir_ + ": tensor " + quote_name(spec.name) + " is not in the checkpoint");
  if (t->shape != spec.shape)
    return make_error(t->file + ": tensor " + quote_name(spec.name) + ": shape " + shape_str(t->shape) +
                      " does not match the requested " + shape_str(spec.shape));
  if (!supported_dtype(t->dtype))
    return make_error(t->file + ": tensor " + quote_name(spec.name) + ": dtype " + dtype_name(t->dtype) +
                      " is not supported (expected F32, BF16 or F16)");
  return t;
}

Result<WeightRef> HfCheckpoint::tensor_for(const ParamSpec& spec) {
  if (auto it = given_.find(spec.name); it != given_.end()) return it->second;
  auto found = lookup(spec);
  if (!found) return found.error();
  const HfTensor& t = **found;
  const size_t n = size_t(spec.numel);
  WeightRef ref;
  try {
    if (t.dtype == SafetensorsDType::BF16 && aligned(t.data, alignof(uint16_t))) {
      ref = bf16_weight(reinterpret_cast<const uint16_t*>(t.data));
    } else if (t.dtype == SafetensorsDType::F32 && aligned(t.data, alignof(float))) {
      ref = f32_weight(reinterpret_cast<const float*>(t.data));
    } else if (t.dtype == SafetensorsDType::BF16) {  // misaligned: copied
      auto& buf = owned_bf16_.emplace_back(n);
      std::memcpy(buf.data(), t.data, n * sizeof(uint16_t));
      ref = bf16_weight(buf.data());
    } else if (t.dtype == SafetensorsDType::F16 && spec.gemm_weight) {  // F16 GEMM weight: to BF16
      auto& buf = owned_bf16_.emplace_back(n);
      for (size_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, t.data + 2 * i, 2);
        buf[i] = fp32_to_bf16(f16_to_f32(h));  // f16 -> f32 is exact: one rounding
      }
      ref = bf16_weight(buf.data());
    } else {  // F32 misaligned, or F16 that is not a GEMM weight: F32
      auto& buf = owned_f32_.emplace_back(n);
      decode_f32(t.dtype, t.data, int64_t(n), buf.data());
      ref = f32_weight(buf.data());
    }
  } catch (const std::bad_alloc&) {
    return make_error(t.file + ": tensor " + quote_name(t.name) + ": cannot allocate memory to convert it");
  }
  given_.emplace(spec.name, ref);
  return ref;
}

Status HfCheckpoint::check_finite(const ParamSpec& spec) const {
  auto found = lookup(spec);
  if (!found) return found.error();
  const HfTensor& t = **found;
  const MappedFile& map = maps_[shard_of_[size_t(&t - tensors_.data())]];
  map.will_need(uint64_t(t.data - map.data()), t.bytes);
  return check_finite_values(t.file, t.name, t.dtype, t.data, spec.numel);
}

}  // namespace ftx
