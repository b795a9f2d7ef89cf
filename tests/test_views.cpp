// The studio's model/view logic, offscreen (no display, no window shown):
// - RunListModel: the newest runs start overlaid; overlay and colour choices survive set_runs with
//   the same run ids (reordered, renamed) and are dropped for runs that left the store; a renamed
//   cell emits rename_requested and leaves the model as it was; the overlay check box; the kappa,
//   steps and final CE columns; which cells are editable.
// - RunsView: the text filter (any column, case-insensitive), the selection mapped through the
//   filter to the right run, the Generations/Latent buttons, the run count.
// - summarize_run: a config written by the trainer's own serializers, bad JSON, wrong types.
// - TrainView: Start refusing a bad kappa (named in the
//   message line), a valid Start and a kappa sweep as start_requested, the run controls by state;
//   a custom size shaped by the session into the model `ftx train` makes with the same flags; the
//   text dataset and a model to start from (fine-tuning) as request fields.
// - GenerationsView: a prompt the runs' tokenizer cannot encode refused with the tokenizer's
//   message (character and position) and no request, a valid prompt's figure4_requested,
//   set_tokenizer re-checking the prompt, the empty prompt, select_run with its latest step, the
//   kappa comparison without runs.
// - BenchmarksView over a real store tailed by a StorePoller: one chart per task with each overlaid
//   run's points of the main metric, error bars, the paper's reference lines (and none for another
//   metric or a task outside the paper), the x axis in tokens, the latest-values table, a click on
//   a point listing that step's items through the poller, live growth and a rewritten step.
// Signals are recorded by lambdas (Qt6::Test is not linked); buttons are found by their text.
#include <gtest/gtest.h>

#include <sqlite3.h>
#include <QApplication>
#include <QCheckBox>
#include <QComboBox>
#include <QDoubleSpinBox>
#include <QGraphicsSimpleTextItem>
#include <QLabel>
#include <QLineEdit>
#include <QPlainTextEdit>
#include <QPushButton>
#include <QSpinBox>
#include <QStandardItemModel>
#include <QTableView>
#include <QTableWidget>
#include <QtCharts/QChartView>
#include <QtCharts/QLineSeries>
#include <QtCharts/QScatterSeries>
#include <QtCharts/QValueAxis>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "core/io/config_json.h"
#include "core/model/config.h"
#include "core/store/run_store.h"
#include "core/text/char_tokenizer.h"
#include "core/train/train_config.h"
#include "datasets/registry.h"
#include "datasets/synthetic.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/ops_matmul_bf16.h"
#include "test_util.h"
#include "views/benchmarks_view.h"
#include "views/compute_view.h"
#include "views/frontier_chart.h"
#include "views/generations_view.h"
#include "views/metric_cache.h"
#include "views/run_list_model.h"
#include "views/runs_view.h"
#include "views/store_poller.h"
#include "views/train_view.h"

using ftx::BenchBatch;
using ftx::GenerationsView;
using ftx::ReferenceRows;
using ftx::RunListModel;
using ftx::RunSummary;
using ftx::RunsView;
using ftx::StorePoller;
using ftx::summarize_run;
using ftx::TrainView;

// Readable QString (and QStringList) values in failure messages; found by argument-dependent lookup.
void PrintTo(const QString& s, std::ostream* os) { *os << '"' << s.toStdString() << '"'; }

namespace {

// Kappa values are compared after float storage (TrainRequest, stored configs hold floats).
constexpr double kFloatTol = 1e-6;
constexpr double kDoubleTol = 1e-12;
constexpr int kNewestOverlaid = 4;                // RunListModel overlays this many newest runs the first time
const QString kDefaultKappa = "1/8";              // TrainView's kappa field at start
const QString kDefaultSweep = "1/64, 1/8, 1, 8";  // TrainView's sweep field at start
const QString kDefaultPrompt = "K>";              // GenerationsView's prompt at start
std::shared_ptr<const ftx::Tokenizer> synthetic_tokenizer() {
  return std::make_shared<ftx::CharTokenizer>(ftx::kSyntheticAlphabet);  // "_!>A..Z"
}
constexpr int kDefaultFixedGroups = 3, kDefaultGroupSize = 8;  // GenerationsView's spin boxes

RunSummary make_run(int64_t id, const std::string& name, const QString& dataset = "synthetic",
                    const QString& preset = "small", int latent_bits = 8, double kappa_bits = 0.125, int steps = 1000) {
  RunSummary r;
  r.info.id = id;
  r.info.name = name;
  r.info.status = "finished";
  r.dataset = dataset;
  r.preset = preset;
  r.latent_bits = latent_bits;
  r.kappa_bits = kappa_bits;
  r.steps = steps;
  return r;
}

std::vector<RunSummary> runs_with_ids(const std::vector<int64_t>& ids) {
  std::vector<RunSummary> runs;
  for (int64_t id : ids) runs.push_back(make_run(id, "run-" + std::to_string(id)));
  return runs;
}

int row_of(const RunListModel& model, int64_t id) {
  for (int row = 0; row < model.rowCount(); ++row)
    if (model.run_at(row)->info.id == id) return row;
  return -1;
}

QPushButton* button(QWidget* parent, const QString& text) {
  for (QPushButton* b : parent->findChildren<QPushButton*>())
    if (b->text() == text) return b;
  ADD_FAILURE() << "no button '" << text.toStdString() << "'";
  return nullptr;
}

// Spin boxes hold QLineEdits too: pick the form's own field by a property of it.
QLineEdit* line_edit(QWidget* parent, const std::function<bool(QLineEdit*)>& is_it, const char* what) {
  for (QLineEdit* e : parent->findChildren<QLineEdit*>())
    if (is_it(e)) return e;
  ADD_FAILURE() << "no line edit: " << what;
  return nullptr;
}

QLineEdit* line_edit_with_text(QWidget* parent, const QString& text) {
  return line_edit(
      parent, [&](QLineEdit* e) { return e->text() == text; }, text.toUtf8().constData());
}

// Types `text` over the field's content as a user would: unlike setText, this emits textEdited.
void type_over(QLineEdit* e, const QString& text) {
  int edits = 0;
  const auto counter = QObject::connect(e, &QLineEdit::textEdited, [&] { ++edits; });
  e->selectAll();
  e->insert(text);
  QObject::disconnect(counter);
  EXPECT_GT(edits, 0) << "typing must look like a user edit";
}

// The texts of every label of the widget joined, for "the message line says ...".
QString label_texts(QWidget* parent) {
  QStringList texts;
  for (QLabel* l : parent->findChildren<QLabel*>()) texts << l->text();
  return texts.join('\n');
}

// TrainView with its start_requested emissions recorded.
struct TrainHarness {
  TrainView view;
  std::vector<std::vector<ftx::TrainRequest>> started;
  TrainHarness() {
    QObject::connect(&view, &TrainView::start_requested,
                     [this](std::vector<ftx::TrainRequest> r) { started.push_back(std::move(r)); });
  }
};

// GenerationsView with one run listed, the synthetic task's tokenizer, and its requests recorded.
struct GenerationsHarness {
  struct Figure4 {
    QString run;
    int step;
    ftx::Figure4Request req;
  };
  GenerationsView view;
  std::vector<Figure4> figure4;
  int comparisons = 0;
  GenerationsHarness() {
    QObject::connect(&view, &GenerationsView::figure4_requested,
                     [this](QString run, int step, ftx::Figure4Request req) {
                       figure4.push_back({run, step, req});
                     });
    QObject::connect(&view, &GenerationsView::comparison_requested,
                     [this](QStringList, ftx::Figure4Request) { ++comparisons; });
    view.set_runs({"run-a", "run-b"});
    view.set_tokenizer(synthetic_tokenizer());
  }
  QLineEdit* prompt() {
    return line_edit(
        &view, [](QLineEdit* e) { return e->toolTip().contains("prompt"); }, "prompt");
  }
  void resample() {
    if (QPushButton* b = button(&view, "Resample Z")) b->click();
  }
};

}  // namespace

// ---------------------------------------------------------------------------------------------
// RunListModel

