// The studio's model-file views and their worker, offscreen (no display, no window shown):
// - printable_token: spaces, newlines and tabs made visible, control characters and bytes that
//   are not UTF-8 (half a character, overlong forms, surrogates) as \xNN, UTF-8 text kept.
// - ModelsView: a row per model through opening, loading (progress) and loaded; the columns
//   (parameters, architecture, Free Transformer or plain decoder); a failed open removes its row and
//   shows the one-line message.
// - TextGenerationsView: the no-Z notice and one group for a plain decoder; Generate's job (seeds,
//   sizes, sampling); Resample Z changes only the latent seed and Freeze Z only the token seed;
//   replies to an older job are ignored; streamed pieces reach the cells, redrawn once per frame.
// - Kinds (TextGroupsGrid, TextGenerationsView): a generation is judged when it ends, on its own
//   text (not the prompt, not a streamed half): python, c, perl, prose badges and "?" for text no
//   rule names; each group's line gives validity and kind agreement; ticking and unticking Kinds
//   shows and hides them without a new request; the setters the kinds lesson uses reach the job.
// - LessonsView's "Z picks the document": the stored numbers of the pair from show_kinds_lesson,
//   the one line when the pair is not in the store, a missing baseline or measurement, and the
//   button's request with the model folder.
// - ModelWorker on its own thread with a small checkpoint of ours: progress up to done == total,
//   loaded; a job's plan, its streamed pieces adding up to the final texts; Stop; a missing file and
//   a plain decoder's latent as one-line messages; the latent of a text.
// - With the real SmolLM2 GGUF (REQUIRE_REAL_MODEL): its headers as the Models list shows them, a
//   chat answer streamed through the worker, and a random Free Transformer on its tokenizer whose
//   latent is read over real tokens.
// Signals are recorded by lambdas (Qt6::Test is not linked).
#include <gtest/gtest.h>

#include <QApplication>
#include <QCheckBox>
#include <QElapsedTimer>
#include <QLabel>
#include <QMouseEvent>
#include <QPushButton>
#include <QTableWidget>
#include <QThread>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "core/io/checkpoint.h"
#include "core/model/config.h"
#include "core/model/model.h"
#include "core/text/char_tokenizer.h"
#include "test_util.h"
#include "tests/real_model.h"
#include "views/lessons_view.h"
#include "views/meta_types.h"
#include "views/model_worker.h"
#include "views/models_view.h"
#include "views/text_generations_view.h"
#include "views/text_groups_grid.h"
#include "views/token_label.h"

using ftx::ModelsView;
using ftx::ModelWorker;
using ftx::printable_token;
using ftx::TextGenerationsView;
using ftx::TextGroupsGrid;
using ftx::TextJob;
using ftx::TextJobPlan;
using ftx::TextJobResult;
using ftx::TextPieces;

namespace {

constexpr int kWaitMs = 60'000;  // a load or a short generation on 2 busy cores
const char* const kAlphabet = " abcdefghijklmnopqrstuvwxyz.";

// Runs the event loop until `done` or `ms` pass; the result of `done`.
bool wait_until(const std::function<bool()>& done, int ms = kWaitMs) {
  QElapsedTimer clock;
  clock.start();
  while (!done() && clock.elapsed() < ms) {
    QCoreApplication::processEvents(QEventLoop::AllEvents, 20);
    QThread::msleep(2);
  }
  return done();
}

ftx::ModelConfig tiny_config(int latent_bits) {
  ftx::ShapeOverrides o;
  o.preset = "tiny";
  o.latent_bits = latent_bits;
  auto c = ftx::shape_model_config(o, 28, 96);
  EXPECT_TRUE(c.ok()) << c.error().message;
  return *c;
}

// A checkpoint directory of ours (config.json + model.safetensors, the chars tokenizer).
std::string save_tiny_checkpoint(const std::string& dir, int latent_bits) {
  auto be = ftx::make_cpu_backend();
  ftx::CheckpointData ck;
  ck.config = tiny_config(latent_bits);
  ck.tokenizer = std::make_shared<ftx::CharTokenizer>(kAlphabet);
  ftx::Model m(*be, ck.config);
  m.init_weights(5, ftx::InitConfig{});
  ck.params.resize(size_t(m.num_params()));
  m.save_params(ck.params.data());
  const ftx::Status st = ftx::save_checkpoint(dir, ck);
  EXPECT_TRUE(st.ok()) << st.error().message;
  return dir;
}

std::shared_ptr<const ftx::ModelInfo> info_of(int latent_bits, const std::string& chat_template = "") {
  auto info = std::make_shared<ftx::ModelInfo>();
  info->path = "/models/m.gguf";
  info->format = "gguf";
  info->name = latent_bits ? "free" : "plain";
  info->config = tiny_config(latent_bits);
  info->tokenizer = std::make_shared<ftx::CharTokenizer>(kAlphabet);
  info->chat_template = chat_template;
  info->n_params = 134515008;
  return info;
}

// The worker on its thread, every signal recorded.
struct WorkerHarness {
  QThread thread;
  ModelWorker* worker = new ModelWorker;
  QObject ctx;  // receives the queued signals on this (the test's) thread
  std::map<int, std::shared_ptr<const ftx::ModelInfo>> opened;
  std::map<int, std::vector<std::pair<qint64, qint64>>> progress;
  std::map<int, double> loaded;
  std::map<int, QString> failed;
  std::vector<TextJobPlan> plans;
  std::map<quint64, std::map<int, std::string>> streamed;  // job -> sequence -> text
  std::map<quint64, int> batches;
  std::vector<TextJobResult> results;
  std::vector<ftx::LatentInspection> latents;
  std::vector<QString> latent_errors;

