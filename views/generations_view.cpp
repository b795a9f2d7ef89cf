#include "views/generations_view.h"

#include <QComboBox>
#include <QDoubleSpinBox>
#include <QFileDialog>
#include <QHBoxLayout>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QLabel>
#include <QLineEdit>
#include <QPushButton>
#include <QRandomGenerator>
#include <QRegularExpression>
#include <QSaveFile>
#include <QScrollArea>
#include <QSpinBox>
#include <QVBoxLayout>
#include <algorithm>
#include <cmath>

#include "views/sequence_grid.h"

namespace ftx {

namespace {

const char* const kErrorStyle = "color: #e03131;";
const char* const kBadPromptStyle = "QLineEdit { border: 2px solid #e03131; border-radius: 3px; padding: 1px 3px; }";

// Seeds are 64-bit: JSON numbers (doubles) would round them, so they are written as strings.
QString seed_text(uint64_t seed) { return QString::number(static_cast<qulonglong>(seed)); }
QJsonValue metric_json(double v) { return std::isnan(v) ? QJsonValue() : QJsonValue(v); }
QString metric_text(double v) { return std::isnan(v) ? QStringLiteral("–") : QString::number(v, 'f', 2); }
QString percent_text(double v) {
  return std::isnan(v) ? QStringLiteral("–") : QString::number(v * 100.0, 'f', 0) + QStringLiteral(" %");
}

QJsonObject row_json(const ftx::GroupRow& row) {
  QJsonArray codes, starts;
  for (uint32_t c : row.codes) codes.append(static_cast<qint64>(c));
  for (int s : row.starts) starts.append(s);
  return {{"text", QString::fromStdString(row.text)},
          {"valid", row.valid},
          {"starts", starts},
          {"latent_seed", seed_text(row.latent_seed)},
          {"sample_seed", seed_text(row.sample_seed)},
          {"codes", codes}};
}

QJsonArray groups_json(const std::vector<ftx::GroupView>& groups) {
  QJsonArray out;
  for (const ftx::GroupView& g : groups) {
    QJsonArray rows;
    for (const ftx::GroupRow& row : g.rows) rows.append(row_json(row));
    QJsonObject o{{"group", g.group},
                  {"fixed", g.fixed},
                  {"valid", metric_json(g.valid)},
                  {"agreement", metric_json(g.agreement)},
                  {"noise_agreement", metric_json(g.noise_agreement)},
                  {"target_start", g.start},
                  {"rows", rows}};
    if (!g.router.empty()) o["router"] = QString::fromStdString(g.router);
    out.append(o);
  }
  return out;
}

QJsonObject request_json(const ftx::Figure4Request& req) {
  return {{"prompt", QString::fromStdString(req.prompt)},
          {"fixed_groups", req.fixed_groups},
          {"group_size", req.group_size},
          {"seed", seed_text(req.seed)},
          {"temperature", static_cast<double>(req.temperature)}};
}

QString groups_text(const std::vector<ftx::GroupView>& groups) {
  QString out;
  for (const ftx::GroupView& g : groups) {
    const QString title = g.fixed ? QStringLiteral("Fixed Z #%1").arg(g.group) : QStringLiteral("Independent Z");
    out += QStringLiteral("\n## %1   valid %2   agreement %3   noise agreement %4   target at %5\n")
               .arg(title, percent_text(g.valid), metric_text(g.agreement), metric_text(g.noise_agreement),
                    g.start >= 0 ? QString::number(g.start) : QStringLiteral("–"));
    for (const ftx::GroupRow& row : g.rows)
      out += QString::fromStdString(row.text) + (row.valid ? QString() : QStringLiteral("   (invalid)")) + '\n';
  }
  return out;
}

bool write_file(const QString& path, const QByteArray& bytes) {
  QSaveFile file(path);
  if (!file.open(QIODevice::WriteOnly)) return false;
  file.write(bytes);
  return file.commit();
}

// "Agreement by target start (fixed-Z sequences): 0-7 0.43 (7) · ... · from 32 0.10 (12)";
// empty without a valid fixed-Z sequence.
QString by_start_text(const std::vector<ftx::GroupView>& groups) {
  const std::vector<ftx::StartBin> bins = ftx::fixed_groups_by_start(groups);
  QStringList parts;
  for (size_t i = 0; i + 1 < bins.size(); ++i)
    if (bins[i].generations > 0)
      parts << GenerationsView::tr("%1–%2: %3 (%4)")
                   .arg(bins[i].lo)
                   .arg(bins[i].hi)
                   .arg(bins[i].agreement, 0, 'f', 2)
                   .arg(bins[i].generations);
  if (parts.isEmpty()) return QString();
  const ftx::StartBin& late = bins.back();
  const QString from = late.generations > 0
                           ? GenerationsView::tr("%1 (%2)").arg(late.agreement, 0, 'f', 2).arg(late.generations)
                           : QStringLiteral("–");
  return GenerationsView::tr("Agreement by target start (fixed-Z sequences): %1 · from %2 on: %3")
      .arg(parts.join(QStringLiteral(" · ")))
      .arg(ftx::kLateStart)
      .arg(from);
}

}  // namespace

GenerationsView::GenerationsView(QWidget* parent) : QWidget(parent) {
  grid_ = new SequenceGrid;
  grid_->set_placeholder(tr("No generations yet: pick a run and a prompt, then press Resample Z."));
  auto* scroll = new QScrollArea;
  scroll->setWidget(grid_);
  scroll->setWidgetResizable(true);
  scroll->setFrameShape(QFrame::StyledPanel);

  message_ = new QLabel;
  message_->setWordWrap(true);
  message_->setTextInteractionFlags(Qt::TextSelectableByMouse);
  message_->setMinimumHeight(message_->fontMetrics().height());  // reserved: messages do not shift the grid

  by_start_ = new QLabel;
  by_start_->setObjectName("by_start");
  by_start_->setWordWrap(true);
  by_start_->setTextInteractionFlags(Qt::TextSelectableByMouse);
  by_start_->setToolTip(
      tr("For each sequence of a fixed-Z group: the share of its group that puts the target where it does, by "
         "where its target starts (docs/figure4.md). Over a few groups this is noisy: ftx generate --fixed-groups "
         "32 measures it over many."));

  auto* layout = new QVBoxLayout(this);
  layout->addWidget(build_selectors());
  layout->addWidget(build_buttons());
  layout->addWidget(message_);
  layout->addWidget(by_start_);
  layout->addWidget(scroll, 1);
  update_enabled();
}

QWidget* GenerationsView::build_selectors() {
  run_box_ = new QComboBox;
  run_box_->setMinimumContentsLength(12);
  run_box_->setSizeAdjustPolicy(QComboBox::AdjustToMinimumContentsLengthWithIcon);
  run_box_->setPlaceholderText(tr("no runs"));
  step_box_ = new QComboBox;
  step_box_->setMinimumContentsLength(10);
  step_box_->setPlaceholderText(tr("latest"));
  prompt_edit_ = new QLineEdit(QStringLiteral("K>"));
  prompt_edit_->setFixedWidth(prompt_edit_->fontMetrics().horizontalAdvance(QStringLiteral("MMMMMM")) + 16);
  prompt_edit_->setToolTip(tr("The prompt: a letter then '>', e.g. K>"));
  fixed_spin_ = new QSpinBox;
  fixed_spin_->setRange(1, 6);
  fixed_spin_->setValue(3);
  size_spin_ = new QSpinBox;
  size_spin_->setRange(2, 16);
  size_spin_->setValue(8);
  temperature_spin_ = new QDoubleSpinBox;
  temperature_spin_->setRange(0.05, 2.0);
  temperature_spin_->setSingleStep(0.05);
  temperature_spin_->setValue(1.0);
  router_box_ = new QComboBox;
  router_box_->addItem(tr("student"), QStringLiteral("student"));
  router_box_->addItem(tr("teacher"), QStringLiteral("teacher"));
  router_box_->setToolTip(
      tr("Routed runs: who chooses the tokens a routed block computes. The student router decides token by token "
         "(causal, cached); the teacher is the training choice, recomputed over the sequence so far at each step. "
         "Dense runs ignore it."));

  auto* row = new QWidget;
  auto* h = new QHBoxLayout(row);
  h->setContentsMargins(0, 0, 0, 0);
  const std::pair<QString, QWidget*> fields[] = {{tr("Run"), run_box_},          {tr("Step"), step_box_},
                                                 {tr("Prompt"), prompt_edit_},   {tr("Fixed groups"), fixed_spin_},
                                                 {tr("Group size"), size_spin_}, {tr("Temperature"), temperature_spin_},
                                                 {tr("Router"), router_box_}};
  for (const auto& [label, widget] : fields) {
    auto* l = new QLabel(label);
    l->setBuddy(widget);
    h->addWidget(l);
    h->addWidget(widget);
    h->addSpacing(6);
  }
  h->addStretch(1);
  connect(run_box_, &QComboBox::currentIndexChanged, this, [this] { on_run_changed(); });
  connect(prompt_edit_, &QLineEdit::textEdited, this, [this] { on_prompt_edited(); });
  connect(prompt_edit_, &QLineEdit::returnPressed, this, [this] { on_resample(); });
  return row;
}

QWidget* GenerationsView::build_buttons() {
  resample_button_ = new QPushButton(tr("Resample Z"));
  resample_button_->setToolTip(tr("New latent and token seeds for the same prompt"));
  freeze_button_ = new QPushButton(tr("Freeze Z"));
  freeze_button_->setToolTip(tr("Keep every row's codes Z, resample only the tokens"));
  new_prompt_button_ = new QPushButton(tr("New prompt"));
  new_prompt_button_->setToolTip(tr("A random letter prompt, then generate"));
  comparison_button_ = new QPushButton(tr("Kappa comparison"));
  comparison_button_->setCheckable(true);
  comparison_button_->setToolTip(tr("The same prompt for every run of the kappa sweep, one column per run"));
  png_button_ = new QPushButton(tr("PNG…"));
  text_button_ = new QPushButton(tr("Text/JSON…"));

  auto* row = new QWidget;
  auto* h = new QHBoxLayout(row);
  h->setContentsMargins(0, 0, 0, 0);
  for (QPushButton* b : {resample_button_, freeze_button_, new_prompt_button_, comparison_button_}) h->addWidget(b);
  h->addStretch(1);
  h->addWidget(png_button_);
  h->addWidget(text_button_);
  connect(resample_button_, &QPushButton::clicked, this, [this] { on_resample(); });
  connect(freeze_button_, &QPushButton::clicked, this, [this] { on_freeze(); });
  connect(new_prompt_button_, &QPushButton::clicked, this, [this] { on_new_prompt(); });
  connect(comparison_button_, &QPushButton::toggled, this, [this](bool on) { on_comparison_toggled(on); });
  connect(png_button_, &QPushButton::clicked, this, [this] { on_export_png(); });
  connect(text_button_, &QPushButton::clicked, this, [this] { on_export_text(); });
  return row;
}

void GenerationsView::set_runs(const QStringList& runs) {
  QStringList shown;
  for (int i = 0; i < run_box_->count(); ++i) shown << run_box_->itemText(i);
  if (shown == runs) return;  // the owner refreshes often: keep an open popup open
  const QString previous = current_run();
  {
    const QSignalBlocker block(run_box_);
    run_box_->clear();
    run_box_->addItems(runs);
    run_box_->setCurrentIndex(std::max(0, static_cast<int>(runs.indexOf(previous))));
    if (runs.isEmpty()) run_box_->setCurrentIndex(-1);
  }
  if (current_run() != previous) on_run_changed();
  update_enabled();
}

void GenerationsView::set_steps(const QString& run, const QList<int>& steps) {
  QList<int> sorted = steps;
  std::sort(sorted.begin(), sorted.end());
  if (steps_.count(run) && steps_.at(run) == sorted) return;  // unchanged: keep an open popup open
  steps_[run] = sorted;
  if (run == current_run()) fill_steps(run);
}

void GenerationsView::fill_steps(const QString& run) {
  const bool follow_latest = step_box_->currentIndex() <= 0;  // the latest is the first item
  const int previous = current_step();
  const QList<int> steps = steps_.count(run) ? steps_.at(run) : QList<int>();
  const QSignalBlocker block(step_box_);
  step_box_->clear();
  for (auto it = steps.rbegin(); it != steps.rend(); ++it) {
    const QString text = it == steps.rbegin() ? tr("%1 (latest)").arg(*it) : QString::number(*it);
    step_box_->addItem(text, *it);
  }
  const int kept = follow_latest ? -1 : step_box_->findData(previous);
  step_box_->setCurrentIndex(steps.isEmpty() ? -1 : std::max(0, kept));
}

void GenerationsView::set_tokenizer(std::shared_ptr<const ftx::Tokenizer> tokenizer) {
  tokenizer_ = std::move(tokenizer);
  on_prompt_edited();
}

void GenerationsView::set_sweep_runs(const QStringList& runs) { sweep_runs_ = runs; }

bool GenerationsView::save_png(const QString& path) { return grid_->save_png(path); }

QString GenerationsView::current_run() const {
  return run_box_->currentIndex() < 0 ? QString() : run_box_->currentText();
}

int GenerationsView::current_step() const {
  return step_box_->currentIndex() < 0 ? -1 : step_box_->currentData().toInt();
}

void GenerationsView::on_run_changed() {
  step_box_->setCurrentIndex(-1);  // another run: its latest step by default
  fill_steps(current_run());
  emit run_changed(current_run());
}

bool GenerationsView::prompt_ok(QString* problem) const {
  const QString prompt = prompt_edit_->text();
  if (prompt.isEmpty()) {
    *problem = tr("Type a prompt first, e.g. K>");
    return false;
  }
  if (!tokenizer_) return true;
  auto tokens = tokenizer_->encode(prompt.toStdString());
  if (!tokens) *problem = tr("Prompt: %1").arg(QString::fromStdString(tokens.error().message));
  return tokens.ok();
}

bool GenerationsView::check_prompt() {
  QString problem;
  if (prompt_ok(&problem)) return true;
  prompt_edit_->setStyleSheet(QString::fromLatin1(kBadPromptStyle));
  set_message(problem, true);
  return false;
}

void GenerationsView::on_prompt_edited() {
  if (!check_prompt()) return;
  prompt_edit_->setStyleSheet(QString());
  if (message_is_error_) set_message(QString(), false);
}

ftx::Figure4Request GenerationsView::make_request(int fixed_groups) {
  ftx::Figure4Request req;
  req.prompt = prompt_edit_->text().toStdString();
  req.fixed_groups = fixed_groups;
  req.group_size = size_spin_->value();
  req.seed = next_seed_++;
  req.temperature = static_cast<float>(temperature_spin_->value());
  req.router = router_box_->currentData().toString().toStdString();
  return req;
}

void GenerationsView::select_run(const QString& run) {
  const int i = run_box_->findText(run);
  if (i < 0) return set_message(tr("Run '%1' has no checkpoint yet: nothing to generate from").arg(run), true);
  run_box_->setCurrentIndex(i);
  on_resample();
}

void GenerationsView::on_resample() {
  if (busy_ || !check_prompt()) return;
  if (comparison_button_->isChecked()) {
    if (sweep_runs_.isEmpty()) {
      set_message(tr("No kappa sweep runs: train Synthetic runs at several kappas (Train) and overlay them in Runs."),
                  true);
      return;
    }
    pending_ = make_request(1);
    pending_frozen_ = false;
    emit comparison_requested(sweep_runs_, pending_);
    return;
  }
  const QString run = current_run();
  if (run.isEmpty()) {
    set_message(tr("No run selected: train one in Train (dataset Synthetic), then pick it here."), true);
    return;
  }
  pending_ = make_request(fixed_spin_->value());
  pending_frozen_ = false;
  emit figure4_requested(run, current_step(), pending_);
}

void GenerationsView::on_freeze() {
  if (busy_) return;
  if (groups_.empty()) {
    set_message(tr("Nothing to freeze yet: generate with Resample Z first."), true);
    return;
  }
  const quint64 sample_seed = next_seed_++;
  const float temperature = static_cast<float>(temperature_spin_->value());
  pending_ = groups_request_;
  pending_.seed = sample_seed;
  pending_.temperature = temperature;
  pending_frozen_ = true;
  emit freeze_requested(groups_run_, groups_step_, QString::fromStdString(groups_request_.prompt), groups_, sample_seed,
                        temperature);
}

void GenerationsView::on_new_prompt() {
  if (busy_) return;
  QString letters;  // synthetic-task prompts "<letter>>" the tokenizer can encode
  for (char c = 'A'; c <= 'Z'; ++c)
    if (!tokenizer_ || tokenizer_->encode(std::string{c, '>'}).ok()) letters += QLatin1Char(c);
  const QString current = prompt_edit_->text().left(1);
  if (letters.size() > 1) letters.remove(current);
  if (letters.isEmpty()) return;
  const int pick = static_cast<int>(QRandomGenerator::global()->bounded(static_cast<quint32>(letters.size())));
  prompt_edit_->setText(letters.mid(pick, 1) + QLatin1Char('>'));
  on_prompt_edited();
  on_resample();
}

void GenerationsView::on_comparison_toggled(bool on) {
  update_enabled();
  show_current();
  const bool stale = columns_.empty() || columns_request_.prompt != prompt_edit_->text().toStdString();
  if (on && stale) on_resample();
}

void GenerationsView::show_groups(QString run, int step, std::vector<ftx::GroupView> groups) {
  groups_run_ = run;
  groups_step_ = step;
  groups_ = std::move(groups);
  groups_request_ = pending_;
  groups_frozen_ = pending_frozen_;
  if (comparison_button_->isChecked()) {
    const QSignalBlocker block(comparison_button_);
    comparison_button_->setChecked(false);
  }
  if (message_is_error_) set_message(QString(), false);
  update_enabled();
  show_current();
}

void GenerationsView::show_comparison(GroupColumns columns) {
  columns_ = std::move(columns);
  columns_request_ = pending_;
  if (!comparison_button_->isChecked()) {
    const QSignalBlocker block(comparison_button_);
    comparison_button_->setChecked(true);
  }
  if (message_is_error_) set_message(QString(), false);
  update_enabled();
  show_current();
}

void GenerationsView::show_current() {
  if (comparison_button_->isChecked()) {
    if (columns_.empty())
      grid_->set_placeholder(tr("Kappa comparison: press Resample Z to generate the prompt with every sweep run."));
    else
      grid_->set_columns(columns_, columns_caption());
  } else if (groups_.empty()) {
    grid_->set_placeholder(tr("No generations yet: pick a run and a prompt, then press Resample Z."));
  } else {
    grid_->set_groups(groups_, groups_caption());
  }
  by_start_->setText(comparison_button_->isChecked() ? QString() : by_start_text(groups_));
  by_start_->setVisible(!by_start_->text().isEmpty());
}

QString GenerationsView::groups_caption() const {
  const QString step = groups_step_ < 0 ? tr("latest step") : tr("step %1").arg(groups_step_);
  const QString seeds = groups_frozen_ ? tr("Z frozen, tokens resampled (sample seed %1)").arg(groups_request_.seed)
                                       : tr("seed %1").arg(groups_request_.seed);
  const QString router = groups_.empty() || groups_[0].route_path.empty()
                             ? QString()
                             : QStringLiteral(" · ") + QString::fromStdString(groups_[0].route_path);
  return tr("%1 · %2 · prompt %3 · %4 · temperature %5%6")
      .arg(groups_run_, step, QString::fromStdString(groups_request_.prompt), seeds)
      .arg(groups_request_.temperature, 0, 'f', 2)
      .arg(router);
}

QString GenerationsView::columns_caption() const {
  return tr("Kappa comparison · each run's latest checkpoint · prompt %1 · seed %2 · temperature %3")
      .arg(QString::fromStdString(columns_request_.prompt))
      .arg(columns_request_.seed)
      .arg(columns_request_.temperature, 0, 'f', 2);
}

void GenerationsView::show_error(QString message) { set_message(message, true); }

void GenerationsView::set_busy(bool busy) {
  busy_ = busy;
  update_enabled();
  if (busy)
    set_message(tr("computing…"), false);
  else if (!message_is_error_)
    set_message(QString(), false);
}

void GenerationsView::set_message(const QString& text, bool error) {
  message_is_error_ = error && !text.isEmpty();
  message_->setStyleSheet(error ? QString::fromLatin1(kErrorStyle) : QString());
  message_->setText(text);
}

void GenerationsView::update_enabled() {
  const bool comparison = comparison_button_->isChecked();
  const bool shown = comparison ? !columns_.empty() : !groups_.empty();
  for (QPushButton* b : {resample_button_, new_prompt_button_, comparison_button_}) b->setEnabled(!busy_);
  freeze_button_->setEnabled(!busy_ && !comparison && !groups_.empty());
  png_button_->setEnabled(!busy_ && shown);
  text_button_->setEnabled(!busy_ && shown);
  run_box_->setEnabled(!comparison);
  step_box_->setEnabled(!comparison);
  fixed_spin_->setEnabled(!comparison);
}

QString GenerationsView::export_base_name() const {
  const ftx::Figure4Request& req = comparison_button_->isChecked() ? columns_request_ : groups_request_;
  QString prompt = QString::fromStdString(req.prompt);
  prompt.remove(QRegularExpression(QStringLiteral("[^A-Za-z0-9]")));
  if (comparison_button_->isChecked()) return QStringLiteral("generations-kappa-%1").arg(prompt);
  QString run = groups_run_;
  run.replace(QRegularExpression(QStringLiteral("[^A-Za-z0-9._-]")), QStringLiteral("_"));
  return QStringLiteral("generations-%1-step%2-%3").arg(run).arg(groups_step_).arg(prompt);
}

void GenerationsView::on_export_png() {
  const QString name = export_base_name() + QStringLiteral(".png");
  const QString path = QFileDialog::getSaveFileName(this, tr("Save PNG"), name, tr("PNG (*.png)"));
  if (path.isEmpty()) return;
  if (!save_png(path)) show_error(tr("Could not write %1").arg(path));
}

void GenerationsView::on_export_text() {
  QString filter;
  const QString name = export_base_name() + QStringLiteral(".txt");
  const QString path =
      QFileDialog::getSaveFileName(this, tr("Export generations"), name, tr("Text (*.txt);;JSON (*.json)"), &filter);
  if (path.isEmpty()) return;
  const bool json = path.endsWith(QStringLiteral(".json"), Qt::CaseInsensitive) ||
                    (filter.contains(QStringLiteral("json"), Qt::CaseInsensitive) && !path.contains(QLatin1Char('.')));
  const QByteArray bytes = json ? QJsonDocument(export_json()).toJson(QJsonDocument::Indented) : export_text().toUtf8();
  if (!write_file(path, bytes)) show_error(tr("Could not write %1").arg(path));
}

QJsonObject GenerationsView::export_json() const {
  if (!comparison_button_->isChecked())
    return {{"mode", groups_frozen_ ? "frozen_z" : "figure4"},
            {"run", groups_run_},
            {"step", groups_step_},
            {"request", request_json(groups_request_)},
            {"groups", groups_json(groups_)}};
  QJsonArray columns;
  for (const auto& [caption, groups] : columns_)
    columns.append(QJsonObject{{"caption", caption}, {"groups", groups_json(groups)}});
  return {{"mode", "kappa_comparison"}, {"request", request_json(columns_request_)}, {"columns", columns}};
}

QString GenerationsView::export_text() const {
  if (!comparison_button_->isChecked()) return QStringLiteral("# ") + groups_caption() + '\n' + groups_text(groups_);
  QString text = QStringLiteral("# ") + columns_caption() + '\n';
  for (const auto& [caption, groups] : columns_) text += QStringLiteral("\n# ") + caption + '\n' + groups_text(groups);
  return text;
}

}  // namespace ftx