TEST(RunListModel, FirstRunsOverlayTheNewestFour) {
  RunListModel model(nullptr);
  model.set_runs(runs_with_ids({1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(model.overlaid_ids(), (std::vector<int64_t>{3, 4, 5, 6}));
  EXPECT_EQ(static_cast<int>(model.overlaid_ids().size()), kNewestOverlaid);
  // Only the first list does that: a later new run is not overlaid by itself.
  model.set_runs(runs_with_ids({1, 2, 3, 4, 5, 6, 7}));
  EXPECT_FALSE(model.overlaid(7));
}

TEST(RunListModel, OverlayAndColourSurviveSetRunsWithSameIds) {
  RunListModel model(nullptr);
  model.set_runs(runs_with_ids({1, 2, 3}));  // all three overlaid
  const QColor chosen(12, 34, 56);
  model.set_overlaid(2, false);
  model.set_overlaid(1, true);
  model.set_colour(3, chosen);
  const QColor default_of_1 = model.colour(1);

  // The poller sends the same runs again, reordered and with one renamed.
  std::vector<RunSummary> again = runs_with_ids({3, 1, 2});
  again[0].info.name = "renamed";
  model.set_runs(again);

  EXPECT_TRUE(model.overlaid(1));
  EXPECT_FALSE(model.overlaid(2));
  EXPECT_TRUE(model.overlaid(3));
  EXPECT_EQ(model.overlaid_ids(), (std::vector<int64_t>{3, 1})) << "in table order";
  EXPECT_EQ(model.colour(3), chosen);
  EXPECT_EQ(model.colour(1), default_of_1);
  const QModelIndex swatch = model.index(row_of(model, 3), RunListModel::kColour);
  EXPECT_EQ(model.data(swatch, Qt::DecorationRole).value<QColor>(), chosen);
  const QModelIndex check = model.index(row_of(model, 2), RunListModel::kOverlay);
  EXPECT_EQ(model.data(check, Qt::CheckStateRole).toInt(), static_cast<int>(Qt::Unchecked));
}

TEST(RunListModel, OverlayOfARunThatLeftTheStoreIsDropped) {
  RunListModel model(nullptr);
  model.set_runs(runs_with_ids({1, 2}));
  ASSERT_TRUE(model.overlaid(2));
  model.set_runs(runs_with_ids({1}));  // run 2 deleted
  EXPECT_EQ(model.overlaid_ids(), (std::vector<int64_t>{1}));
  model.set_runs(runs_with_ids({1, 2}));  // an id coming back is a new run: not overlaid
  EXPECT_FALSE(model.overlaid(2));
}

TEST(RunListModel, DefaultColoursDifferBetweenNeighbouringRuns) {
  RunListModel model(nullptr);
  model.set_runs(runs_with_ids({1, 2, 3}));
  EXPECT_NE(model.colour(1), model.colour(2));
  EXPECT_NE(model.colour(2), model.colour(3));
  EXPECT_TRUE(model.colour(1).isValid());
}

TEST(RunListModel, RenameEmitsRequestAndLeavesTheModelUnchanged) {
  RunListModel model(nullptr);
  model.set_runs(runs_with_ids({7, 8}));
  std::vector<std::pair<qint64, QString>> requests;
  QObject::connect(&model, &RunListModel::rename_requested,
                   [&](qint64 id, QString name) { requests.emplace_back(id, name); });
  const QModelIndex name_cell = model.index(row_of(model, 8), RunListModel::kName);

  const bool stored = model.setData(name_cell, QString("  kappa-sweep-1  "), Qt::EditRole);

  EXPECT_FALSE(stored) << "the store renames; the poller brings the new name";
  ASSERT_EQ(requests.size(), 1u);
  EXPECT_EQ(requests[0].first, 8);
  EXPECT_EQ(requests[0].second, "kappa-sweep-1") << "trimmed";
  EXPECT_EQ(model.data(name_cell, Qt::DisplayRole).toString(), "run-8");
  EXPECT_EQ(model.run_at(name_cell.row())->info.name, "run-8");
}

TEST(RunListModel, RenameToBlankOrTheSameNameRequestsNothing) {
  RunListModel model(nullptr);
  model.set_runs(runs_with_ids({7}));
  int requests = 0;
  QObject::connect(&model, &RunListModel::rename_requested, [&](qint64, QString) { ++requests; });
  const QModelIndex name_cell = model.index(0, RunListModel::kName);
  model.setData(name_cell, QString("   "), Qt::EditRole);
  model.setData(name_cell, QString("run-7"), Qt::EditRole);
  model.setData(name_cell, QString(" run-7 "), Qt::EditRole);
  model.setData(model.index(0, RunListModel::kStatus), QString("other"), Qt::EditRole);  // not editable
  EXPECT_EQ(requests, 0);
}

TEST(RunListModel, OverlayCheckBoxTogglesAndNotifies) {
  RunListModel model(nullptr);
  model.set_runs(runs_with_ids({1}));
  int notices = 0;
  QObject::connect(&model, &RunListModel::overlay_changed, [&] { ++notices; });
  const QModelIndex check = model.index(0, RunListModel::kOverlay);
  ASSERT_TRUE(model.overlaid(1));

  EXPECT_TRUE(model.setData(check, static_cast<int>(Qt::Unchecked), Qt::CheckStateRole));
  EXPECT_FALSE(model.overlaid(1));
  EXPECT_EQ(model.data(check, Qt::CheckStateRole).toInt(), static_cast<int>(Qt::Unchecked));
  EXPECT_TRUE(model.setData(check, static_cast<int>(Qt::Checked), Qt::CheckStateRole));
  EXPECT_TRUE(model.overlaid(1));
  EXPECT_EQ(notices, 2);
}

TEST(RunListModel, OnlyTheNameIsEditableAndOnlyTheOverlayCheckable) {
  RunListModel model(nullptr);
  model.set_runs(runs_with_ids({1}));
  for (int col = 0; col < RunListModel::kColumns; ++col) {
    const Qt::ItemFlags f = model.flags(model.index(0, col));
    EXPECT_EQ(f.testFlag(Qt::ItemIsEditable), col == RunListModel::kName) << "column " << col;
    EXPECT_EQ(f.testFlag(Qt::ItemIsUserCheckable), col == RunListModel::kOverlay) << "column " << col;
  }
}

TEST(RunListModel, ShowsKappaForFreeRunsAndFinalValuesFromTheCache) {
  constexpr int64_t kFree = 1, kBaseline = 2;
  constexpr int kTotalSteps = 1000, kLastStep = 250;
  ftx::MetricCache cache;
  cache.append(kFree,
               {{100, "train/ce", 3.0, 0.0}, {kLastStep, "train/ce", 2.5, 0.0}, {kLastStep, "train/kl", 0.0866, 0.0}});
  RunListModel model(&cache);
  model.set_runs({make_run(kFree, "free", "synthetic", "small", 8, 0.125, kTotalSteps),
                  make_run(kBaseline, "baseline", "synthetic", "small", 0, 0.125, kTotalSteps)});
  auto text = [&](int64_t id, int col) {
    return model.data(model.index(row_of(model, id), col), Qt::DisplayRole).toString();
  };

  EXPECT_EQ(text(kFree, RunListModel::kKappa), "1/8");
  EXPECT_EQ(text(kBaseline, RunListModel::kKappa), "–") << "a baseline has no kappa";
  EXPECT_EQ(text(kFree, RunListModel::kFreeBits), "per pair");  // make_run's summary keeps the default
  EXPECT_EQ(text(kBaseline, RunListModel::kFreeBits), "–");
  EXPECT_EQ(text(kFree, RunListModel::kRouting), "–") << "every block dense";
  EXPECT_EQ(text(kFree, RunListModel::kSteps), QString("%1 / %2").arg(kLastStep).arg(kTotalSteps));
  EXPECT_EQ(text(kBaseline, RunListModel::kSteps), QString("0 / %1").arg(kTotalSteps));
  EXPECT_EQ(text(kFree, RunListModel::kCe), "2.5000");
  EXPECT_EQ(text(kFree, RunListModel::kKl), "0.0866");
  EXPECT_TRUE(text(kBaseline, RunListModel::kCe).isEmpty());
  EXPECT_EQ(text(kFree, RunListModel::kJob), "–") << "a run from before the job rows";
  cache.append(kFree, {{0, "job/processes", 1, 0.0}, {0, "job/gpus", 0, 0.0}});
  EXPECT_EQ(text(kFree, RunListModel::kJob), "1 × CPU");
  cache.append(kFree, {{kLastStep, "job/processes", 8, 0.0}, {kLastStep, "job/gpus", 8, 0.0}});
  EXPECT_EQ(text(kFree, RunListModel::kJob), "8 × GPU") << "resumed as a job of 8: the last start counts";
  cache.append(kBaseline, {{0, "job/processes", 2, 0.0}, {0, "job/gpus", 1, 0.0}});
  EXPECT_EQ(text(kBaseline, RunListModel::kJob), "2 proc, 1 GPU");
}

// ---------------------------------------------------------------------------------------------
// RunsView

namespace {

// Three runs a filter can tell apart by dataset and preset.
std::vector<RunSummary> three_runs() {
  return {make_run(1, "alpha", "synthetic", "small"), make_run(2, "beta", "coinflip", "tiny"),
          make_run(3, "gamma", "synthetic", "tiny")};
}

QTableView* table_of(RunsView& view) {
  auto* t = view.findChild<QTableView*>();
  EXPECT_NE(t, nullptr);
  return t;
}

QLineEdit* filter_of(RunsView& view) {
  return line_edit(
      &view, [](QLineEdit* e) { return e->placeholderText().startsWith("Filter"); }, "filter");
}

QStringList shown_names(QTableView* table) {
  QStringList names;
  for (int row = 0; row < table->model()->rowCount(); ++row)
    names << table->model()->index(row, RunListModel::kName).data().toString();
  return names;
}

}  // namespace

TEST(RunsView, TextFilterHidesNonMatchingRows) {
  RunListModel model(nullptr);
  RunsView view(&model);
  model.set_runs(three_runs());
  QTableView* table = table_of(view);
  QLineEdit* filter = filter_of(view);
  ASSERT_TRUE(table && filter);
  ASSERT_EQ(table->model()->rowCount(), 3);

  filter->setText("COIN");  // case-insensitive, matches the dataset column
  EXPECT_EQ(shown_names(table), QStringList{"beta"});
  filter->setText("tiny");  // the preset column
  EXPECT_EQ(shown_names(table).size(), 2);
  EXPECT_FALSE(shown_names(table).contains("alpha"));
  filter->setText("no such run");
  EXPECT_EQ(table->model()->rowCount(), 0);
  filter->clear();
  EXPECT_EQ(table->model()->rowCount(), 3);
  EXPECT_EQ(model.rowCount(), 3) << "filtering never touches the model";
}

TEST(RunsView, SelectionThroughTheFilterNamesTheRightRun) {
  RunListModel model(nullptr);
  RunsView view(&model);
  model.set_runs(three_runs());
  QTableView* table = table_of(view);
  QLineEdit* filter = filter_of(view);
  ASSERT_TRUE(table && filter);
  EXPECT_TRUE(view.current_run().isEmpty()) << "nothing selected yet";

  filter->setText("gamma");  // the only row shown is the model's third
  ASSERT_EQ(table->model()->rowCount(), 1);
  table->setCurrentIndex(table->model()->index(0, RunListModel::kName));
  EXPECT_EQ(view.current_run(), "gamma");
}

TEST(RunsView, GenerationsAndLatentButtonsOpenTheSelectedRun) {
  RunListModel model(nullptr);
  RunsView view(&model);
  model.set_runs(three_runs());
  QStringList generations, latent;
  QObject::connect(&view, &RunsView::open_generations, [&](QString run) { generations << run; });
  QObject::connect(&view, &RunsView::open_latent, [&](QString run) { latent << run; });
  QPushButton* gens = button(&view, "Generations");
  QPushButton* lat = button(&view, "Latent");
  QTableView* table = table_of(view);
  ASSERT_TRUE(gens && lat && table);

  gens->click();  // no selection: nothing to open
  lat->click();
  EXPECT_TRUE(generations.isEmpty());
  EXPECT_TRUE(latent.isEmpty());

  table->setCurrentIndex(table->model()->index(1, RunListModel::kName));
  gens->click();
  lat->click();
  EXPECT_EQ(generations, QStringList{"beta"});
  EXPECT_EQ(latent, QStringList{"beta"});
}

TEST(RunsView, CountsRunsAlreadyInTheModel) {
  RunListModel model(nullptr);
  model.set_runs(three_runs());
  RunsView view(&model);
  EXPECT_TRUE(label_texts(&view).contains("3 runs")) << label_texts(&view).toStdString();
}

TEST(RunsView, NumericColumnsSortAsNumbers) {
  RunListModel model(nullptr);
  RunsView view(&model);
  std::vector<RunSummary> runs = {
      make_run(1, "k8", "synthetic", "small", 8, 8.0), make_run(2, "k16", "synthetic", "small", 8, 16.0),
      make_run(3, "k0.5", "synthetic", "small", 8, 0.5), make_run(4, "base", "synthetic", "small", 0, 0.0)};
  model.set_runs(runs);
  QTableView* table = table_of(view);
  ASSERT_TRUE(table);
  table->sortByColumn(RunListModel::kKappa, Qt::AscendingOrder);
  EXPECT_EQ(shown_names(table), (QStringList{"base", "k0.5", "k8", "k16"})) << "as text, \"16\" sorts before \"8\"";
  table->sortByColumn(RunListModel::kKappa, Qt::DescendingOrder);
  EXPECT_EQ(shown_names(table), (QStringList{"k16", "k8", "k0.5", "base"}));
  table->sortByColumn(RunListModel::kName, Qt::AscendingOrder);
  EXPECT_EQ(shown_names(table), (QStringList{"base", "k0.5", "k16", "k8"})) << "text columns sort as text";
}

TEST(RunsView, CountsTheRunsOfTheStore) {
  RunListModel model(nullptr);
  RunsView view(&model);
  model.set_runs(three_runs());
  EXPECT_TRUE(label_texts(&view).contains("3 runs")) << label_texts(&view).toStdString();
  model.set_runs(runs_with_ids({1}));
  EXPECT_TRUE(label_texts(&view).contains("1 runs")) << label_texts(&view).toStdString();
}

// ---------------------------------------------------------------------------------------------
// summarize_run

TEST(SummarizeRun, ReadsAConfigWrittenByTheTrainer) {
  constexpr int kBits = 6, kSteps = 1234;
  constexpr double kKappaBits = 0.25;
  ftx::ModelConfig m = *ftx::model_preset("tiny");
  m.latent_bits = kBits;
  ftx::TrainConfig t;
  t.dataset = "coinflip";
  t.preset = "tiny";
  t.steps = kSteps;
  t.kappa_nats = static_cast<float>(ftx::bits_to_nats(kKappaBits));
  ftx::RunInfo info;
  info.id = 42;
  info.name = "coin-run";
  info.status = "running";
  info.config_json = nlohmann::json{{"model", ftx::config_to_json(m)}, {"train", ftx::train_config_to_json(t)}}.dump();

  const RunSummary r = summarize_run(info);
  EXPECT_EQ(r.info.id, 42);
  EXPECT_EQ(r.info.name, "coin-run");
  EXPECT_EQ(r.dataset, "coinflip");
  EXPECT_EQ(r.preset, "tiny");
  EXPECT_EQ(r.steps, kSteps);
  EXPECT_EQ(r.latent_bits, kBits);
  EXPECT_NEAR(r.kappa_bits, kKappaBits, kFloatTol);
  EXPECT_EQ(r.free_bits_label, "batch mean (Kingma)");  // a new run's form

  // A row written before the option has no "free_bits": it was trained per pair.
  nlohmann::json old = nlohmann::json::parse(info.config_json);
  old["train"].erase("free_bits");
  info.config_json = old.dump();
  EXPECT_EQ(summarize_run(info).free_bits_label, "per pair");
}

TEST(SummarizeRun, BaselineConfigHasNoLatentBits) {
  ftx::ModelConfig m = *ftx::model_preset("tiny");
  m.latent_bits = 0;  // config_to_json writes no free_transformer object
  ftx::RunInfo info;
  info.config_json = nlohmann::json{{"model", ftx::config_to_json(m)}, {"train", ftx::train_config_to_json({})}}.dump();
  EXPECT_EQ(summarize_run(info).latent_bits, 0);
  EXPECT_EQ(summarize_run(info).dataset, "synthetic");
}

TEST(SummarizeRun, RoutedRunShowsItsRouterAndCapacity) {
  ftx::ModelConfig m = *ftx::model_preset("small");
  m.routing.kind = ftx::Routing::Stt, m.routing.capacity = 0.25f;
  ftx::RunInfo info;
  info.config_json = nlohmann::json{{"model", ftx::config_to_json(m)}, {"train", ftx::train_config_to_json({})}}.dump();
  EXPECT_EQ(summarize_run(info).routing, "stt 0.25");
  m.routing = {};
  info.config_json = nlohmann::json{{"model", ftx::config_to_json(m)}, {"train", ftx::train_config_to_json({})}}.dump();
  EXPECT_EQ(summarize_run(info).routing, "–");
}

TEST(SummarizeRun, BadJsonKeepsTheRunWithDefaults) {
  ftx::RunInfo info;
  info.id = 9;
  info.name = "broken";
  info.config_json = "{not json";
  const RunSummary r = summarize_run(info);
  EXPECT_EQ(r.info.id, 9);
  EXPECT_EQ(r.info.name, "broken");
  EXPECT_EQ(r.steps, 0);
  EXPECT_EQ(r.latent_bits, 0);
  EXPECT_TRUE(r.dataset.isEmpty());
}

TEST(SummarizeRun, WrongTypesListTheRunWithTheReason) {
  ftx::RunInfo info;
  info.name = "edited";
  info.config_json = R"({"train": {"dataset": "synthetic", "preset": "small", "steps": "many"}})";
  const RunSummary r = summarize_run(info);  // must not throw
  EXPECT_EQ(r.info.name, "edited");
  EXPECT_EQ(r.steps, 0);
  EXPECT_NE(r.config_error.toStdString().find("steps"), std::string::npos) << r.config_error.toStdString();
}

TEST(SummarizeRun, ARowWithoutTrainingConfigIsNotATrainedRun) {
  ftx::RunInfo info;
  info.config_json = R"({"samples": 4})";  // what ftx eval --score-samples records
  const RunSummary r = summarize_run(info);
  EXPECT_TRUE(r.config_error.isEmpty()) << r.config_error.toStdString();
  EXPECT_TRUE(r.dataset.isEmpty());
  EXPECT_EQ(r.latent_bits, 0);
}

// ---------------------------------------------------------------------------------------------
// TrainView

TEST(TrainView, StartRefusesABadKappaAndNamesIt) {
  TrainHarness h;
  QLineEdit* kappa = line_edit_with_text(&h.view, kDefaultKappa);
  QPushButton* start = button(&h.view, "Start");
  ASSERT_TRUE(kappa && start);
  ASSERT_TRUE(start->isEnabled());

  kappa->setText("abc");
  EXPECT_FALSE(kappa->styleSheet().isEmpty()) << "the field is marked as it is typed";
  start->click();
  EXPECT_TRUE(h.started.empty());
  EXPECT_TRUE(label_texts(&h.view).contains("kappa 'abc' is not a number of bits"))
      << label_texts(&h.view).toStdString();
}

// The form's custom size and `ftx train` with the same flags make the same model: the form fills
// a ShapeOverrides, core::Session shapes it with shape_model_config as the CLI does. (Before, the
// form derived the FFN width from D itself: 256 for D = 96 where `ftx train --dim 96` kept 344.)
TEST(TrainView, CustomSizeMakesTheModelThatFtxTrainMakes) {
  ftx::test::TempDir dir("ftx_test_views_");
  TrainHarness h;
  auto* preset = h.view.findChild<QComboBox*>("preset");
  auto* layers = h.view.findChild<QSpinBox*>("layers");
  auto* dim = h.view.findChild<QSpinBox*>("dim");
  auto* heads = h.view.findChild<QSpinBox*>("heads");
  auto* bits = h.view.findChild<QSpinBox*>("latent_bits");
  ASSERT_TRUE(preset && layers && dim && heads && bits);
  EXPECT_EQ(preset->currentText(), "small");
  QStringList items;
  for (int i = 0; i < preset->count(); ++i) items << preset->itemText(i);
  EXPECT_EQ(items, (QStringList{"tiny", "small", "ft-1.5b", "ft-8b", "custom"})) << "model_preset_names(), then custom";
  preset->setCurrentText("custom");
  layers->setValue(3), dim->setValue(96), heads->setValue(3), bits->setValue(4);
  h.view.set_db_path(QString::fromStdString(dir / "form.db"));
  h.view.set_run_name("form");
  button(&h.view, "Start")->click();
  ASSERT_EQ(h.started.size(), 1u) << label_texts(&h.view).toStdString();
  ftx::TrainRequest r = h.started[0][0];
  const ftx::Status prepared = ftx::prepare_request(ftx::make_dataset, r);
  ASSERT_TRUE(prepared.ok()) << prepared.error().message;
  EXPECT_EQ(r.model.dim, 96);
  EXPECT_EQ(r.model.ffn_hidden, ftx::model_preset("small")->ffn_hidden);

  const std::string db = dir / "cli.db";
  const ftx::test::Outcome cli = ftx::test::run_child(
      ftx::test::ftx_argv(
          {"train", "--db",          db,  "--run",   "cli", "--layers", "3", "--dim",        "96", "--heads",
           "3",     "--latent-bits", "4", "--steps", "1",   "--batch",  "2", "--eval-every", "0",  "--checkpoint-every",
           "0",     "--quiet"}),
      {"OMP_NUM_THREADS=1"}, dir.path());
  ASSERT_EQ(cli.code, 0) << cli.err;
  auto store = ftx::RunStore::open_readonly(db);
  ASSERT_TRUE(store.ok()) << store.error().message;
  auto info = store->find_run("cli");
  ASSERT_TRUE(info.ok()) << info.error().message;
  const auto data = ftx::make_dataset(r.train);
  EXPECT_EQ(nlohmann::json::parse(info->config_json)["model"], ftx::config_to_json(r.model, &data->tokenizer()));
}

TEST(TrainView, StartWithAValidFormRequestsOneRun) {
  constexpr double kKappaBits = 0.5;
  TrainHarness h;
  QLineEdit* kappa = line_edit_with_text(&h.view, kDefaultKappa);
  QPushButton* start = button(&h.view, "Start");
  ASSERT_TRUE(kappa && start);
  kappa->setText("1/2");
  EXPECT_TRUE(kappa->styleSheet().isEmpty());
  h.view.set_db_path("/tmp/runs.db");
  h.view.set_run_name("  my-run ");
  h.view.set_steps(400);

  start->click();
  ASSERT_EQ(h.started.size(), 1u);
  ASSERT_EQ(h.started[0].size(), 1u);
  const ftx::TrainRequest& r = h.started[0][0];
  EXPECT_EQ(r.run, "my-run");
  EXPECT_EQ(r.db_path, "/tmp/runs.db");
  EXPECT_EQ(r.train.steps, 400);
  EXPECT_EQ(r.train.dataset, "synthetic");
  EXPECT_NEAR(r.train.kappa_nats, ftx::bits_to_nats(kKappaBits), kFloatTol);
  EXPECT_LE(r.train.eval_every, r.train.steps / 4) << "a short run still evaluates a few times";
}

// The routing row: off by default (capacity greyed out); a router and its capacity go into the
// request as ftx train's --routing and --capacity.
TEST(TrainView, RoutingRowRequestsARoutedRun) {
  TrainHarness h;
  auto* routing = h.view.findChild<QComboBox*>("routing");
  auto* capacity = h.view.findChild<QDoubleSpinBox*>("capacity");
  ASSERT_TRUE(routing && capacity);
  EXPECT_EQ(routing->currentText(), "none");
  EXPECT_FALSE(capacity->isEnabled());
  routing->setCurrentText("sdt");
  EXPECT_TRUE(capacity->isEnabled());
  capacity->setValue(0.25);
  h.view.set_db_path("/tmp/runs.db");
  button(&h.view, "Start")->click();
  ASSERT_EQ(h.started.size(), 1u);
  const ftx::TrainRequest& r = h.started[0][0];
  EXPECT_EQ(r.shape.routing, "sdt");
  EXPECT_FLOAT_EQ(r.shape.route.capacity, 0.25f);
  auto cfg = ftx::shape_model_config(r.shape, 29, 64);
  ASSERT_TRUE(cfg.ok()) << cfg.error().message;
  EXPECT_EQ(cfg->routing.kind, ftx::Routing::Sdt);

  // threshold mode: only for sdt and stt; it turns the capacity off and sends its g_th
  auto* threshold = h.view.findChild<QCheckBox*>("threshold");
  auto* g_th = h.view.findChild<QDoubleSpinBox*>("g_th");
  ASSERT_TRUE(threshold && g_th);
  routing->setCurrentText("mod");
  EXPECT_FALSE(threshold->isEnabled());
  routing->setCurrentText("stt");
  EXPECT_TRUE(threshold->isEnabled());
  EXPECT_FALSE(g_th->isEnabled());
  threshold->setChecked(true);
  EXPECT_TRUE(g_th->isEnabled());
  EXPECT_FALSE(capacity->isEnabled());
  g_th->setValue(0.6);
  button(&h.view, "Start")->click();
  ASSERT_EQ(h.started.size(), 2u);
  auto stt = ftx::shape_model_config(h.started[1][0].shape, 29, 64);
  ASSERT_TRUE(stt.ok()) << stt.error().message;
  EXPECT_EQ(stt->routing.mode, ftx::RouteMode::Threshold);
  EXPECT_FLOAT_EQ(stt->routing.g_th, 0.6f);
}

// Fine-tuning from the form: the text dataset needs its token file (refused without one), a model
// to start from turns the size fields off and lends its recorded kappa (ftx upcycle --kappa-bits),
// and the request carries the file, the sequence length and the model as ftx train's options do.
TEST(TrainView, TextFromAModelFileRequestsAFineTune) {
  ftx::test::TempDir dir("ftx_test_views_");
  const std::string model = dir / "smol-ft16";
  std::filesystem::create_directories(model);
  std::ofstream(model + "/upcycle.json") << R"({"train": {"kappa_nats": 0.34657359}})";
  TrainHarness h;
  auto* dataset = h.view.findChild<QComboBox*>("dataset");
  auto* data = h.view.findChild<QLineEdit*>("text_data");
  auto* seq_len = h.view.findChild<QSpinBox*>("seq_len");
  auto* init = h.view.findChild<QLineEdit*>("init_from");
  auto* preset = h.view.findChild<QComboBox*>("preset");
  auto* bits = h.view.findChild<QSpinBox*>("latent_bits");
  QLineEdit* kappa = line_edit_with_text(&h.view, kDefaultKappa);
  ASSERT_TRUE(dataset && data && seq_len && init && preset && bits && kappa);
  EXPECT_FALSE(data->isEnabled()) << "the token file is for the text dataset only";
  dataset->setCurrentIndex(dataset->findData("text"));
  EXPECT_TRUE(data->isEnabled());
  button(&h.view, "Start")->click();
  EXPECT_TRUE(h.started.empty()) << "no token file, no run";
  EXPECT_TRUE(label_texts(&h.view).contains("token file"));

  data->setText("  /data/stdlib.tok ");
  seq_len->setValue(128);
  init->setText(QString::fromStdString(model));
  emit init->editingFinished();
  EXPECT_FALSE(preset->isEnabled() || bits->isEnabled()) << "the shape is the file's";
  EXPECT_NEAR(ftx::bits_to_nats(ftx::parse_kappa_bits(kappa->text().toStdString()).value()), 0.34657359, 1e-6);
  button(&h.view, "Start")->click();
  ASSERT_EQ(h.started.size(), 1u);
  const ftx::TrainRequest& r = h.started[0][0];
  EXPECT_EQ(r.train.dataset, "text");
  EXPECT_EQ(r.train.dataset_options["text_data"], "/data/stdlib.tok");
  EXPECT_EQ(r.train.dataset_options["text_seq_len"], 128);
  EXPECT_EQ(r.train.init_from, model);
  EXPECT_NEAR(r.train.kappa_nats, 0.34657359, 1e-6);
  EXPECT_NE(r.run.find("smol-ft16"), std::string::npos) << r.run;
  init->clear();
  EXPECT_TRUE(preset->isEnabled() && bits->isEnabled());
}

// The Device combo: CPU, CPU with bf16 GEMMs (saying whether they are faster here), CUDA, CUDA with
// bf16 GEMMs (the last two only when the build has CUDA).
TEST(TrainView, DeviceChoiceSetsDeviceAndPrecision) {
  TrainHarness h;
  QComboBox* device = nullptr;
  for (QComboBox* c : h.view.findChildren<QComboBox*>())
    if (c->count() > 0 && c->itemData(0).toString() == "cpu") device = c;
  QPushButton* start = button(&h.view, "Start");
  ASSERT_TRUE(device && start);
  ASSERT_EQ(device->count(), 4);
  const bool tiles = ftx::cpu::cpu_isa() == ftx::cpu::CpuIsa::Amx, vdp = ftx::cpu::bf16_inputs_on_vdp();
  EXPECT_EQ(device->itemText(1).contains("AMX tiles"), tiles) << device->itemText(1).toStdString();
  EXPECT_EQ(device->itemText(1).contains("VDPBF16PS"), vdp) << device->itemText(1).toStdString();
  EXPECT_EQ(device->itemText(1).contains("no faster than fp32"), !tiles && !vdp) << device->itemText(1).toStdString();
  EXPECT_EQ(device->itemData(1, Qt::ToolTipRole).toString(), QString("GEMMs: ") + ftx::cpu::bf16_inputs_engine());
  h.view.set_cuda_available(false);
  auto* items = qobject_cast<QStandardItemModel*>(device->model());
  ASSERT_TRUE(items);
  EXPECT_TRUE(items->item(1)->isEnabled());
  EXPECT_FALSE(items->item(3)->isEnabled());
  EXPECT_TRUE(device->itemText(3).contains("not in this build"));
  EXPECT_FALSE(device->itemText(1).contains("not in this build"));
  h.view.set_cuda_available(true);
  EXPECT_TRUE(items->item(3)->isEnabled());
  h.view.set_db_path("/tmp/runs.db");
  const std::pair<const char*, const char*> expect[] = {{"cpu", ""}, {"cpu", "bf16"}, {"cuda", ""}, {"cuda", "bf16"}};
  for (int i = 0; i < 4; ++i) {
    device->setCurrentIndex(i);
    start->click();
    ASSERT_EQ(h.started.size(), size_t(i + 1));
    EXPECT_EQ(h.started[i][0].device, expect[i].first) << device->itemText(i).toStdString();
    EXPECT_EQ(h.started[i][0].precision, expect[i].second) << device->itemText(i).toStdString();
  }
}

TEST(TrainView, SweepRequestsOneRunPerKappaInOrder) {
  TrainHarness h;
  h.view.set_run_name("sweep");
  QPushButton* sweep = button(&h.view, "Start κ sweep");
  ASSERT_TRUE(sweep);
  sweep->click();
  ASSERT_EQ(h.started.size(), 1u) << label_texts(&h.view).toStdString();
  const std::vector<ftx::TrainRequest>& runs = h.started[0];
  const double expected_bits[] = {1.0 / 64, 1.0 / 8, 1.0, 8.0};
  ASSERT_EQ(runs.size(), 4u);
  for (size_t i = 0; i < runs.size(); ++i) {
    EXPECT_NEAR(runs[i].train.kappa_nats, ftx::bits_to_nats(expected_bits[i]), kFloatTol) << i;
    EXPECT_EQ(runs[i].run, std::string("sweep-") + ftx::kappa_run_suffix(expected_bits[i]))
        << "as ftx sweep names them";
    for (size_t j = 0; j < i; ++j) EXPECT_NE(runs[i].run, runs[j].run) << "run names must differ";
  }
}

TEST(TrainView, SweepWithABadListStartsNothing) {
  TrainHarness h;
  QLineEdit* list = line_edit_with_text(&h.view, kDefaultSweep);
  QPushButton* sweep = button(&h.view, "Start κ sweep");
  ASSERT_TRUE(list && sweep);
  list->setText("1/64, eight");
  EXPECT_FALSE(list->styleSheet().isEmpty());
  sweep->click();
  EXPECT_TRUE(h.started.empty());
  EXPECT_TRUE(label_texts(&h.view).contains("sweep '1/64, eight'")) << label_texts(&h.view).toStdString();
}

TEST(TrainView, RunControlsFollowTheSessionState) {
  TrainHarness h;
  int pauses = 0, stops = 0, resumes = 0;
  std::vector<float> kappas;
  QObject::connect(&h.view, &TrainView::pause_requested, [&] { ++pauses; });
  QObject::connect(&h.view, &TrainView::stop_requested, [&] { ++stops; });
  QObject::connect(&h.view, &TrainView::resume_requested, [&] { ++resumes; });
  QObject::connect(&h.view, &TrainView::kappa_requested, [&](float k) { kappas.push_back(k); });
  QPushButton *start = button(&h.view, "Start"), *pause = button(&h.view, "Pause"), *stop = button(&h.view, "Stop"),
              *resume = button(&h.view, "Resume"), *set_kappa = button(&h.view, "Set κ now");
  ASSERT_TRUE(start && pause && stop && resume && set_kappa);

  pause->click();  // idle: nothing to pause or stop
  stop->click();
  EXPECT_EQ(pauses + stops, 0);

  ftx::SessionSnapshot running;
  running.state = ftx::SessionState::Running;
  running.run = "r";
  running.total_steps = 10;
  h.view.show_snapshot(running);
  start->click();  // one run at a time
  EXPECT_TRUE(h.started.empty());
  pause->click();
  stop->click();
  resume->click();  // only when paused
  set_kappa->click();
  EXPECT_EQ(pauses, 1);
  EXPECT_EQ(stops, 1);
  EXPECT_EQ(resumes, 0);
  ASSERT_EQ(kappas.size(), 1u);
  EXPECT_NEAR(kappas[0], ftx::bits_to_nats(0.125), kFloatTol) << "the form's 1/8 bit, in nats";
}

// ---------------------------------------------------------------------------------------------
// GenerationsView

TEST(GenerationsView, PromptOutsideTheVocabularyIsRefusedWithTheCharacterNamed) {
  GenerationsHarness h;
  QLineEdit* prompt = h.prompt();
  ASSERT_TRUE(prompt);
  ASSERT_EQ(prompt->text(), kDefaultPrompt);
  type_over(prompt, "Kx>");
  EXPECT_TRUE(label_texts(&h.view).contains("Prompt: character 'x' at position 1 is not in the vocabulary _!>A..Z"))
      << "named as it is typed: " << label_texts(&h.view).toStdString();
  EXPECT_FALSE(prompt->styleSheet().isEmpty()) << "the prompt is marked";
  h.resample();
  emit prompt->returnPressed();
  EXPECT_TRUE(h.figure4.empty()) << "no request for a prompt the model cannot tokenize";
  EXPECT_TRUE(label_texts(&h.view).contains("'x' at position 1")) << label_texts(&h.view).toStdString();
}

TEST(GenerationsView, ValidPromptRequestsFigure4) {
  GenerationsHarness h;
  QLineEdit* prompt = h.prompt();
  ASSERT_TRUE(prompt);
  type_over(prompt, "B>");
  h.resample();
  ASSERT_EQ(h.figure4.size(), 1u);
  EXPECT_EQ(h.figure4[0].run, "run-a");
  EXPECT_EQ(h.figure4[0].step, -1) << "no steps known: the owner loads the latest";
  EXPECT_EQ(h.figure4[0].req.prompt, "B>");
  EXPECT_EQ(h.figure4[0].req.fixed_groups, kDefaultFixedGroups);
  EXPECT_EQ(h.figure4[0].req.group_size, kDefaultGroupSize);
  emit prompt->returnPressed();  // Return in the prompt generates too
  ASSERT_EQ(h.figure4.size(), 2u);
  EXPECT_NE(h.figure4[0].req.seed, h.figure4[1].req.seed) << "Resample Z draws new seeds";
}

TEST(GenerationsView, FixedGroupsShowAgreementByTargetStart) {
  GenerationsHarness h;
  auto* by_start = h.view.findChild<QLabel*>("by_start");
  ASSERT_TRUE(by_start);
  ftx::GroupView indep, fixed1, fixed2;
  indep.agreement_at = {{3, 1.0}};  // an independent group's sequences are not counted
  fixed1.fixed = fixed2.fixed = true;
  fixed1.group = 1, fixed2.group = 2;
  fixed1.agreement_at = {{2, 1.0}, {5, 0.5}, {40, 0.0}};
  fixed2.agreement_at = {{10, 0.25}, {50, 1.0}};
  h.view.show_groups("run-a", 7, {indep, fixed1, fixed2});
  EXPECT_EQ(by_start->text(),
            "Agreement by target start (fixed-Z sequences): 0–7: 0.75 (2) · 8–15: 0.25 (1) · 40–47: 0.00 (1) · "
            "48–56: 1.00 (1) · from 32 on: 0.50 (2)");
  EXPECT_FALSE(by_start->isHidden());
  h.view.show_groups("run-a", 7, {indep});  // no fixed-Z group: nothing to say
  EXPECT_TRUE(by_start->isHidden());
}

TEST(GenerationsView, FixingTheRefusedPromptClearsTheMessage) {
  GenerationsHarness h;
  QLineEdit* prompt = h.prompt();
  ASSERT_TRUE(prompt);
  type_over(prompt, "K?");
  ASSERT_TRUE(label_texts(&h.view).contains("'?'"));
  type_over(prompt, kDefaultPrompt);
  EXPECT_FALSE(label_texts(&h.view).contains("vocabulary"));
  EXPECT_TRUE(prompt->styleSheet().isEmpty());
  h.resample();
  EXPECT_EQ(h.figure4.size(), 1u);
}

TEST(GenerationsView, NarrowerTokenizerRefusesTheCurrentPromptAtOnce) {
  GenerationsHarness h;
  h.view.set_tokenizer(std::make_shared<ftx::CharTokenizer>("AB>"));  // no K
  EXPECT_TRUE(label_texts(&h.view).contains("'K' at position 0 is not in the vocabulary AB>"))
      << label_texts(&h.view).toStdString();
  h.resample();
  EXPECT_TRUE(h.figure4.empty());
  h.view.set_tokenizer(synthetic_tokenizer());
  EXPECT_FALSE(label_texts(&h.view).contains("vocabulary")) << "a valid prompt again: the message goes";
}

TEST(GenerationsView, EmptyPromptIsRefused) {
  GenerationsHarness h;
  QLineEdit* prompt = h.prompt();
  ASSERT_TRUE(prompt);
  prompt->clear();
  h.resample();
  EXPECT_TRUE(h.figure4.empty());
  EXPECT_TRUE(label_texts(&h.view).contains("Type a prompt first"));
}

TEST(GenerationsView, SelectRunRequestsThatRunAtItsLatestStep) {
  GenerationsHarness h;
  h.view.set_steps("run-b", {500, 1500, 1000});
  h.view.select_run("run-b");
  ASSERT_EQ(h.figure4.size(), 1u);
  EXPECT_EQ(h.figure4[0].run, "run-b");
  EXPECT_EQ(h.figure4[0].step, 1500);
}

TEST(GenerationsView, SelectingARunWithoutCheckpointsSaysSoAndRequestsNothing) {
  GenerationsHarness h;
  h.view.set_steps("run-b", {500});
  h.view.select_run("not-listed");
  EXPECT_TRUE(h.figure4.empty()) << "never the generations of another run";
  EXPECT_TRUE(label_texts(&h.view).contains("'not-listed' has no checkpoint")) << label_texts(&h.view).toStdString();
}

TEST(GenerationsView, KappaComparisonWithoutSweepRunsRequestsNothing) {
  GenerationsHarness h;
  QPushButton* comparison = button(&h.view, "Kappa comparison");
  ASSERT_TRUE(comparison);
  comparison->click();  // toggles on, which asks for a comparison
  EXPECT_EQ(h.comparisons, 0);
  EXPECT_TRUE(h.figure4.empty()) << "the comparison mode must not fall back to one run";
  EXPECT_TRUE(label_texts(&h.view).contains("No kappa sweep runs"));
  h.view.set_sweep_runs({"run-a", "run-b"});
  h.resample();
  EXPECT_EQ(h.comparisons, 1);
}

// ---------------------------------------------------------------------------------------------
// BenchmarksView

namespace {

constexpr int kBenchSteps = 5;
constexpr int64_t kTokensPerStep = 4096;

double bench_value(int run, int step, double base) { return base + 0.01 * step + 0.05 * run; }

// Two runs, three tasks (humaneval with two metrics, gsm8k, humaneval_plus) over 5 steps, with
// items; a StorePoller (on this thread) wired to a BenchmarksView like MainWindow wires them.
struct BenchHarness {
  ftx::test::TempDir dir{"ftx_bench_view_"};
  std::string db = dir / "runs.db";
  std::optional<ftx::RunStore> store;
  std::vector<int64_t> ids;
  std::unique_ptr<StorePoller> poller;
  ftx::BenchmarksView view;
  std::vector<std::tuple<int64_t, int64_t, QString>> requests;

  BenchHarness() {
    auto s = ftx::RunStore::open(db);
    EXPECT_TRUE(s.ok());
    store.emplace(std::move(*s));
    for (const char* name : {"run-a", "run-b"}) ids.push_back(*store->create_run(name, "{}"));
    for (int r = 0; r < 2; ++r)
      for (int step = 0; step < kBenchSteps; ++step) write_step(r, step * 100);
    poller = std::make_unique<StorePoller>(QString::fromStdString(db));
    QObject::connect(poller.get(), &StorePoller::benchmarks_arrived, &view, &ftx::BenchmarksView::add_rows);
    QObject::connect(poller.get(), &StorePoller::reference_loaded, &view, &ftx::BenchmarksView::set_reference);
    QObject::connect(poller.get(), &StorePoller::items_loaded, &view, &ftx::BenchmarksView::show_items);
    QObject::connect(&view, &ftx::BenchmarksView::items_requested,
                     [this](quint64 req, qint64 run, qint64 step, QString task) {
                       requests.emplace_back(run, step, task);
                       poller->load_items(req, run, step, task);
                     });
    view.set_runs({{ids[0], "run-a", QColor(0x4e79a7)}, {ids[1], "run-b", QColor(0xf28e2b)}});
    poller->poll();
    view.refresh();
  }
  void write_step(int r, int64_t step, double base = 0.1) {
    std::vector<ftx::BenchItemRow> items;
    for (int i = 0; i < 3; ++i)
      items.push_back({"HumanEval/" + std::to_string(i), "def f" + std::to_string(i) + "():\n",
                       "    return " + std::to_string(step) + "  # run " + std::to_string(r) + "\n", "    return 1\n",
                       i == 0 ? "pass" : "fail: assertion", "{}", i == 0 ? 1.0 : 0.0});
    const int64_t s = step / 100;
    EXPECT_TRUE(store
                    ->write_bench_result(
                        ids[r], step, step * kTokensPerStep, "humaneval",
                        {{"pass@1", bench_value(r, s, base), 0.02, 164}, {"nll_canonical", 2.0 - 0.1 * s, 0.05, 164}},
                        items)
                    .ok());
    EXPECT_TRUE(store
                    ->write_bench_result(ids[r], step, step * kTokensPerStep, "gsm8k",
                                         {{"em_strict", 0.01 * s, 0.0, 50}, {"em_flexible", 0.02 * s, 0.01, 50}}, {})
                    .ok());
    EXPECT_TRUE(store
                    ->write_bench_result(ids[r], step, step * kTokensPerStep, "humaneval_plus",
                                         {{"pass@1", 0.05 + 0.01 * s, 0.02, 164}}, {})
                    .ok());
  }
  QChart* chart(const QString& task) {
    auto* v = view.findChild<QChartView*>("bench_view:" + task);
    return v ? v->chart() : nullptr;
  }
  QScatterSeries* dots(const QString& task, const QString& run) {
    QChart* c = chart(task);
    if (!c) return nullptr;
    for (QAbstractSeries* s : c->series())
      if (auto* d = qobject_cast<QScatterSeries*>(s); d && d->name() == run) return d;
    return nullptr;
  }
  QStringList paper_lines(const QString& task) {
    QStringList out;
    if (QChart* c = chart(task))
      for (QAbstractSeries* s : c->series())
        if (s->name().startsWith("paper ")) out << s->name();
    return out;
  }
  QStringList labels(const QString& task) {
    QStringList out;
    if (QChart* c = chart(task))
      for (QGraphicsItem* item : c->childItems())
        if (auto* t = dynamic_cast<QGraphicsSimpleTextItem*>(item)) out << t->text();
    out.sort();
    return out;
  }
};

std::vector<double> ys(const QScatterSeries* s) {
  std::vector<double> out;
  for (const QPointF& p : s->points()) out.push_back(p.y());
  return out;
}

}  // namespace

// ---- ComputeView ----------------------------------------------------------------------------------

// Two blocks over four tokens: block 0 dense, block 1 routed (SDT-like) computing tokens 1 and 3.
ftx::ComputeInspection two_block_inspection() {
  ftx::ComputeInspection ci;
  ci.text = "A>_A!", ci.T = 4, ci.router = "sdt", ci.capacity = 0.5, ci.realised = 0.5;
  ftx::BlockCompute dense;
  dense.layer = 0;
  ftx::BlockCompute r;
  r.layer = 1, r.routed = true;
  r.computed = {0, 1, 0, 1};
  r.gate = {0.1f, 0.95f, 0.2f, 0.6f};
  r.d_st = {0.5f, 2.0f, 0.4f, 1.0f}, r.d_ch = {0.4f, 0.1f, 0.3f, 0.9f}, r.ma = {0.5f, 1.2f, 1.0f, 1.0f};
  r.s_ce = {0.05f, 0.9f, 0.1f, 0.2f}, r.s_cu = {0.05f, 0.5f, 0.1f, 0.5f};
  r.student = {0.2f, 0.8f, 0.7f, 0.3f};  // agrees at 0 and 1, differs at 2 and 3
  ci.blocks = {dense, r};
  ftx::EventAuroc a;
  a.layer = 1, a.event = ftx::SynthEvent::Start, a.auroc = 0.875, a.computed = 1.0, a.computed_background = 0.25;
  a.positives = 8, a.negatives = 40;
  ci.events = {a}, ci.event_sequences = 64;
  return ci;
}

// Each cell maps to its block and token; hovering says computed or skipped with the gate and the
// surprise; the computed cells are drawn in the gate's colour and the skipped ones left open.
TEST(ComputeView, CellsShowComputedAndSkippedTokensWithTheirGate) {
  ftx::ComputeView v;
  v.resize(900, 400);
  v.set_inspection(two_block_inspection(), "sdt-run", 400);
  const QImage img = v.grab().toImage();
  // find the cells by scanning the widget
  std::optional<QPoint> computed, skipped, dense;
  for (int y = 0; y < v.height(); y += 2) {
    for (int x = 0; x < v.width(); x += 2) {
      const auto c = v.cell_at(QPoint(x, y));
      if (!c) continue;
      if (c->first == 1 && c->second == 1 && !computed) computed = QPoint(x + 3, y + 3);
      if (c->first == 1 && c->second == 2 && !skipped) skipped = QPoint(x + 3, y + 3);
      if (c->first == 0 && c->second == 0 && !dense) dense = QPoint(x + 3, y + 3);
    }
    if (computed && skipped && dense) break;
  }
  ASSERT_TRUE(computed && skipped && dense) << "the grid has a cell for every block and token";
  EXPECT_FALSE(v.cell_at(QPoint(2, 2))) << "the header is not a cell";
  const QString on = v.cell_text(1, 1), off = v.cell_text(1, 2);
  EXPECT_TRUE(on.contains("computed")) << on.toStdString();
  EXPECT_TRUE(on.contains("g = 0.950")) << on.toStdString();
  EXPECT_TRUE(on.contains("D_st 2.0000")) << on.toStdString();
  EXPECT_TRUE(off.contains("skipped")) << off.toStdString();
  EXPECT_TRUE(on.contains("student: p(compute) 0.800, agrees with the teacher")) << on.toStdString();
  EXPECT_TRUE(off.contains("student: p(compute) 0.700, differs from the teacher")) << off.toStdString();
  EXPECT_TRUE(v.cell_text(0, 3).contains("dense block")) << v.cell_text(0, 3).toStdString();
  EXPECT_TRUE(v.cell_text(1, 1).contains("token '>'")) << v.cell_text(1, 1).toStdString();
  // colours: the high gate is yellowish (red and green high, blue low), the skipped cell is the
  // background, the dense cell grey
  const QColor c = img.pixelColor(*computed), s = img.pixelColor(*skipped), d = img.pixelColor(*dense);
  EXPECT_GT(c.red(), 200);
  EXPECT_LT(c.blue(), 120);
  EXPECT_EQ(s, v.palette().window().color());
  EXPECT_EQ(d, QColor(200, 200, 205));
}

TEST(ComputeView, AMessageReplacesNothingUntilTheFirstInspection) {
  ftx::ComputeView v;
  v.resize(600, 300);
  EXPECT_FALSE(v.inspection());
  EXPECT_FALSE(v.cell_at(QPoint(300, 100)));
  v.set_message("run 'x' routes no block");
  v.set_inspection(two_block_inspection(), "r", 1);
  EXPECT_TRUE(v.inspection());
  EXPECT_TRUE(v.cell_text(5, 0).isEmpty()) << "no block 5";
  EXPECT_TRUE(v.cell_text(1, 4).isEmpty()) << "no position 4 of 4";
}

// ---- FrontierChart ---------------------------------------------------------------------------------

RunSummary frontier_run(int64_t id, const std::string& name, const QString& routing) {
  RunSummary r;
  r.info.id = id, r.info.name = name, r.dataset = "synthetic", r.routing = routing;
  return r;
}

// One point per run with FLOPs and a validation CE, at its latest evaluation; dense runs form the
// line, each router its own points; a run without FLOPs (trained before they were stored) is out.
TEST(FrontierChart, DenseRunsMakeTheLineAndRoutersThePoints) {
  ftx::MetricCache cache;
  auto evals = [&](int64_t id, double flops, std::vector<double> ce) {
    std::vector<ftx::MetricRow> rows;
    for (size_t i = 0; i < ce.size(); ++i) {
      rows.push_back({int64_t(100 * (i + 1)), "val/ce_prior", ce[i], 0.0});
      if (flops > 0) rows.push_back({int64_t(100 * (i + 1)), "model/flops_per_token", flops, 0.0});
    }
    cache.append(id, rows);
  };
  evals(1, 2.6e6, {0.41, 0.30});
  evals(2, 5.2e6, {0.40, 0.29});
  evals(3, 3.8e6, {0.40, 0.28});
  evals(4, 0, {0.5});  // no FLOPs stored
  const std::vector<RunSummary> runs = {frontier_run(1, "dense-L2", "–"), frontier_run(2, "dense-L4", "–"),
                                        frontier_run(3, "mod-0.5", "mod 0.5"), frontier_run(4, "old", "–")};
  const std::vector<ftx::FrontierPoint> p = ftx::frontier_points(cache, runs);
  ASSERT_EQ(p.size(), 3u);
  EXPECT_EQ(p[2].run, "mod-0.5");
  EXPECT_EQ(p[2].router, "mod");
  EXPECT_DOUBLE_EQ(p[2].val_ce, 0.28);
  EXPECT_EQ(p[2].step, 200);
  EXPECT_DOUBLE_EQ(p[2].mflop_per_token, 3.8);
  EXPECT_EQ(p[0].router, "dense");

  ftx::FrontierChart chart;
  chart.resize(600, 300);
  chart.set_points(p, "synthetic");
  int lines = 0, scatters = 0;
  for (QAbstractSeries* s : chart.chart()->series()) {
    if (auto* l = qobject_cast<QLineSeries*>(s); l && !qobject_cast<QScatterSeries*>(s)) {
      ++lines;
      ASSERT_EQ(l->count(), 2);
      EXPECT_DOUBLE_EQ(l->at(0).x(), 2.6) << "the dense line runs in FLOPs order";
      EXPECT_DOUBLE_EQ(l->at(1).x(), 5.2);
    } else if (auto* d = qobject_cast<QScatterSeries*>(s)) {
      ++scatters;
      EXPECT_TRUE(d->name() == "dense" || d->name() == "mod") << d->name().toStdString();
    }
  }
  EXPECT_EQ(lines, 1);
  EXPECT_EQ(scatters, 2);
  chart.set_points({}, "coinflip");
  EXPECT_TRUE(chart.chart()->series().isEmpty());
  EXPECT_TRUE(chart.chart()->title().contains("no run of coinflip")) << chart.chart()->title().toStdString();
}

TEST(BenchmarksView, OneChartPerTaskWithEachRunsPointsAndErrorBars) {
  BenchHarness h;
  EXPECT_EQ(h.view.tasks(), (QStringList{"humaneval", "humaneval_plus", "gsm8k"}));  // the documented order
  for (int r = 0; r < 2; ++r) {
    QScatterSeries* d = h.dots("humaneval", r == 0 ? "run-a" : "run-b");
    ASSERT_NE(d, nullptr);
    ASSERT_EQ(d->count(), kBenchSteps);
    for (int s = 0; s < kBenchSteps; ++s) {
      EXPECT_EQ(d->at(s).x(), 100.0 * s);
      EXPECT_DOUBLE_EQ(d->at(s).y(), bench_value(r, s, 0.1)) << "the main metric, pass@1";
    }
  }
  EXPECT_EQ(h.view.error_bars("humaneval"), 2u * kBenchSteps);
  EXPECT_EQ(h.view.error_bars("gsm8k"), 0u);  // em_strict was stored with stderr 0: no bar
  auto* combo = h.view.findChild<QComboBox*>("bench_metric:humaneval");
  ASSERT_NE(combo, nullptr);
  EXPECT_EQ(combo->currentText(), "pass@1");
  EXPECT_EQ(combo->count(), 2);
  // The latest-values table: one row per task, the runs' last values with their standard errors.
  auto* latest = h.view.findChild<QTableWidget*>("bench_latest");
  ASSERT_NE(latest, nullptr);
  ASSERT_EQ(latest->rowCount(), 3);
  EXPECT_EQ(latest->item(0, 0)->text(), "humaneval");
  EXPECT_EQ(latest->item(0, 2)->text(), QString::number(bench_value(0, 4, 0.1), 'f', 3) + " \u00b1 0.020");
  EXPECT_EQ(latest->item(0, 3)->text(), QString::number(bench_value(1, 4, 0.1), 'f', 3) + " \u00b1 0.020");
}

TEST(BenchmarksView, PaperValuesAreLabelledReferenceLinesOfTheMappedMetric) {
  BenchHarness h;
  // humaneval_plus maps to the paper's human_eval_plus pass@1: baseline and four kappas at 1.5B.
  EXPECT_EQ(h.paper_lines("humaneval_plus").size(), 5);
  EXPECT_EQ(h.labels("humaneval_plus"), (QStringList{"base", "\u03ba 1", "\u03ba 1/2", "\u03ba 1/4", "\u03ba 2"}));
  EXPECT_EQ(h.paper_lines("gsm8k").size(), 5);  // our em_strict is the paper's gsm8k em
  EXPECT_TRUE(h.paper_lines("humaneval").isEmpty()) << "plain HumanEval is not in the paper";
  auto* paper = h.view.findChild<QComboBox*>("bench_paper");
  ASSERT_NE(paper, nullptr);
  paper->setCurrentIndex(2);  // 8B, 1T tokens: baseline and kappa 1/2
  h.view.refresh();
  EXPECT_EQ(h.paper_lines("humaneval_plus").size(), 2);
  paper->setCurrentIndex(3);  // 1.5B and 8B (200B): both sizes, labels name the size
  h.view.refresh();
  EXPECT_EQ(h.paper_lines("humaneval_plus").size(), 10);
  EXPECT_TRUE(h.labels("humaneval_plus").contains("8B base"));
  // Another metric than the paper's: no reference lines, the metric's values instead.
  EXPECT_TRUE(h.view.set_metric("gsm8k", "em_flexible"));
  EXPECT_FALSE(h.view.set_metric("gsm8k", "pass@1"));
  h.view.refresh();
  EXPECT_TRUE(h.paper_lines("gsm8k").isEmpty());
  EXPECT_DOUBLE_EQ(ys(h.dots("gsm8k", "run-a")).back(), 0.08);
}

TEST(BenchmarksView, TokensOnTheXAxis) {
  BenchHarness h;
  h.view.set_x_tokens(true);
  h.view.refresh();
  QScatterSeries* d = h.dots("humaneval", "run-a");
  ASSERT_NE(d, nullptr);
  ASSERT_EQ(d->count(), kBenchSteps);
  // 400 steps of 4096 tokens = 1.6384 M tokens, drawn in millions.
  EXPECT_DOUBLE_EQ(d->at(4).x(), 400.0 * kTokensPerStep / 1e6);
  auto axes = h.chart("humaneval")->axes(Qt::Horizontal);
  ASSERT_EQ(axes.size(), 1);
  EXPECT_EQ(axes[0]->titleText(), "tokens (M)");
  // Values stored without a token count (an external checkpoint's) are not drawn against tokens.
  ASSERT_TRUE(h.store->write_bench_result(h.ids[0], 0, -1, "mbpp", {{"pass@1", 0.3, 0.05, 100}}, {}).ok());
  h.poller->poll();
  h.view.refresh();
  ASSERT_NE(h.chart("mbpp"), nullptr);
  EXPECT_EQ(h.dots("mbpp", "run-a")->count(), 0);
  EXPECT_EQ(h.chart("mbpp")->title(), "no token counts stored");
  h.view.set_x_tokens(false);
  h.view.refresh();
  EXPECT_EQ(h.dots("mbpp", "run-a")->count(), 1);
  EXPECT_EQ(h.chart("mbpp")->title(), "");
}

TEST(BenchmarksView, ClickingAPointListsThatStepsItems) {
  BenchHarness h;
  h.requests.clear();
  QScatterSeries* d = h.dots("humaneval", "run-b");
  ASSERT_NE(d, nullptr);
  // A click lands near, not exactly on, the step-200 point.
  emit d->clicked(d->at(2) + QPointF(3, 0.001));
  ASSERT_EQ(h.requests.size(), 1u);
  EXPECT_EQ(h.requests[0], std::make_tuple(h.ids[1], int64_t{200}, QString("humaneval")));
  auto* table = h.view.findChild<QTableWidget*>("bench_items");
  ASSERT_NE(table, nullptr);
  ASSERT_EQ(table->rowCount(), 3);
  EXPECT_EQ(table->item(0, 0)->text(), "HumanEval/0");
  EXPECT_EQ(table->item(0, 1)->text(), "pass");
  EXPECT_EQ(table->item(1, 1)->text(), "fail: assertion");
  EXPECT_EQ(table->item(1, 3)->text(), "return 200 # run 1");  // the generation, on one line
  table->selectRow(1);
  auto* text = h.view.findChild<QPlainTextEdit*>("bench_item_text");
  ASSERT_NE(text, nullptr);
  EXPECT_TRUE(text->toPlainText().contains("def f1():\n")) << text->toPlainText().toStdString();
  EXPECT_TRUE(text->toPlainText().contains("    return 200  # run 1\n"));
  EXPECT_TRUE(h.view.findChild<QLabel*>("bench_items_title")->text().contains("step 200: 3 items, 1 passed"));
  // The point whose items are listed is ringed on its chart.
  h.view.refresh();
  QScatterSeries* ring = nullptr;
  for (QAbstractSeries* s : h.chart("humaneval")->series())
    if (s->name() == "selected") ring = qobject_cast<QScatterSeries*>(s);
  ASSERT_NE(ring, nullptr);
  ASSERT_EQ(ring->count(), 1);
  EXPECT_EQ(ring->at(0), h.dots("humaneval", "run-b")->at(2));
  // An answer to an older request (a point clicked before this one) is ignored.
  h.view.show_items(0, h.ids[0], 0, "humaneval", {}, "");
  EXPECT_EQ(table->rowCount(), 3);
}

TEST(BenchmarksView, GrowsLiveAndARewrittenStepReplacesItsPoint) {
  BenchHarness h;
  h.write_step(0, 500);  // a sixth evaluation arrives while the run trains
  h.poller->poll();
  h.view.refresh();
  QScatterSeries* d = h.dots("humaneval", "run-a");
  ASSERT_NE(d, nullptr);
  ASSERT_EQ(d->count(), kBenchSteps + 1);
  EXPECT_EQ(d->at(kBenchSteps).x(), 500.0);
  EXPECT_EQ(h.dots("humaneval", "run-b")->count(), kBenchSteps);
  h.write_step(0, 200, 0.5);  // step 200 evaluated again: its point moves, no point is added
  h.poller->poll();
  h.view.refresh();
  d = h.dots("humaneval", "run-a");
  ASSERT_EQ(d->count(), kBenchSteps + 1);
  EXPECT_DOUBLE_EQ(d->at(2).y(), bench_value(0, 2, 0.5));
  // A run taken out of the overlay leaves every chart.
  h.view.set_runs({{h.ids[1], "run-b", QColor(0xf28e2b)}});
  h.view.refresh();
  EXPECT_EQ(h.dots("humaneval", "run-a"), nullptr);
  EXPECT_NE(h.dots("humaneval", "run-b"), nullptr);
}

TEST(StorePoller, MigratesAnOlderStoreThenTailsIt) {
  ftx::test::TempDir dir("ftx_poller_v1_");
  const std::string db = dir / "runs.db";
  {
    auto s = ftx::RunStore::open(db);
    ASSERT_TRUE(s.ok());
    ASSERT_TRUE(s->create_run("old", "{}").ok());
    // Back to version 1's tables (test_run_store.cpp migrates the exact version-1 schema).
    sqlite3* raw = s->native_handle();
    ASSERT_EQ(sqlite3_exec(raw,
                           "DROP TABLE bench_items; DROP TABLE benchmarks; DELETE FROM reference;"
                           "CREATE TABLE benchmarks(run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,"
                           " step INTEGER NOT NULL, task TEXT NOT NULL, metric TEXT NOT NULL, value REAL,"
                           " n INTEGER NOT NULL);"
                           "INSERT INTO benchmarks VALUES(1, 7, 'mbpp', 'pass@1', 0.25, 10);"
                           "PRAGMA user_version = 1;",
                           nullptr, nullptr, nullptr),
              SQLITE_OK);
  }
  StorePoller poller(QString::fromStdString(db));
  BenchBatch rows;
  size_t reference = 0;
  QString error = "none";
  QObject::connect(&poller, &StorePoller::benchmarks_arrived, [&](const BenchBatch& b) { rows = b; });
  QObject::connect(&poller, &StorePoller::reference_loaded, [&](const ReferenceRows& r) { reference = r.size(); });
  QObject::connect(&poller, &StorePoller::store_error, [&](const QString& e) { error = e; });
  poller.poll();
  EXPECT_EQ(error, "none") << "no error reported";
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].second.task, "mbpp");
  EXPECT_EQ(rows[0].second.step, 7);
  EXPECT_GT(reference, 200u);  // the paper's tables, imported by the migration
  auto version = ftx::RunStore::file_schema_version(db);
  ASSERT_TRUE(version.ok());
  EXPECT_EQ(*version, ftx::kSchemaVersion);
}

// Widgets need a QApplication; the offscreen platform needs no display.
int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  qputenv("QT_QPA_PLATFORM", "offscreen");
  QApplication app(argc, argv);
  return RUN_ALL_TESTS();
}
