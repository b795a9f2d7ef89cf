#include "core/train/run_start.h"

#include "core/eval/bench/bench_suite.h"
#include "core/io/model_params.h"
#include "core/store/run_store.h"
#include "core/train/init_model.h"

namespace ftx {

PreparedRun::PreparedRun() = default;
PreparedRun::PreparedRun(PreparedRun&&) noexcept = default;
PreparedRun& PreparedRun::operator=(PreparedRun&&) noexcept = default;
PreparedRun::~PreparedRun() = default;

Result<PreparedRun> prepare_run(NewRun request, std::unique_ptr<BatchSource> data, FieldName name) {
  if (!data) return make_error("dataset '" + request.train.dataset + "': unknown or bad arguments");
  PreparedRun p;
  TrainConfig& t = request.train;
  if (t.init_from.empty()) {
    auto m = shape_model_config(request.shape, data->tokenizer().vocab_size(), data->seq_len(), name);
    if (!m) return m.error();
    p.model = *m;
  } else {
    if (!request.shape_setting_given.empty())
      return make_error(request.shape_setting_given + " cannot be used with " +
                        name(find_field<TrainConfig>("init_from")) + ": the model's shape comes from " + t.init_from);
    auto info = check_init_model(t.init_from, *data);  // headers only: the weights are read by start_run
    if (!info) return info.error();
    p.model = info->config;
    t.preset = "custom";
    if (!request.kappa_given)
      if (const float k = recorded_kappa_nats(t.init_from); k >= 0) t.kappa_nats = k;
  }
  FTX_TRY(t.validate(name));
  if (!t.bench_tasks.empty()) {
    auto specs = bench::parse_bench_tasks(t.bench_tasks);
    if (!specs) return make_error(name(find_field<TrainConfig>("bench_tasks")) + ": " + specs.error().message);
    auto suite = bench::BenchSuite::load(*specs, t.bench_data);
    if (!suite) return suite.error();
    p.bench = std::make_unique<bench::BenchSuite>(std::move(*suite));
  }
  FTX_TRY(check_training_memory(p.model, t, data->seq_len(), name));
  if (request.run.empty()) return make_error("a run needs a name");
  if (auto store = RunStore::open_readonly(request.db); store && store->find_run(request.run))
    return make_error("run '" + request.run + "' already exists in " + request.db +
                      ": resume it, or pick another name");
  p.request = std::move(request);
  p.data = std::move(data);
  return p;
}

namespace {

Result<std::unique_ptr<Trainer>> start_trainer(Backend& be, const PreparedRun& run) {
  const NewRun& r = run.request;
  const BatchSource& data = *run.data;
  if (r.train.init_from.empty())
    return Trainer::start(be, run.model, data.tokenizer().clone(), r.train, data.seq_len(), r.db, r.run);
  auto src = read_init_model(r.train.init_from, data);
  if (!src) return src.error();
  return Trainer::start(be, src->info.config, src->info.tokenizer, r.train, data.seq_len(), r.db, r.run, &src->params);
}

}  // namespace

Result<std::unique_ptr<Trainer>> start_run(Backend& be, PreparedRun& run) {
  auto trainer = start_trainer(be, run);
  if (trainer && run.bench) (*trainer)->use_bench_suite(std::move(run.bench));
  return trainer;
}

}  // namespace ftx
