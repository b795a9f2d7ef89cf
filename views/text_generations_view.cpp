#include "views/text_generations_view.h"

#include <QCheckBox>
#include <QComboBox>
#include <QDoubleSpinBox>
#include <QHBoxLayout>
#include <QLabel>
#include <QPlainTextEdit>
#include <QPushButton>
#include <QScrollArea>
#include <QSpinBox>
#include <QVBoxLayout>

#include "views/models_view.h"
#include "views/text_groups_grid.h"

namespace ftx {

namespace {

const char* const kErrorStyle = "color: #e03131;";
const char* const kNoZStyle =
    "QLabel { background: #fff4e6; color: #7c4a03; border: 1px solid #f0c36d;"
    " border-radius: 3px; padding: 4px 8px; }";
const char* const kFreeStyle =
    "QLabel { background: #ebfbee; color: #1b5e20; border: 1px solid #8ce99a;"
    " border-radius: 3px; padding: 4px 8px; }";
const QString kDefaultPrompt = QStringLiteral("Write one sentence about the sea.");

QString seed_text(uint64_t s) { return QString::number(static_cast<qulonglong>(s)); }

}  // namespace

TextGenerationsView::TextGenerationsView(QWidget* parent) : QWidget(parent) {
  grid_ = new TextGroupsGrid;
  auto* scroll = new QScrollArea;
  scroll->setWidget(grid_);
  scroll->setWidgetResizable(true);
  scroll->setFrameShape(QFrame::StyledPanel);
  notice_ = new QLabel;
  notice_->setWordWrap(true);
  notice_->hide();
  status_ = new QLabel;
  status_->setWordWrap(true);
  status_->setTextInteractionFlags(Qt::TextSelectableByMouse);
  status_->setMinimumHeight(status_->fontMetrics().height());
  auto* layout = new QVBoxLayout(this);
  layout->addWidget(build_controls());
  layout->addWidget(build_buttons());
  layout->addWidget(notice_);
  layout->addWidget(status_);
  layout->addWidget(scroll, 1);
  connect(grid_, &TextGroupsGrid::row_activated, this, [this](int seq) {
    if (!plan_ || !last_job_) return;
    emit inspect_requested(last_job_->model, QString::fromStdString(plan_->prompt_text) + grid_->text(seq),
                           static_cast<int>(plan_->prompt_text.size()));
  });
  update_enabled();
}

QWidget* TextGenerationsView::build_controls() {
  model_box_ = new QComboBox;
  model_box_->setMinimumContentsLength(24);
  model_box_->setSizeAdjustPolicy(QComboBox::AdjustToMinimumContentsLengthWithIcon);
  model_box_->setPlaceholderText(tr("no model: File → Open model"));
  prompt_ = new QPlainTextEdit(kDefaultPrompt);
  prompt_->setToolTip(tr("The prompt (free text)"));
  prompt_->setFixedHeight(prompt_->fontMetrics().height() * 3 + 12);
  chat_ = new QCheckBox(tr("Chat"));
  chat_->setChecked(true);
  chat_->hide();
  auto spin = [](int lo, int hi, int value) {
    auto* s = new QSpinBox;
    s->setRange(lo, hi);
    s->setValue(value);
    return s;
  };
  max_new_ = spin(1, 1024, 48);
  seed_ = spin(0, 1'000'000'000, 1);
  group_size_ = spin(1, 16, 4);
  fixed_groups_ = spin(0, 8, 2);
  temperature_ = new QDoubleSpinBox;
  temperature_->setRange(0.0, 2.0);
  temperature_->setSingleStep(0.05);
  temperature_->setValue(0.8);
  temperature_->setToolTip(tr("0 = greedy"));
  top_p_ = new QDoubleSpinBox;
  top_p_->setRange(0.05, 1.0);
  top_p_->setSingleStep(0.05);
  top_p_->setValue(0.95);

  auto* box = new QWidget;
  auto* v = new QVBoxLayout(box);
  v->setContentsMargins(0, 0, 0, 0);
  auto* top = new QHBoxLayout;
  top->addWidget(new QLabel(tr("Model")));
  top->addWidget(model_box_, 1);
  top->addWidget(chat_);
  v->addLayout(top);
  v->addWidget(prompt_);
  auto* row = new QHBoxLayout;
  const std::pair<QString, QWidget*> fields[] = {{tr("Max new tokens"), max_new_},
                                                 {tr("Temperature"), temperature_},
                                                 {tr("Top-p"), top_p_},
                                                 {tr("Seed"), seed_},
                                                 {tr("Group size"), group_size_},
                                                 {tr("Fixed-Z groups"), fixed_groups_}};
  for (const auto& [label, widget] : fields) {
    auto* l = new QLabel(label);
    l->setBuddy(widget);
    row->addWidget(l);
    row->addWidget(widget);
    row->addSpacing(4);
  }
  row->addStretch(1);
  v->addLayout(row);
  connect(model_box_, &QComboBox::currentIndexChanged, this, [this] { on_model_changed(); });
  return box;
}

QWidget* TextGenerationsView::build_buttons() {
  generate_ = new QPushButton(tr("Generate"));
  stop_ = new QPushButton(tr("Stop"));
  resample_ = new QPushButton(tr("Resample Z"));
  resample_->setToolTip(tr("New latent seeds for the same prompt; token seeds kept"));
  freeze_ = new QPushButton(tr("Freeze Z"));
  freeze_->setToolTip(tr("Keep every group's Z; new token sampling seeds"));
  kinds_ = new QCheckBox(tr("Kinds"));
  kinds_->setToolTip(
      tr("Mark each finished generation with its kind of text (python, c, perl, prose; ? when the rules name none) "
         "and each group with its validity and kind agreement"));
  auto* row = new QWidget;
  auto* h = new QHBoxLayout(row);
  h->setContentsMargins(0, 0, 0, 0);
  for (QPushButton* b : {generate_, stop_, resample_, freeze_}) h->addWidget(b);
  h->addSpacing(12);
  h->addWidget(kinds_);
  h->addStretch(1);
  connect(kinds_, &QCheckBox::toggled, grid_, &TextGroupsGrid::set_kinds_shown);
  connect(generate_, &QPushButton::clicked, this, [this] { generate(); });
  connect(stop_, &QPushButton::clicked, this, [this] { stop(); });
  connect(resample_, &QPushButton::clicked, this, [this] { resample_z(); });
  connect(freeze_, &QPushButton::clicked, this, [this] { freeze_z(); });
  return row;
}

std::shared_ptr<const ftx::ModelInfo> TextGenerationsView::info(int id) const {
  auto it = models_.find(id);
  return it == models_.end() ? nullptr : it->second;
}

void TextGenerationsView::add_model(int id, std::shared_ptr<const ftx::ModelInfo> info) {
  models_[id] = info;
  const QString name = QString::fromStdString(info->name.empty() ? info->path : info->name);
  model_box_->addItem(QString("%1  (%2)").arg(name, ModelsView::latent_text(info->config)), id);
  if (model_box_->currentIndex() < 0) model_box_->setCurrentIndex(0);
}

void TextGenerationsView::remove_model(int id) {
  models_.erase(id);
  const int i = model_box_->findData(id);
  if (i >= 0) model_box_->removeItem(i);
  if (running_ && running_->model == id) stop();
}

void TextGenerationsView::select_model(int id) {
  const int i = model_box_->findData(id);
  if (i >= 0) model_box_->setCurrentIndex(i);
}

int TextGenerationsView::current_model() const {
  return model_box_->currentIndex() < 0 ? -1 : model_box_->currentData().toInt();
}

void TextGenerationsView::set_prompt(const QString& prompt) { prompt_->setPlainText(prompt); }
void TextGenerationsView::set_max_new_tokens(int n) { max_new_->setValue(n); }
void TextGenerationsView::set_groups(int fixed_groups, int group_size) {
  fixed_groups_->setValue(fixed_groups);
  group_size_->setValue(group_size);
}
void TextGenerationsView::set_sampling(double temperature, double top_p) {
  temperature_->setValue(temperature);
  top_p_->setValue(top_p);
}
void TextGenerationsView::set_kinds_shown(bool shown) { kinds_->setChecked(shown); }
bool TextGenerationsView::kinds_shown() const { return kinds_->isChecked(); }

QString TextGenerationsView::notice() const { return notice_->isHidden() ? QString() : notice_->text(); }
QString TextGenerationsView::status() const { return status_->text(); }

void TextGenerationsView::on_model_changed() {
  const auto mi = info(current_model());
  const ftx::ChatFormat chat = mi ? ftx::chat_format(mi->chat_template) : ftx::ChatFormat::None;
  chat_->setVisible(chat != ftx::ChatFormat::None);
  chat_->setToolTip(tr("Wrap the prompt as one user turn in the model's chat format (%1)")
                        .arg(QString::fromLatin1(ftx::chat_format_name(chat))));
  if (!mi) {
    notice_->hide();
  } else if (mi->config.is_free()) {
    notice_->setText(tr("Free Transformer (H = %1 latent bits per token): the independent group draws a Z per "
                        "sequence, each fixed group shares one Z among its sequences.")
                         .arg(mi->config.latent_bits));
    notice_->setStyleSheet(kFreeStyle);
    notice_->show();
  } else {
    notice_->setText(tr("This model has no latent Z (plain decoder): all sequences differ only by token sampling"));
    notice_->setStyleSheet(kNoZStyle);
    notice_->show();
  }
  update_enabled();
}

void TextGenerationsView::fill_sample(TextJob& job) const {
  job.groups.sample.max_new_tokens = max_new_->value();
  job.groups.sample.temperature = static_cast<float>(temperature_->value());
  job.groups.sample.top_p = static_cast<float>(top_p_->value());
  job.groups.sample.top_k = 0;
}

bool TextGenerationsView::generate() {
  const auto mi = info(current_model());
  if (busy()) return false;
  if (!mi)
    return set_status(tr("No model loaded: File → Open model (a .gguf file or a checkpoint directory)"), true), false;
  const QString prompt = prompt_->toPlainText();
  if (prompt.trimmed().isEmpty()) return set_status(tr("Type a prompt first"), true), false;
  TextJob job;
  job.model = current_model();
  job.prompt = prompt.toStdString();
  job.chat = !chat_->isHidden() && chat_->isChecked();
  job.groups.group_size = group_size_->value();
  job.groups.fixed_groups = mi->config.is_free() ? fixed_groups_->value() : 0;
  job.groups.latent_seed = job.groups.sample_seed = static_cast<uint64_t>(seed_->value());
  fill_sample(job);
  return send(std::move(job));
}

bool TextGenerationsView::resample_z() {
  if (busy() || !last_job_ || !info(last_job_->model) || !info(last_job_->model)->config.is_free()) return false;
  TextJob job = *last_job_;
  job.groups.latent_seed += 1;
  fill_sample(job);
  return send(std::move(job));
}

bool TextGenerationsView::freeze_z() {
  if (busy() || !last_job_ || !info(last_job_->model) || !info(last_job_->model)->config.is_free()) return false;
  TextJob job = *last_job_;
  job.groups.sample_seed += 1;
  fill_sample(job);
  return send(std::move(job));
}

bool TextGenerationsView::send(TextJob job) {
  job.id = ++next_job_;
  running_ = job;
  last_job_ = job;
  streamed_ = 0;
  set_status(tr("generating…"), false);
  update_enabled();
  emit generate_requested(std::move(job));
  return true;
}

void TextGenerationsView::stop() {
  if (!running_) return;
  emit stop_requested(running_->id);
  set_status(tr("stopping…"), false);
}

QString TextGenerationsView::caption(const TextJob& job, const TextJobPlan& plan) const {
  const auto mi = info(job.model);
  const QString name = mi ? QString::fromStdString(mi->name) : QString();
  QString seeds = tr("token seed %1").arg(seed_text(job.groups.sample_seed));
  if (plan.has_latent) seeds = tr("Z seed %1 · ").arg(seed_text(job.groups.latent_seed)) + seeds;
  return tr("<b>%1</b> · prompt %2 tokens%3 · temperature %4 · top-p %5 · %6")
      .arg(name.toHtmlEscaped())
      .arg(plan.prompt_tokens)
      .arg(job.chat ? tr(" (chat)") : QString())
      .arg(job.groups.sample.temperature, 0, 'f', 2)
      .arg(job.groups.sample.top_p, 0, 'f', 2)
      .arg(seeds);
}

void TextGenerationsView::on_planned(TextJobPlan plan) {
  if (!running_ || plan.id != running_->id) return;
  grid_->set_plan(plan, caption(*running_, plan));
  plan_ = std::move(plan);
}

void TextGenerationsView::on_text(quint64 job, TextPieces pieces) {
  if (!running_ || job != running_->id) return;
  streamed_ += static_cast<int>(pieces.size());
  grid_->append(pieces);
}

void TextGenerationsView::on_finished(TextJobResult result) {
  if (!running_ || result.id != running_->id) return;
  const int model = running_->model;
  running_.reset();
  if (!result.error.isEmpty()) {
    set_status(result.error, true);
  } else {
    if (plan_ && plan_->id == result.id) grid_->set_result(result);
    const double rate = result.seconds > 0 ? result.new_tokens / result.seconds : 0;
    set_status(tr("%1%2 tokens in %3 s (%4 tokens/s)")
                   .arg(result.cancelled ? tr("stopped: ") : QString())
                   .arg(result.new_tokens)
                   .arg(result.seconds, 0, 'f', 1)
                   .arg(rate, 0, 'f', 1),
               false);
  }
  update_enabled();
  if (result.error.isEmpty() && !result.cancelled) emit generation_done(model);
}

void TextGenerationsView::set_status(const QString& text, bool error) {
  status_->setStyleSheet(error ? QString::fromLatin1(kErrorStyle) : QString());
  status_->setText(text);
}

void TextGenerationsView::update_enabled() {
  const auto mi = info(current_model());
  const bool free = mi && mi->config.is_free();
  const bool again = last_job_ && info(last_job_->model) != nullptr;
  generate_->setEnabled(!busy() && mi != nullptr);
  stop_->setEnabled(busy());
  resample_->setEnabled(!busy() && again && free);
  freeze_->setEnabled(!busy() && again && free);
  fixed_groups_->setEnabled(free);
  model_box_->setEnabled(!busy());
}

}  // namespace ftx