  WorkerHarness() {
    ModelWorker::register_meta_types();
    worker->moveToThread(&thread);
    QObject::connect(&thread, &QThread::started, worker, &ModelWorker::start);
    QObject::connect(&thread, &QThread::finished, worker, &QObject::deleteLater);
    QObject::connect(worker, &ModelWorker::opened, &ctx, [this](int id, auto info) { opened[id] = info; });
    QObject::connect(worker, &ModelWorker::load_progress, &ctx,
                     [this](int id, qint64 done, qint64 total) { progress[id].emplace_back(done, total); });
    QObject::connect(worker, &ModelWorker::loaded, &ctx, [this](int id, double s) { loaded[id] = s; });
    QObject::connect(worker, &ModelWorker::open_failed, &ctx, [this](int id, QString m) { failed[id] = m; });
    QObject::connect(worker, &ModelWorker::planned, &ctx, [this](TextJobPlan p) { plans.push_back(p); });
    QObject::connect(worker, &ModelWorker::text_arrived, &ctx, [this](quint64 job, TextPieces pieces) {
      ++batches[job];
      for (const auto& [seq, text] : pieces) streamed[job][seq] += text;
    });
    QObject::connect(worker, &ModelWorker::finished, &ctx, [this](TextJobResult r) { results.push_back(r); });
    QObject::connect(worker, &ModelWorker::latent_ready, &ctx,
                     [this](quint64, ftx::LatentInspection li, QString) { latents.push_back(li); });
    QObject::connect(worker, &ModelWorker::latent_failed, &ctx,
                     [this](quint64, QString m) { latent_errors.push_back(m); });
    thread.start();
  }
  ~WorkerHarness() {
    worker->cancel(~quint64{0});
    thread.quit();
    thread.wait();
  }
  void call(std::function<void(ModelWorker*)> f) {
    QMetaObject::invokeMethod(
        worker, [w = worker, f] { f(w); }, Qt::QueuedConnection);
  }
  bool open(int id, const std::string& path) {
    call([=](ModelWorker* w) { w->open(id, QString::fromStdString(path)); });
    return wait_until([&] { return loaded.count(id) || failed.count(id); });
  }
  const TextJobResult* result(quint64 job) const {
    for (const TextJobResult& r : results)
      if (r.id == job) return &r;
    return nullptr;
  }
  const TextJobResult* run(const TextJob& job) {
    call([job](ModelWorker* w) { w->generate(job); });
    wait_until([&] { return result(job.id) != nullptr; });
    return result(job.id);
  }
};

TextJob job_for(quint64 id, int model, const std::string& prompt, int n, int fixed, int max_new) {
  TextJob job;
  job.id = id, job.model = model, job.prompt = prompt;
  job.groups.group_size = n, job.groups.fixed_groups = fixed;
  job.groups.latent_seed = 3, job.groups.sample_seed = 4;
  job.groups.sample.max_new_tokens = max_new;
  return job;
}

// ---------------------------------------------------------------------------------------------
// printable_token

TEST(PrintableToken, VisibleWhitespaceAndHexForWhatIsNotText) {
  EXPECT_EQ(printable_token("Hello"), "Hello");
  EXPECT_EQ(printable_token(" the"), "\xC2\xB7the");
  EXPECT_EQ(printable_token("\n\n"), "\xE2\x86\xB5\xE2\x86\xB5");
  EXPECT_EQ(printable_token("\t"), "\xE2\x87\xA5");
  EXPECT_EQ(printable_token("caf\xC3\xA9"), "caf\xC3\xA9") << "UTF-8 stays as it is";
  EXPECT_EQ(printable_token("\xE2\x80"), "\\xE2\\x80") << "half a character";
  EXPECT_EQ(printable_token("\x80"), "\\x80") << "a lone continuation byte";
  EXPECT_EQ(printable_token("\xC0\xAF"), "\\xC0\\xAF") << "overlong '/'";
  EXPECT_EQ(printable_token("\xED\xA0\x80"), "\\xED\\xA0\\x80") << "a surrogate";
  EXPECT_EQ(printable_token(std::string("a\0b", 3)), "a\\x00b");
  EXPECT_EQ(printable_token("\x1b[0m"), "\\x1B[0m");
  EXPECT_EQ(printable_token("\xC2\x85"), "\\xC2\\x85") << "a C1 control";
  EXPECT_EQ(printable_token(""), "");
}

// ---------------------------------------------------------------------------------------------
// ModelsView

TEST(ModelsView, RowFollowsOpeningLoadingAndLoaded) {
  ModelsView view;
  view.add_model(7, "/models/SmolLM2.gguf");
  QTableWidget* t = view.table();
  ASSERT_EQ(t->rowCount(), 1);
  EXPECT_EQ(t->item(0, ModelsView::kName)->text(), "SmolLM2.gguf");
  EXPECT_EQ(t->item(0, ModelsView::kStatus)->text(), "opening…");
  EXPECT_FALSE(view.loaded(7));
  view.set_info(7, info_of(0));
  EXPECT_EQ(t->item(0, ModelsView::kName)->text(), "plain");
  EXPECT_EQ(t->item(0, ModelsView::kParams)->text(), "135 M");
  EXPECT_EQ(t->item(0, ModelsView::kFormat)->text(), "gguf");
  EXPECT_EQ(t->item(0, ModelsView::kLatent)->text(), "plain decoder (no Z)");
  EXPECT_TRUE(t->item(0, ModelsView::kArchitecture)->text().startsWith("llama · "));
  view.set_progress(7, 150, 300);
  EXPECT_EQ(t->item(0, ModelsView::kStatus)->text(), "loading 50 %");
  view.set_loaded(7, 1.25);
  EXPECT_TRUE(view.loaded(7));
  EXPECT_TRUE(t->item(0, ModelsView::kStatus)->text().startsWith("ready"));
  EXPECT_EQ(view.current_model(), 7);

  view.add_model(8, "");
  view.set_info(8, info_of(8));
  EXPECT_EQ(t->item(1, ModelsView::kLatent)->text(), "Free Transformer, H = 8");
}

TEST(ModelsView, FailedOpenRemovesTheRowAndShowsTheMessage) {
  ModelsView view;
  view.add_model(1, "/nope.gguf");
  view.set_failed(1, "/nope.gguf: no such file");
  EXPECT_EQ(view.table()->rowCount(), 0);
  EXPECT_EQ(view.message(), "/nope.gguf: no such file");
  EXPECT_EQ(view.current_model(), -1);
}

TEST(ModelsView, ParameterCounts) {
  EXPECT_EQ(ModelsView::params_text(134515008), "135 M");
  EXPECT_EQ(ModelsView::params_text(8030261248), "8.03 B");
  EXPECT_EQ(ModelsView::params_text(7'500'000), "7.5 M");
  EXPECT_EQ(ModelsView::params_text(812'000), "812 k");
  EXPECT_EQ(ModelsView::params_text(999), "999");
}

// ---------------------------------------------------------------------------------------------
// TextGenerationsView

struct ViewHarness {
  TextGenerationsView view;
  std::vector<TextJob> jobs;
  std::vector<quint64> stops;
  ViewHarness() {
    QObject::connect(&view, &TextGenerationsView::generate_requested, [this](TextJob j) { jobs.push_back(j); });
    QObject::connect(&view, &TextGenerationsView::stop_requested, [this](quint64 j) { stops.push_back(j); });
  }
  // The worker's replies to the last job: its plan (groups of n), then finished.
  void answer(int groups, int n, bool latent) {
    TextJobPlan plan;
    plan.id = jobs.back().id;
    plan.has_latent = latent;
    for (int g = 0; g < groups; ++g) plan.groups.push_back({g, g > 0, g * n, n});
    plan.latent_seeds.assign(size_t(groups * n), 1);
    plan.sample_seeds.assign(size_t(groups * n), 2);
    view.on_planned(plan);
    TextJobResult r;
    r.id = plan.id;
    r.texts.assign(size_t(groups * n), "done");
    r.finish.assign(size_t(groups * n), "length");
    view.on_finished(r);
  }
};

TEST(TextGenerationsView, PlainDecoderSaysItHasNoZAndAsksForOneGroup) {
  ViewHarness h;
  h.view.add_model(3, info_of(0));
  EXPECT_EQ(h.view.current_model(), 3);
  EXPECT_EQ(h.view.notice(), "This model has no latent Z (plain decoder): all sequences differ only by token sampling");
  ASSERT_TRUE(h.view.generate());
  ASSERT_EQ(h.jobs.size(), 1u);
  const TextJob& j = h.jobs[0];
  EXPECT_EQ(j.model, 3);
  EXPECT_EQ(j.groups.fixed_groups, 0) << "no fixed-Z groups without a Z";
  EXPECT_EQ(j.groups.group_size, 4);
  EXPECT_EQ(j.groups.latent_seed, 1u);
  EXPECT_EQ(j.groups.sample_seed, 1u);
  EXPECT_EQ(j.groups.sample.max_new_tokens, 48);
  EXPECT_FLOAT_EQ(j.groups.sample.temperature, 0.8f);
  EXPECT_FLOAT_EQ(j.groups.sample.top_p, 0.95f);
  EXPECT_FALSE(j.chat) << "no chat template";
  EXPECT_TRUE(h.view.busy());
  EXPECT_FALSE(h.view.generate()) << "one job at a time";
  h.answer(1, 4, false);
  EXPECT_FALSE(h.view.busy());
  EXPECT_FALSE(h.view.resample_z()) << "no Z to resample";
}

TEST(TextGenerationsView, ResampleZChangesOnlyTheLatentSeedAndFreezeZOnlyTheTokenSeed) {
  ViewHarness h;
  h.view.add_model(1, info_of(8, "<|im_start|>{{ m }}"));
  EXPECT_TRUE(h.view.notice().startsWith("Free Transformer (H = 8")) << h.view.notice().toStdString();
  h.view.set_prompt("Hello there");
  ASSERT_TRUE(h.view.generate());
  EXPECT_TRUE(h.jobs.back().chat) << "a ChatML template: Chat is offered and ticked";
  EXPECT_EQ(h.jobs.back().prompt, "Hello there");
  EXPECT_EQ(h.jobs.back().groups.fixed_groups, 2);
  h.answer(3, 4, true);
  ASSERT_TRUE(h.view.resample_z());
  const TextJob a = h.jobs[0], r = h.jobs[1];
  EXPECT_EQ(r.groups.latent_seed, a.groups.latent_seed + 1);
  EXPECT_EQ(r.groups.sample_seed, a.groups.sample_seed);
  EXPECT_EQ(r.prompt, a.prompt);
  h.answer(3, 4, true);
  ASSERT_TRUE(h.view.freeze_z());
  const TextJob f = h.jobs[2];
  EXPECT_EQ(f.groups.latent_seed, r.groups.latent_seed);
  EXPECT_EQ(f.groups.sample_seed, r.groups.sample_seed + 1);
  EXPECT_GT(f.id, r.id);
}

TEST(TextGenerationsView, RepliesToAnOlderJobAreIgnoredAndStopNamesTheJob) {
  ViewHarness h;
  h.view.add_model(1, info_of(8));
  ASSERT_TRUE(h.view.generate());
  const quint64 job = h.jobs.back().id;
  TextJobResult stale;
  stale.id = job + 100;
  h.view.on_finished(stale);
  EXPECT_TRUE(h.view.busy());
  h.view.stop();
  ASSERT_EQ(h.stops.size(), 1u);
  EXPECT_EQ(h.stops[0], job);
  TextJobResult r;
  r.id = job;
  r.cancelled = true;
  h.view.on_finished(r);
  EXPECT_FALSE(h.view.busy());
  EXPECT_TRUE(h.view.status().startsWith("stopped")) << h.view.status().toStdString();
}

TEST(TextGenerationsView, StreamedPiecesReachTheCellsOncePerFrame) {
  ViewHarness h;
  h.view.add_model(1, info_of(8));
  ASSERT_TRUE(h.view.generate());
  TextJobPlan plan;
  plan.id = h.jobs.back().id, plan.has_latent = true;
  plan.groups = {{0, false, 0, 2}, {1, true, 2, 2}};
  plan.latent_seeds.assign(4, 1), plan.sample_seeds.assign(4, 2);
  h.view.on_planned(plan);
  TextGroupsGrid* grid = h.view.grid();
  ASSERT_EQ(grid->sequences(), 4);
  const int before = grid->redraws();
  for (int i = 0; i < 50; ++i) h.view.on_text(plan.id, {{i % 4, "ab"}, {(i + 1) % 4, "c"}});
  h.view.on_text(plan.id + 1, {{0, "STALE"}});
  EXPECT_EQ(grid->redraws(), before) << "nothing drawn before the frame";
  EXPECT_EQ(grid->cell_text(0), "");
  ASSERT_TRUE(wait_until([&] { return grid->redraws() > before; }, 2000));
  EXPECT_EQ(grid->redraws(), before + 1) << "fifty batches, one redraw";
  for (int s = 0; s < 4; ++s) {
    EXPECT_EQ(grid->cell_text(s), grid->text(s));
    EXPECT_FALSE(grid->text(s).contains("STALE"));
  }
  EXPECT_EQ(grid->text(0).size(), 13 * 2 + 12 * 1);  // ab at i = 0,4,..,48; c at i = 3,7,..,47
}

// ---------------------------------------------------------------------------------------------
// Kinds of text: badges and group lines

const char* const kPython = "import os\n\ndef walk(top):\n    for x in os.listdir(top):\n        yield x\n";
const char* const kC = "#include <stdio.h>\n\nextern int puts(const char *s);\ntypedef int pid_t;\n";
const char* const kPerl =
    "package Foo;\nuse strict;\nsub new {\n    my $class = shift;\n    return bless {}, $class;\n}\n";
const char* const kProse =
    "This program is free software; you can redistribute it and/or modify it\nunder the terms of the license, "
    "either version 2 of the License, or any later version.\nYou should have received a copy of the license along "
    "with this program.\n";
const char* const kNoise = "}}}} ((( ]]] @@@ !!! ~~~\n+-+-+-\n";

// An independent group of three and a fixed-Z group of three.
TextJobPlan two_groups_of_three(quint64 id) {
  TextJobPlan plan;
  plan.id = id, plan.has_latent = true;
  plan.groups = {{0, false, 0, 3}, {1, true, 3, 3}};
  plan.latent_seeds.assign(6, 1), plan.sample_seeds.assign(6, 2);
  plan.prompt_text = kPython;  // the prompt is never judged
  return plan;
}

TextJobResult result_of(quint64 id, std::vector<std::string> texts) {
  TextJobResult r;
  r.id = id;
  r.finish.assign(texts.size(), "length");
  r.texts = std::move(texts);
  return r;
}

TEST(TextGroupsGrid, KindBadgesAreJudgedWhenASequenceEndsAndToggleWithoutRedrawingTheText) {
  TextGroupsGrid grid;
  EXPECT_FALSE(grid.kinds_shown());
  grid.set_plan(two_groups_of_three(1), "caption");
  ASSERT_EQ(grid.groups(), 2);
  EXPECT_EQ(grid.badge_text(0), "") << "hidden until Kinds is ticked";
  EXPECT_EQ(grid.group_kinds_text(0), "");
  grid.set_kinds_shown(true);
  EXPECT_EQ(grid.badge_text(0), "…") << "not judged before the sequence ends";
  EXPECT_TRUE(grid.group_kinds_text(0).contains("judged when the sequences end"));
  grid.append({{0, kPython}, {3, kProse}});
  grid.flush();
  EXPECT_FALSE(grid.kind(0).has_value()) << "streamed text is not judged";
  EXPECT_EQ(grid.badge_text(0), "…");

  grid.set_result(result_of(1, {kProse, kC, kPerl, kPython, kPython, kNoise}));
  const std::vector<QString> want = {"prose", "c", "perl", "python", "python", "?"};
  for (int s = 0; s < 6; ++s) EXPECT_EQ(grid.badge_text(s), want[size_t(s)]) << "sequence " << s;
  EXPECT_EQ(grid.kind(0), std::optional<std::optional<ftx::TextKind>>(ftx::TextKind::Prose))
      << "the generated text, not the (Python) prompt";
  ASSERT_TRUE(grid.kind(5).has_value());
  EXPECT_FALSE(grid.kind(5)->has_value()) << "noise: judged, unknown";
  EXPECT_TRUE(grid.group_kinds_text(0).contains("valid 3/3")) << grid.group_kinds_text(0).toStdString();
  EXPECT_TRUE(grid.group_kinds_text(0).contains("agreement 0.00")) << "three kinds, no pair agrees";
  EXPECT_TRUE(grid.group_kinds_text(1).contains("valid 2/3")) << grid.group_kinds_text(1).toStdString();
  EXPECT_TRUE(grid.group_kinds_text(1).contains("agreement 1.00")) << "the two valid ones agree";

  const int redraws = grid.redraws();
  const QString text = grid.cell_text(1);
  grid.set_kinds_shown(false);
  for (int s = 0; s < 6; ++s) EXPECT_EQ(grid.badge_text(s), "");
  EXPECT_EQ(grid.group_kinds_text(1), "");
  grid.set_kinds_shown(true);
  EXPECT_EQ(grid.badge_text(5), "?") << "the judgment is kept, not made again";
  EXPECT_EQ(grid.badge_text(3), "python");
  EXPECT_EQ(grid.cell_text(1), text);
  EXPECT_EQ(grid.redraws(), redraws) << "toggling redraws no text";

  // A click on a badge is a click on its cell: one request for that sequence's latent.
  std::vector<int> activated;
  QObject::connect(&grid, &TextGroupsGrid::row_activated, [&](int seq) { activated.push_back(seq); });
  QLabel* badge = nullptr;
  for (QLabel* l : grid.findChildren<QLabel*>())
    if (l->text() == "perl" && l->parentWidget() && l->parentWidget()->property("seq").isValid()) badge = l;
  ASSERT_NE(badge, nullptr);
  QMouseEvent release(QEvent::MouseButtonRelease, QPointF(3, 3), badge->mapToGlobal(QPointF(3, 3)), Qt::LeftButton,
                      Qt::NoButton, Qt::NoModifier);
  QApplication::sendEvent(badge, &release);
  EXPECT_EQ(activated, std::vector<int>{2});

  grid.set_plan(two_groups_of_three(2), "next");
  EXPECT_EQ(grid.badge_text(0), "…") << "a new plan starts unjudged";
}

TEST(TextGenerationsView, KindsCheckboxShowsTheBadgesWithoutANewRequest) {
  ViewHarness h;
  h.view.add_model(1, info_of(8));
  auto* box = [&]() -> QCheckBox* {
    for (QCheckBox* c : h.view.findChildren<QCheckBox*>())
      if (c->text() == "Kinds") return c;
    return nullptr;
  }();
  ASSERT_NE(box, nullptr) << "a Kinds check box";
  EXPECT_FALSE(box->isChecked());
  // The kinds lesson's settings, through the setters.
  h.view.set_prompt("<|endoftext|>");
  h.view.set_groups(3, 4);
  h.view.set_max_new_tokens(200);
  h.view.set_sampling(1.0, 1.0);
  h.view.set_kinds_shown(true);
  EXPECT_TRUE(box->isChecked());
  EXPECT_TRUE(h.view.kinds_shown());
  EXPECT_TRUE(h.view.grid()->kinds_shown());
  ASSERT_TRUE(h.view.generate());
  const TextJob& j = h.jobs.back();
  EXPECT_EQ(j.prompt, "<|endoftext|>");
  EXPECT_EQ(j.groups.fixed_groups, 3);
  EXPECT_EQ(j.groups.group_size, 4);
  EXPECT_EQ(j.groups.sample.max_new_tokens, 200);
  EXPECT_FLOAT_EQ(j.groups.sample.temperature, 1.0f);
  EXPECT_FLOAT_EQ(j.groups.sample.top_p, 1.0f);
  h.answer(4, 4, true);  // every text "done": no kind
  TextGroupsGrid* grid = h.view.grid();
  ASSERT_EQ(grid->sequences(), 16);
  for (int s = 0; s < 16; ++s) EXPECT_EQ(grid->badge_text(s), "?");
  EXPECT_TRUE(grid->group_kinds_text(2).contains("valid 0/4")) << grid->group_kinds_text(2).toStdString();
  box->setChecked(false);  // as a click does
  EXPECT_FALSE(grid->kinds_shown());
  EXPECT_EQ(grid->badge_text(0), "");
  box->setChecked(true);
  EXPECT_EQ(grid->badge_text(0), "?");
  EXPECT_EQ(h.jobs.size(), 1u) << "ticking Kinds generates nothing";
}

// ---------------------------------------------------------------------------------------------
// LessonsView: "Z picks the document"

ftx::KindsLesson measured_pair() {
  ftx::KindsLesson l;
  l.free.run = "kinds-free", l.free.step = 6000, l.free.latent_bits = 8, l.free.val_ce = 1.234;
  ftx::KindsNumbers k;
  k.agree_fixed = {0.94, 0.02, 8}, k.agree_indep = {0.31, 0.05, 30}, k.valid = {0.86, 0.03, 96};
  k.valid_fixed = {0.9, 0.03, 64};
  k.chance = 0.29;
  l.free.kinds = k;
  l.baseline.run = "kinds-baseline", l.baseline.step = 6000, l.baseline.val_ce = 1.221;
  l.model_path = "/models/kinds-free";
  return l;
}

TEST(LessonsView, KindsLessonShowsThePairsNumbersAndSaysWhenItIsMissing) {
  ftx::register_view_meta_types();
  ftx::LessonsView view;
  EXPECT_FALSE(view.kinds_generate_enabled()) << "nothing to open before the store is read";
  EXPECT_EQ(view.kinds_numbers(), "");

  view.show_kinds_lesson(ftx::KindsLesson{});
  EXPECT_EQ(view.kinds_numbers(), "");
  EXPECT_TRUE(view.kinds_message().contains("not in this run store")) << view.kinds_message().toStdString();
  EXPECT_TRUE(view.kinds_message().contains("./run.sh"));
  EXPECT_FALSE(view.kinds_message().contains('\n')) << "one line";
  EXPECT_FALSE(view.kinds_generate_enabled());

  view.show_kinds_lesson(measured_pair());
  const QString n = view.kinds_numbers();
  for (const char* want :
       {"kinds-free", "Free Transformer, H = 8", "step 6000", "0.94 ± 0.02", "(8 groups)", "0.31 ± 0.05", "chance 0.29",
        "0.86 ± 0.03", "(96 sequences)", "1.234", "kinds-baseline", "1.221", "+0.013"})
    EXPECT_TRUE(n.contains(QString::fromUtf8(want))) << want << " in " << n.toStdString();
  EXPECT_TRUE(view.kinds_message().contains("ftx generate --kinds")) << view.kinds_message().toStdString();
  ASSERT_TRUE(view.kinds_generate_enabled());
  std::vector<QString> asked;
  QObject::connect(&view, &ftx::LessonsView::kinds_generate_requested, [&](QString path) { asked.push_back(path); });
  view.press_kinds_generate();
  ASSERT_EQ(asked.size(), 1u);
  EXPECT_EQ(asked[0], "/models/kinds-free");

  ftx::KindsLesson no_base = measured_pair();
  no_base.baseline = {};
  no_base.free.kinds.reset();
  view.show_kinds_lesson(no_base);
  EXPECT_TRUE(view.kinds_numbers().contains("<b>kinds-baseline</b>: not in the store"))
      << view.kinds_numbers().toStdString();
  EXPECT_TRUE(view.kinds_numbers().contains("not measured")) << "no kinds/... metrics at the checkpoint";
  EXPECT_FALSE(view.kinds_numbers().contains("+0.013")) << "no difference without the baseline";
}

// ---------------------------------------------------------------------------------------------
// ModelWorker

class ModelWorkerTest : public ftx::test::TempDirTest {
 protected:
  ModelWorkerTest() : TempDirTest("ftx_model_worker_") {}
};

TEST_F(ModelWorkerTest, LoadsWithProgressAndStreamsTheGroups) {
  const std::string dir = save_tiny_checkpoint(in_dir("free"), 4);
  WorkerHarness w;
  ASSERT_TRUE(w.open(1, dir));
  ASSERT_EQ(w.failed.count(1), 0u) << w.failed[1].toStdString();
  ASSERT_TRUE(w.opened.count(1));
  EXPECT_EQ(w.opened[1]->config.latent_bits, 4);
  ASSERT_FALSE(w.progress[1].empty());
  qint64 last = -1;
  for (auto [done, total] : w.progress[1]) {
    EXPECT_GE(done, last);
    EXPECT_LE(done, total);
    last = done;
  }
  EXPECT_EQ(w.progress[1].back().first, w.progress[1].back().second) << "the last report is the whole model";

  const TextJob job = job_for(1, 1, "the sea", 3, 2, 20);
  const TextJobResult* r = w.run(job);
  ASSERT_NE(r, nullptr);
  ASSERT_TRUE(r->error.isEmpty()) << r->error.toStdString();
  ASSERT_EQ(w.plans.size(), 1u);
  const TextJobPlan& plan = w.plans[0];
  EXPECT_TRUE(plan.has_latent);
  ASSERT_EQ(plan.groups.size(), 3u);
  EXPECT_EQ(plan.prompt_text, "the sea");
  EXPECT_EQ(plan.prompt_tokens, 7);
  ASSERT_EQ(r->texts.size(), 9u);
  EXPECT_EQ(r->new_tokens, 9 * 20) << "no end id in this vocabulary: every sequence runs to max_new_tokens";
  for (int s = 0; s < 9; ++s) {
    EXPECT_EQ(r->texts[size_t(s)].size(), 20u);
    EXPECT_EQ(w.streamed[1][s], r->texts[size_t(s)]) << "the streamed pieces add up to the text, sequence " << s;
    EXPECT_EQ(r->finish[size_t(s)], "length");
  }
  EXPECT_GE(w.batches[1], 1);

  // The latent of a text, and a text the tokenizer cannot encode.
  w.call([](ModelWorker* m) { m->inspect(1, 1, "the sea was calm.", 0, 5); });
  ASSERT_TRUE(wait_until([&] { return !w.latents.empty(); }));
  EXPECT_EQ(w.latents[0].T, 16);
  EXPECT_EQ(w.latents[0].H, 4);
  EXPECT_EQ(w.latents[0].tokens.size(), 17u);
  EXPECT_TRUE(w.latents[0].regenerated_tokens.empty()) << "typed text: no prompt, no regeneration";
  w.call([](ModelWorker* m) { m->inspect(2, 1, "The Sea", 0, 5); });
  ASSERT_TRUE(wait_until([&] { return !w.latent_errors.empty(); }));
  EXPECT_TRUE(w.latent_errors[0].startsWith("prompt: ")) << w.latent_errors[0].toStdString();
}

TEST_F(ModelWorkerTest, StopCancelsTheRunningJobAndOneStillQueued) {
  const std::string dir = save_tiny_checkpoint(in_dir("free"), 4);
  WorkerHarness w;
  ASSERT_TRUE(w.open(1, dir));
  // Stop pressed while job 1 runs: from the worker's own thread as job 1 starts, so that the job
  // is surely running (a tiny model would finish before a queued Stop arrived).
  QObject::connect(
      w.worker, &ModelWorker::planned, w.worker,
      [&w](const TextJobPlan& p) {
        if (p.id == 1) w.worker->cancel(1);
      },
      Qt::DirectConnection);
  w.call([](ModelWorker* m) { m->generate(job_for(1, 1, "a", 4, 1, 60)); });
  w.call([](ModelWorker* m) { m->generate(job_for(2, 1, "b", 4, 1, 60)); });
  ASSERT_TRUE(wait_until([&] { return w.result(2) != nullptr; }));
  ASSERT_NE(w.result(1), nullptr);
  EXPECT_TRUE(w.result(1)->cancelled);
  EXPECT_LE(w.result(1)->new_tokens, 8) << "stopped at the first token";
  EXPECT_FALSE(w.result(2)->cancelled) << "a later job is not affected";
  EXPECT_EQ(w.result(2)->new_tokens, 8 * 60);
  // Stop for a job still queued: it never starts.
  w.worker->cancel(3);
  const TextJobResult* r = w.run(job_for(3, 1, "c", 4, 1, 60));
  ASSERT_NE(r, nullptr);
  EXPECT_TRUE(r->cancelled);
  EXPECT_EQ(r->new_tokens, 0);
  EXPECT_EQ(w.plans.size(), 2u) << "no plan for job 3";
}

TEST_F(ModelWorkerTest, FlipsOfAGenerationsLatentRegenerateItsText) {
  const std::string dir = save_tiny_checkpoint(in_dir("free"), 4);
  WorkerHarness w;
  std::vector<std::vector<std::string>> edits;
  QObject::connect(w.worker, &ModelWorker::edited_ready, &w.ctx,
                   [&](std::vector<std::string> tokens, QString) { edits.push_back(tokens); });
  ASSERT_TRUE(w.open(1, dir));
  // "the sea" is the prompt (7 bytes, 7 tokens) of a 20-token text.
  w.call([](ModelWorker* m) { m->inspect(1, 1, "the sea was calm. a", 7, 5); });
  ASSERT_TRUE(wait_until([&] { return !w.latents.empty() || !w.latent_errors.empty(); }));
  ASSERT_FALSE(w.latents.empty()) << w.latent_errors[0].toStdString();
  const ftx::LatentInspection& li = w.latents[0];
  ASSERT_EQ(li.regenerated_tokens.size(), li.tokens.size()) << "the regeneration lines up with the text";
  for (int i = 0; i < 7; ++i) EXPECT_EQ(li.regenerated_tokens[size_t(i)], li.tokens[size_t(i)]) << "the prompt";
  w.worker->request_edit({});
  ASSERT_TRUE(wait_until([&] { return edits.size() == 1; }));
  EXPECT_EQ(edits[0], li.regenerated_tokens) << "no flips: the original";
  w.worker->request_edit({{7, 0}, {8, 1}, {9, 2}});
  ASSERT_TRUE(wait_until([&] { return edits.size() == 2; }));
  ASSERT_EQ(edits[1].size(), li.tokens.size());
  EXPECT_TRUE(std::equal(edits[1].begin(), edits[1].begin() + 8, li.regenerated_tokens.begin()))
      << "a flip at position 7 changes tokens 8 on, not before";
}

TEST_F(ModelWorkerTest, MissingFilesAndPlainDecodersAreOneLineMessages) {
  const std::string plain = save_tiny_checkpoint(in_dir("plain"), 0);
  WorkerHarness w;
  ASSERT_TRUE(w.open(1, in_dir("nothing-here.gguf")));
  ASSERT_TRUE(w.failed.count(1));
  EXPECT_NE(w.failed[1].indexOf("nothing-here.gguf"), -1) << w.failed[1].toStdString();
  EXPECT_EQ(w.failed[1].indexOf('\n'), -1);

  ASSERT_TRUE(w.open(2, plain));
  ASSERT_TRUE(w.loaded.count(2));
  EXPECT_FALSE(w.opened[2]->config.is_free());
  w.call([](ModelWorker* m) { m->inspect(1, 2, "the sea", 0, 5); });
  ASSERT_TRUE(wait_until([&] { return !w.latent_errors.empty(); }));
  EXPECT_EQ(w.latent_errors[0], "this model has no latent Z (plain decoder)");
  const TextJobResult* r = w.run(job_for(5, 2, "the", 2, 3, 5));
  ASSERT_NE(r, nullptr);
  ASSERT_EQ(w.plans.size(), 1u);
  EXPECT_FALSE(w.plans[0].has_latent);
  EXPECT_EQ(w.plans[0].groups.size(), 1u) << "a plain decoder: one group, whatever was asked";
  const TextJobResult* missing = w.run(job_for(6, 99, "the", 1, 0, 5));
  ASSERT_NE(missing, nullptr);
  EXPECT_FALSE(missing->error.isEmpty());
}

TEST(RealModel, SmolLM2AnswersThroughTheWorkerAndLendsItsTokenizer) {
  const std::string path = ftx::test::smollm2_gguf_path();
  REQUIRE_REAL_MODEL(path);
  WorkerHarness w;
  ASSERT_TRUE(w.open(1, path));
  ASSERT_TRUE(w.loaded.count(1)) << w.failed[1].toStdString();
  const ftx::ModelInfo& info = *w.opened[1];
  EXPECT_EQ(info.format, "gguf");
  EXPECT_FALSE(info.config.is_free());
  EXPECT_EQ(ModelsView::params_text(info.n_params), "135 M");
  EXPECT_EQ(ftx::chat_format(info.chat_template), ftx::ChatFormat::ChatML);

  TextJob job = job_for(1, 1, "What is the capital of France?", 2, 2, 12);
  job.chat = true;
  job.groups.sample.temperature = 0;
  const TextJobResult* r = w.run(job);
  ASSERT_NE(r, nullptr);
  ASSERT_TRUE(r->error.isEmpty()) << r->error.toStdString();
  ASSERT_EQ(r->texts.size(), 2u) << "a plain decoder: one group of 2";
  EXPECT_EQ(r->texts[0], "The capital of France is Paris.");
  EXPECT_EQ(r->finish[0], "eos");
  EXPECT_EQ(w.streamed[1][0], r->texts[0]);
  EXPECT_EQ(w.plans[0].prompt_text,
            "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n");

  ftx::ShapeOverrides o;
  o.layers = 4, o.dim = 128, o.latent_bits = 8;
  auto cfg = ftx::shape_model_config(o, info.tokenizer->vocab_size(), 256);
  ASSERT_TRUE(cfg.ok()) << cfg.error().message;
  w.call([c = *cfg](ModelWorker* m) { m->open_random(2, c, 1, 1); });
  ASSERT_TRUE(wait_until([&] { return w.loaded.count(2) || w.failed.count(2); }));
  ASSERT_TRUE(w.loaded.count(2)) << w.failed[2].toStdString();
  EXPECT_TRUE(w.opened[2]->config.is_free());
  EXPECT_EQ(w.opened[2]->chat_template, info.chat_template) << "the borrowed prompt conventions";
  w.call([](ModelWorker* m) { m->inspect(1, 2, "The sea was calm.\nThe boat", 0, 5); });
  ASSERT_TRUE(wait_until([&] { return !w.latents.empty() || !w.latent_errors.empty(); }));
  ASSERT_FALSE(w.latents.empty()) << w.latent_errors[0].toStdString();
  const ftx::LatentInspection& li = w.latents[0];
  EXPECT_EQ(li.H, 8);
  ASSERT_EQ(static_cast<int>(li.tokens.size()), li.T + 1);
  EXPECT_EQ(printable_token(li.tokens[1]), "\xC2\xB7sea") << "BPE tokens carry their leading space";
  std::string joined;
  for (const std::string& t : li.tokens) joined += t;
  EXPECT_EQ(joined, "The sea was calm.\nThe boat");
}

}  // namespace

// Widgets need a QApplication; the offscreen platform needs no display.
int main(int argc, char** argv) {
  qputenv("QT_QPA_PLATFORM", "offscreen");
  ::testing::InitGoogleTest(&argc, argv);
  QApplication app(argc, argv);
  return RUN_ALL_TESTS();
}
