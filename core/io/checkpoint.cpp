// Checkpoint directories: strict loading (single file or shards + index) and atomic saving
// (see checkpoint.h). Order of checks on load: config.json, then every safetensors header, then
// names/shapes/dtypes of all tensors against param_specs(config), and only then allocation and
// reading, so no buffer is sized from a file before the file has been shown to hold the data.
#include "core/io/checkpoint.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <set>

#include "core/io/config_json.h"
#include "core/io/safetensors.h"
#include "core/model/params.h"
#include "core/text/tokenizer_json.h"
#include "core/util/fs.h"

namespace ftx {
namespace {

using nlohmann::json;

constexpr uint64_t kMaxJsonFile = uint64_t{64} << 20;  // config.json, index, trainer.json
constexpr const char* kIgnoredSuffix = "rotary_emb.inv_freq";

// ---- tensor sets: one file or the shards of an index, seen as one name -> file map -------------

struct TensorSet {
  std::string label;  // what errors about the set as a whole name (file or index path)
  std::vector<SafetensorsFile> files;
  std::map<std::string, size_t> file_of;  // tensor name -> index into files

  const SafetensorsFile* file_for(const std::string& name) const {
    auto it = file_of.find(name);
    return it == file_of.end() ? nullptr : &files[it->second];
  }
};

Result<TensorSet> open_single(const std::string& path) {
  auto f = SafetensorsFile::open(path);
  if (!f) return f.error();
  TensorSet set;
  set.label = path;
  for (const auto& t : f->tensors()) set.file_of.emplace(t.name, 0);
  set.files.push_back(std::move(*f));
  return set;
}

// metadata.total_size, when present, must equal the sum of the tensors' byte sizes.
Status check_total_size(const std::string& index_path, const json& j, const TensorSet& set) {
  auto md = j.find("metadata");
  if (md == j.end() || md->is_null()) return {};
  if (!md->is_object()) return make_error(index_path + ": key 'metadata' must be an object");
  auto ts = md->find("total_size");
  if (ts == md->end()) return {};
  if (!ts->is_number_unsigned())
    return make_error(index_path + ": key 'metadata.total_size' must be a non-negative integer, got " + ts->dump());
  uint64_t sum = 0;
  for (const auto& f : set.files)
    for (const auto& t : f.tensors()) sum += t.end - t.begin;
  if (ts->get<uint64_t>() != sum)
    return make_error(index_path + ": metadata.total_size " + ts->dump() + " does not match the shards' " +
                      std::to_string(sum) + " tensor bytes");
  return {};
}

// Every tensor of a shard must be mapped to that shard, and every mapped tensor must be there.
Status check_shard_contents(const std::string& index_path, const std::map<std::string, std::string>& wm,
                            const std::vector<std::string>& names, TensorSet* set) {
  for (size_t fi = 0; fi < set->files.size(); ++fi)
    for (const auto& t : set->files[fi].tensors()) {
      auto it = wm.find(t.name);
      if (it == wm.end())
        return make_error(set->files[fi].path() + ": tensor " + quote_name(t.name) + " is not listed in " + index_path);
      if (it->second != names[fi])
        return make_error(set->files[fi].path() + ": tensor " + quote_name(t.name) + " also appears here, but " +
                          index_path + " maps it to " + quote_name(it->second));
      set->file_of.emplace(t.name, fi);
    }
  for (const auto& [name, file] : wm)
    if (!set->file_of.count(name))
      return make_error(index_path + ": tensor " + quote_name(name) + " is mapped to " + quote_name(file) +
                        " but that shard lacks it");
  return {};
}

Result<TensorSet> open_sharded(const std::string& dir, const std::string& index_path) {
  auto text = read_small_file(index_path, kMaxJsonFile);
  if (!text) return text.error();
  auto j = parse_json_strict(*text, index_path);
  if (!j) return j.error();
  auto wm = read_weight_map(index_path, *j);
  if (!wm) return wm.error();
  std::vector<std::string> names;  // distinct shards, in name order (deterministic)
  for (const auto& [tensor, file] : *wm)
    if (std::find(names.begin(), names.end(), file) == names.end()) names.push_back(file);
  std::sort(names.begin(), names.end());
  TensorSet set;
  set.label = index_path;
  for (const auto& name : names) {
    auto f = SafetensorsFile::open(join(dir, name));
    if (!f) return f.error();
    set.files.push_back(std::move(*f));
  }
  FTX_TRY(check_shard_contents(index_path, *wm, names, &set));
  FTX_TRY(check_total_size(index_path, *j, set));
  return set;
}

Result<TensorSet> open_model_tensors(const std::string& dir) {
  const std::string single = join(dir, kModelFileName), index = join(dir, kModelIndexFileName);
  if (path_exists(single)) return open_single(single);
  if (path_exists(index)) return open_sharded(dir, index);
  return make_error(dir + ": checkpoint has neither " + std::string(kModelFileName) + " nor " + kModelIndexFileName);
}

// ---- checking and reading tensors against param_specs -------------------------------------

// Why an expected tensor is absent, in the terms of config.json.
std::string missing_hint(const std::string& name) {
  if (name == "lm_head.weight") return " (config.json has tie_word_embeddings false)";
  if (name.rfind("free.", 0) == 0) return " (config.json has free_transformer, so free.* tensors are required)";
  if (name.rfind("route.", 0) == 0) return " (config.json has routing, so its router's route.* tensors are required)";
  return "";
}

// Why a present tensor is not expected.
std::string extra_hint(const std::string& name, const ModelConfig& c) {
  if (name == "lm_head.weight" && c.tie_embeddings) return "present but config.json has tie_word_embeddings true";
  if (name.rfind("free.", 0) == 0 && !c.is_free())
    return "is a Free Transformer tensor but config.json has no free_transformer (latent_bits 0)";
  if (name.rfind("route.", 0) == 0)
    return c.routing.kind == Routing::None ? "is a router's tensor but config.json has no routing"
                                           : std::string("is not a tensor of routing ") + routing_name(c.routing.kind) +
                                                 " on the blocks config.json routes";
  return "is not part of the model config.json describes";
}

// Names, shapes and dtypes of `set` against `specs`; no extras.
Status check_tensors(const TensorSet& set, const std::vector<ParamSpec>& specs, const ModelConfig& c) {
  std::set<std::string> expected;
  for (const auto& s : specs) {
    const std::string& name = s.name;
    expected.insert(name);
    const SafetensorsFile* f = set.file_for(name);
    if (!f) return make_error(set.label + ": tensor " + quote_name(name) + " is missing" + missing_hint(name));
    const TensorInfo* t = f->find(name);
    if (t->shape != s.shape)
      return make_error(f->path() + ": tensor " + quote_name(name) + ": shape " + shape_str(t->shape) +
                        " does not match config " + shape_str(s.shape));
    using D = SafetensorsDType;
    if (t->dtype != D::F32 && t->dtype != D::BF16 && t->dtype != D::F16)
      return make_error(f->path() + ": tensor " + quote_name(name) + ": dtype " + dtype_name(t->dtype) +
                        " is not supported (expected F32, BF16 or F16)");
  }
  for (const auto& [name, fi] : set.file_of)
    if (!expected.count(name) && !name.ends_with(kIgnoredSuffix))
      return make_error(set.files[fi].path() + ": unexpected tensor " + quote_name(name) + " " + extra_hint(name, c));
  return {};
}

Status check_finite(const std::string& path, const std::string& name, const float* x, int64_t n) {
  return check_finite_values(path, name, SafetensorsDType::F32, x, n);
}

// Reads every spec (already checked) into `arena` at its offset.
Status read_tensors(const TensorSet& set, const std::vector<ParamSpec>& specs, const std::string& prefix,
                    std::vector<float>* arena) {
  for (const auto& s : specs) {
    const std::string name = prefix + s.name;
    const SafetensorsFile* f = set.file_for(name);
    float* dst = arena->data() + s.offset;
    FTX_TRY(f->read_f32_into(name, dst, s.numel));
    FTX_TRY(check_finite(f->path(), name, dst, s.numel));
  }
  return {};
}

Result<std::vector<float>> alloc_arena(const std::string& dir, int64_t n) {
  try {
    return std::vector<float>(static_cast<size_t>(n));
  } catch (const std::exception&) {
    return make_error(dir + ": cannot allocate " + std::to_string(n) + " floats for the checkpoint");
  }
}

Status load_training_state(const std::string& dir, const std::vector<ParamSpec>& specs, CheckpointData* ck) {
  const std::string path = join(dir, kTrainingStateFileName);
  if (!path_exists(path))
    return make_error(path + ": missing: the checkpoint has no training state (load it for inference only)");
  auto set = open_single(path);
  if (!set) return set.error();
  std::vector<ParamSpec> both;  // adam_m.* then adam_v.*, checked in one pass so extras are caught
  for (const char* p : {"adam_m.", "adam_v."})
    for (const auto& s : specs) both.push_back(ParamSpec{p + s.name, s.shape, s.offset, s.numel});
  FTX_TRY(check_tensors(*set, both, ck->config));
  auto m = alloc_arena(dir, param_count(specs));
  if (!m) return m.error();
  auto v = alloc_arena(dir, param_count(specs));
  if (!v) return v.error();
  FTX_TRY(read_tensors(*set, specs, "adam_m.", &*m));
  FTX_TRY(read_tensors(*set, specs, "adam_v.", &*v));
  ck->adam_m = std::move(*m);
  ck->adam_v = std::move(*v);
  const std::string tpath = join(dir, kTrainerFileName);
  auto text = read_small_file(tpath, kMaxJsonFile);
  if (!text) return text.error();
  auto j = parse_json_strict(*text, tpath);
  if (!j) return j.error();
  if (!j->is_object()) return make_error(tpath + ": must be a JSON object");
  ck->trainer = std::move(*j);
  ck->has_training_state = true;
  return {};
}

Result<CheckpointData> load_impl(const std::string& dir, bool with_training_state) {
  CheckpointData ck;
  auto cfg = load_checkpoint_config(dir, &ck.tokenizer);
  if (!cfg) return cfg.error();
  ck.config = *cfg;
  auto set = open_model_tensors(dir);
  if (!set) return set.error();
  if (ck.config.is_free() && set->file_for("free.encoder_readout.bias")) ck.config.readout_bias = true;
  const std::vector<ParamSpec> specs = param_specs(ck.config);
  FTX_TRY(check_tensors(*set, specs, ck.config));
  auto params = alloc_arena(dir, param_count(specs));
  if (!params) return params.error();
  FTX_TRY(read_tensors(*set, specs, "", &*params));
  ck.params = std::move(*params);
  if (with_training_state) FTX_TRY(load_training_state(dir, specs, &ck));
  return ck;
}

// ---- saving ----------------------------------------------------------------------------------

Status check_arena(const std::string& dir, const char* what, const std::vector<float>& a,
                   const std::vector<ParamSpec>& specs) {
  if (static_cast<int64_t>(a.size()) != param_count(specs))
    return make_error(dir + ": cannot save: " + what + " has " + std::to_string(a.size()) +
                      " floats, the config needs " + std::to_string(param_count(specs)));
  for (const auto& s : specs)
    FTX_TRY(check_finite(dir + ": cannot save " + what, s.name, a.data() + s.offset, s.numel));
  return {};
}

std::vector<NamedTensor> named(const std::vector<ParamSpec>& specs, const std::string& prefix,
                               const std::vector<float>& arena, SafetensorsDType dtype = SafetensorsDType::F32) {
  std::vector<NamedTensor> out;
  for (const auto& s : specs) out.push_back(NamedTensor{prefix + s.name, s.shape, arena.data() + s.offset, dtype});
  return out;
}

// Writes every file of the checkpoint into `tmp` (each one fsynced) and fsyncs `tmp`.
Status write_contents(const std::string& tmp, const CheckpointData& ck, const std::vector<ParamSpec>& specs) {
  const std::map<std::string, std::string> meta = {{"format", "pt"}};
  json config = config_to_json(ck.config, ck.tokenizer.get());
  if (ck.tokenizer) FTX_TRY(save_tokenizer(*ck.tokenizer, tmp, config["tokenizer"]));
  FTX_TRY(write_file_durable(join(tmp, kConfigFileName), config.dump(2) + "\n"));
  FTX_TRY(write_safetensors(join(tmp, kModelFileName), named(specs, "", ck.params, ck.weights_dtype), meta));
  if (ck.has_training_state) {
    auto tensors = named(specs, "adam_m.", ck.adam_m);
    auto v = named(specs, "adam_v.", ck.adam_v);
    tensors.insert(tensors.end(), v.begin(), v.end());
    FTX_TRY(write_safetensors(join(tmp, kTrainingStateFileName), tensors, meta));
    const json trainer = ck.trainer.is_null() ? json::object() : ck.trainer;
    FTX_TRY(write_file_durable(join(tmp, kTrainerFileName), trainer.dump(2) + "\n"));
  }
  return fsync_dir(tmp);
}

// Swaps `tmp` into place at `dir` (atomic exchange where the OS has it, else move aside first);
// the previous checkpoint is removed only once the new one is at `dir`.
Status install(const std::string& tmp, const std::string& dir, const std::string& parent) {
  struct stat st {};
  if (::lstat(dir.c_str(), &st) != 0) {
    if (::rename(tmp.c_str(), dir.c_str()) != 0)
      return make_error(dir + ": cannot rename " + tmp + " into place: " + errno_text(errno));
    return fsync_dir(parent);
  }
  if (!S_ISDIR(st.st_mode)) return make_error(dir + ": exists and is not a directory (refusing to replace it)");
#ifdef RENAME_EXCHANGE
  if (::renameat2(AT_FDCWD, tmp.c_str(), AT_FDCWD, dir.c_str(), RENAME_EXCHANGE) == 0) {
    FTX_TRY(fsync_dir(parent));
    (void)remove_tree(tmp);  // now holds the previous checkpoint; a leftover is harmless
    return {};
  }
  if (errno != EINVAL && errno != ENOSYS && errno != ENOTSUP)
    return make_error(dir + ": cannot swap in " + tmp + ": " + errno_text(errno));
#endif
  const std::string aside = dir + ".old-" + std::to_string(::getpid());
  (void)remove_tree(aside);
  if (::rename(dir.c_str(), aside.c_str()) != 0)
    return make_error(dir + ": cannot move the previous checkpoint aside: " + errno_text(errno));
  if (::rename(tmp.c_str(), dir.c_str()) != 0) {
    const int err = errno;
    (void)::rename(aside.c_str(), dir.c_str());
    return make_error(dir + ": cannot rename " + tmp + " into place: " + errno_text(err));
  }
  FTX_TRY(fsync_dir(parent));
  (void)remove_tree(aside);
  return {};
}

Status save_impl(std::string dir, const CheckpointData& ck) {
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  if (dir.empty() || dir == "/" || dir == "." || dir == "..")
    return make_error("save_checkpoint: invalid directory '" + dir + "'");
  if (auto v = ck.config.validate(); !v) return make_error(dir + ": cannot save: " + v.error().message);
  if (ck.tokenizer)
    if (auto fits = check_tokenizer_fits(*ck.tokenizer, ck.config.vocab_size); !fits)
      return make_error(dir + ": cannot save: " + fits.error().message);
  const std::vector<ParamSpec> specs = param_specs(ck.config);
  FTX_TRY(check_arena(dir, "params", ck.params, specs));
  if (ck.has_training_state) {
    FTX_TRY(check_arena(dir, "adam_m", ck.adam_m, specs));
    FTX_TRY(check_arena(dir, "adam_v", ck.adam_v, specs));
    if (!ck.trainer.is_null() && !ck.trainer.is_object())
      return make_error(dir + ": cannot save: trainer state must be a JSON object");
  }
  std::string parent = std::filesystem::path(dir).parent_path().string();
  if (parent.empty()) parent = ".";
  std::error_code ec;
  std::filesystem::create_directories(parent, ec);
  if (ec) return make_error(parent + ": cannot create directory: " + ec.message());
  const std::string tmp = dir + ".tmp-" + std::to_string(::getpid());
  (void)remove_tree(tmp);  // a stale one from a crashed process that had our pid
  if (::mkdir(tmp.c_str(), 0755) != 0) return make_error(tmp + ": cannot create directory: " + errno_text(errno));
  Status st = write_contents(tmp, ck, specs);
  if (st) st = install(tmp, dir, parent);
  if (!st) (void)remove_tree(tmp);
  return st;
}

}  // namespace

// A shard name must be a plain file name in the checkpoint directory.
static bool is_plain_basename(const std::string& s) {
  return !s.empty() && s != "." && s != ".." && s.find('/') == std::string::npos && s.find('\\') == std::string::npos &&
         s.find('\0') == std::string::npos;
}

Result<std::map<std::string, std::string>> read_weight_map(const std::string& index_path, const json& j) {
  if (!j.is_object()) return make_error(index_path + ": index must be a JSON object");
  auto wm = j.find("weight_map");
  if (wm == j.end() || !wm->is_object()) return make_error(index_path + ": key 'weight_map' missing or not an object");
  std::map<std::string, std::string> out;
  for (auto it = wm->begin(); it != wm->end(); ++it) {
    if (!it.value().is_string())
      return make_error(index_path + ": weight_map[" + quote_name(it.key()) + "] must be a file name string");
    const std::string file = it.value().get<std::string>();
    if (!is_plain_basename(file))
      return make_error(index_path + ": weight_map[" + quote_name(it.key()) + "] = " + it.value().dump() +
                        ": shard must be a plain file name in the checkpoint directory (no '/' or '..')");
    out.emplace(it.key(), file);
  }
  return out;
}

Result<ModelConfig> load_checkpoint_config(const std::string& dir, std::shared_ptr<const Tokenizer>* tokenizer) {
  try {
    const std::string path = join(dir, kConfigFileName);
    auto text = read_small_file(path, kMaxJsonFile);
    if (!text) return text.error();
    auto j = parse_json_strict(*text, path);
    if (!j) return j.error();
    return config_from_json(*j, path, tokenizer);
  } catch (const std::exception& e) {
    return make_error(dir + ": cannot read config: " + e.what());
  }
}

Result<CheckpointData> load_checkpoint(const std::string& dir, bool with_training_state) {
  try {
    return load_impl(dir, with_training_state);
  } catch (const std::exception& e) {
    return make_error(dir + ": cannot load checkpoint: " + e.what());
  }
}

Status save_checkpoint(const std::string& dir, const CheckpointData& ck) {
  try {
    return save_impl(dir, ck);
  } catch (const std::exception& e) {
    return make_error(dir + ": cannot save checkpoint: " + e.what());
  }
}

}  // namespace ftx
