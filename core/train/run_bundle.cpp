#include "core/train/run_bundle.h"

#include <cmath>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <vector>

#include "core/io/checkpoint.h"
#include "core/store/run_store.h"
#include "core/train/run_config.h"
#include "core/train/trainer.h"
#include "core/util/fs.h"
#include "core/util/sha256.h"

namespace ftx {
namespace {

using json = nlohmann::json;
constexpr int kBundleVersion = 1;
constexpr uint64_t kMaxRunJsonBytes = 64ull << 20;

// The run's metrics up to `step` as {key: [[step, value], ...]}; NaN is written as null.
Result<json> metrics_json(RunStore& store, int64_t run_id, int step) {
  auto rows = store.metrics(run_id, "");
  if (!rows) return rows.error();
  json out = json::object();
  for (const MetricRow& r : *rows) {
    if (r.step > step) continue;
    out[r.key].push_back(json::array({r.step, std::isnan(r.value) ? json(nullptr) : json(r.value)}));
  }
  return out;
}

// run.json read and checked: the fields import uses, with the file named in every error.
struct BundleRecord {
  std::string name, status, notes, config;
  int step = 0;
  std::vector<std::tuple<int64_t, std::string, double>> metrics;
};

Result<BundleRecord> read_record(const std::string& path) {
  auto text = read_small_file(path, kMaxRunJsonBytes);
  if (!text) return text.error();
  const json j = json::parse(*text, nullptr, false);
  auto bad = [&](const std::string& what) { return make_error(path + ": " + what); };
  if (!j.is_object()) return bad("not a JSON object");
  if (j.value("format", "") != "ftx-run") return bad("\"format\" is not \"ftx-run\" (not a run bundle)");
  if (!j.contains("version") || j["version"] != kBundleVersion)
    return bad("unsupported \"version\" (this ftx reads version " + std::to_string(kBundleVersion) + ")");
  BundleRecord r;
  if (!j.contains("name") || !j["name"].is_string() || j["name"].get<std::string>().empty())
    return bad("\"name\": expected a non-empty string");
  r.name = j["name"];
  if (r.name.find('/') != std::string::npos || r.name.find("..") != std::string::npos)
    return bad("\"name\" '" + r.name + "': a run name has no '/' or '..'");
  if (!j.contains("step") || !j["step"].is_number_integer() || j["step"].get<int64_t>() < 0 ||
      j["step"].get<int64_t>() > (1 << 30))
    return bad("\"step\": expected a non-negative integer");
  r.step = j["step"];
  if (!j.contains("config") || !j["config"].is_object()) return bad("\"config\": expected an object");
  r.config = j["config"].dump();
  if (auto c = parse_run_config(r.config, path + ": \"config\""); !c) return c.error();
  r.status = j.value("status", "done");
  r.notes = j.value("notes", "");
  const json& m = j.value("metrics", json::object());
  if (!m.is_object()) return bad("\"metrics\": expected an object of [[step, value], ...] lists");
  for (const auto& [key, rows] : m.items()) {
    if (!rows.is_array()) return bad("metric '" + key + "': expected a list of [step, value]");
    for (const json& row : rows) {
      if (!row.is_array() || row.size() != 2 || !row[0].is_number_integer() ||
          !(row[1].is_number() || row[1].is_null()))
        return bad("metric '" + key + "': expected [step, value] pairs, got " + row.dump());
      r.metrics.emplace_back(row[0].get<int64_t>(), key, row[1].is_null() ? std::nan("") : row[1].get<double>());
    }
  }
  return r;
}

}  // namespace

Status export_run(const std::string& db, const std::string& run, const std::string& out_dir,
                  const ExportOptions& options) {
  auto store = RunStore::open_readonly(db);
  if (!store) return store.error();
  auto info = store->find_run(run);
  if (!info) return info.error();
  auto ref = find_run_checkpoint(*store, run, options.step);
  if (!ref) return ref.error();
  auto ck = load_checkpoint(ref->dir, false);
  if (!ck) return ck.error();
  auto metrics = metrics_json(*store, info->id, ref->step);
  if (!metrics) return metrics.error();
  if (auto c = parse_run_config(info->config_json, db + ": run '" + run + "'"); !c) return c.error();
  const json config = json::parse(info->config_json);  // exported as stored
  ck->weights_dtype = options.bf16 ? SafetensorsDType::BF16 : SafetensorsDType::F32;
  const std::string name = options.name.empty() ? run : options.name;
  const json record = {{"format", "ftx-run"}, {"version", kBundleVersion}, {"name", name},
                       {"step", ref->step},   {"status", info->status},    {"notes", info->notes},
                       {"config", config},    {"metrics", *metrics}};
  // The checkpoint writer replaces out_dir atomically; run.json goes in once the model is there.
  FTX_TRY(save_checkpoint(out_dir, *ck));
  return write_file_durable(join(out_dir, kRunBundleFileName), record.dump() + "\n");
}

Status import_run(const std::string& db, const std::string& dir, bool* imported) {
  if (imported) *imported = false;
  auto record = read_record(join(dir, kRunBundleFileName));
  if (!record) return record.error();
  auto ck = load_checkpoint(dir, false);  // validates the model before the store is touched
  if (!ck) return ck.error();
  auto store = RunStore::open(db);
  if (!store) return store.error();
  if (store->find_run(record->name)) return {};
  auto id = store->create_run(record->name, record->config);
  if (!id) return id.error();
  // From here a failure removes the half-imported run and its files.
  const std::string target = checkpoint_dir(db, record->name, record->step);
  auto undo = [&](const Error& e) -> Status {
    (void)store->delete_run(*id);
    (void)remove_tree(std::filesystem::path(target).parent_path().string());
    return e;
  };
  ck->weights_dtype = SafetensorsDType::F32;
  if (Status s = save_checkpoint(target, *ck); !s) return undo(s.error());
  auto digest = sha256_file(join(target, kModelFileName));
  if (!digest) return undo(digest.error());
  for (const auto& [step, key, value] : record->metrics) store->add_metric(*id, step, key, value);
  Status s = store->flush();
  if (s) s = store->add_checkpoint(*id, record->step, checkpoint_rel_path(db, record->name, record->step), *digest);
  if (s) s = store->set_notes(*id, record->notes);
  if (s) s = store->set_status(*id, record->status);
  if (!s) return undo(s.error());
  if (imported) *imported = true;
  return {};
}

}  // namespace ftx
