#include "views/train_view.h"

#include <QCheckBox>
#include <QComboBox>
#include <QDateTime>
#include <QDoubleSpinBox>
#include <QFileDialog>
#include <QFileInfo>
#include <QFormLayout>
#include <QGridLayout>
#include <QGroupBox>
#include <QHBoxLayout>
#include <QLabel>
#include <QLineEdit>
#include <QProgressBar>
#include <QPushButton>
#include <QSpinBox>
#include <QStandardItemModel>
#include <QVBoxLayout>
#include <cmath>

#include "core/io/model_params.h"
#include "core/model/kappa.h"
#include "core/train/train_config.h"
#include "kernels/cpu/ops_matmul_bf16.h"

namespace ftx {

namespace {

ftx::Result<double> parse_kappa_bits(const QString& text) { return ftx::parse_kappa_bits(text.toStdString()); }

// The Device combo's items: device name as the item's data, GEMM precision ("" = default) here.
constexpr int kPrecisionRole = Qt::UserRole + 1;
// The Preset combo's last item: the default preset (ShapeOverrides) with L, D and heads from the form.
constexpr const char* kCustom = "custom";

QSpinBox* spin(int lo, int hi, int value) {
  auto* s = new QSpinBox;
  s->setRange(lo, hi);
  s->setValue(value);
  return s;
}

void mark(QLineEdit* e, bool bad) { e->setStyleSheet(bad ? "QLineEdit { border: 2px solid #d33; }" : ""); }

// A "…" button that fills `target` with a file chosen in a dialog; a config.json picks its directory.
QPushButton* browse_button(QLineEdit* target, const QString& title, const QString& filter) {
  auto* b = new QPushButton("…");
  b->setToolTip(title);
  QObject::connect(b, &QPushButton::clicked, target, [=] {
    QString path = QFileDialog::getOpenFileName(target, title, target->text(), filter);
    if (path.isEmpty()) return;
    if (QFileInfo(path).fileName() == "config.json") path = QFileInfo(path).absolutePath();
    target->setText(path);
    emit target->editingFinished();
  });
  return b;
}

}  // namespace

TrainView::TrainView(QWidget* parent) : QWidget(parent) {
  auto* layout = new QVBoxLayout(this);
  layout->addWidget(build_form());
  layout->addWidget(build_controls());
  layout->addStretch();
  update_preset();
  update_kappa_label();
  show_snapshot(ftx::SessionSnapshot{});
}

QWidget* TrainView::build_form() {
  auto* box = new QGroupBox("Run");
  auto* form = new QFormLayout(box);
  dataset_ = new QComboBox;
  dataset_->addItem("Synthetic (letter / underscore)", "synthetic");
  dataset_->addItem("Coin flip", "coinflip");
  dataset_->addItem("Text (token file)", "text");
  dataset_->setObjectName("dataset");
  text_data_ = new QLineEdit;
  text_data_->setObjectName("text_data");
  text_data_->setPlaceholderText("token file written by ftx tokenize --out");
  seq_len_ = spin(2, 1 << 16, 256);
  seq_len_->setObjectName("seq_len");
  seq_len_->setToolTip("Tokens per training sequence (documents are packed)");
  auto* text_row = new QHBoxLayout;
  text_row->addWidget(text_data_, 1);
  text_row->addWidget(browse_button(text_data_, "Token file", "Token data (*.tok);;All files (*)"));
  text_row->addWidget(new QLabel("seq len"));
  text_row->addWidget(seq_len_);
  init_ = new QLineEdit;
  init_->setObjectName("init_from");
  init_->setPlaceholderText("empty: random weights; or a model to fine-tune (.gguf, checkpoint directory)");
  init_->setToolTip(
      "Weights, shape and tokenizer to start from, as ftx train --init (e.g. one made by ftx upcycle)."
      " Pick a directory's config.json to choose the directory.");
  auto* init_row = new QHBoxLayout;
  init_row->addWidget(init_, 1);
  init_row->addWidget(browse_button(init_, "Model to start from", "Models (*.gguf config.json);;All files (*)"));
  preset_ = new QComboBox;
  for (const std::string& name : ftx::model_preset_names()) preset_->addItem(QString::fromStdString(name));
  preset_->addItem(kCustom);
  const ftx::ShapeOverrides defaults;
  preset_->setCurrentText(QString::fromStdString(defaults.preset));
  preset_->setObjectName("preset");
  layers_ = spin(1, 64, 4), dim_ = spin(8, 4096, 128), heads_ = spin(1, 64, 4);
  layers_->setObjectName("layers"), dim_->setObjectName("dim"), heads_->setObjectName("heads");
  auto* size = new QHBoxLayout;
  for (auto [label, w] : {std::pair{"L", layers_}, std::pair{"D", dim_}, std::pair{"heads", heads_}}) {
    size->addWidget(new QLabel(label));
    size->addWidget(w);
  }
  bits_ = spin(0, 16, ftx::kDefaultLatentBits);
  bits_->setObjectName("latent_bits");
  bits_->setToolTip("Latent bits H per position (0 = the baseline decoder)");
  kappa_ = new QLineEdit("1/8");
  kappa_->setToolTip("Free bits per token, in bits (e.g. 1/64, 1/8, 1, 8)");
  kappa_nats_ = new QLabel;
  auto* kappa_row = new QHBoxLayout;
  kappa_row->addWidget(kappa_);
  kappa_row->addWidget(kappa_nats_);
  const ftx::TrainConfig d;
  free_bits_ = new QComboBox;
  free_bits_->setObjectName("free_bits");
  for (ftx::FreeBitsForm f : {ftx::FreeBitsForm::BatchMean, ftx::FreeBitsForm::PerPair})
    free_bits_->addItem(ftx::free_bits_label(f), ftx::free_bits_name(f));
  free_bits_->setCurrentIndex(free_bits_->findData(QString::fromStdString(d.free_bits)));
  free_bits_->setToolTip(
      "How kappa meets the KL. Batch mean (Kingma et al., the paper's citation; reproduces Figure 4): the KL at "
      "each position is averaged over the batch before the threshold. Per pair: each sequence's position alone "
      "(runs trained before this option).");
  kappa_row->addWidget(free_bits_);
  routing_ = new QComboBox;
  routing_->setObjectName("routing");
  for (ftx::Routing k :
       {ftx::Routing::None, ftx::Routing::Random, ftx::Routing::Mod, ftx::Routing::Sdt, ftx::Routing::Stt})
    routing_->addItem(ftx::routing_name(k));
  routing_->setToolTip(
      "Routed compute (docs/subjective_depth.md): the odd blocks compute only part of each sequence, chosen at "
      "random, by a learned score (mod) or by surprise (sdt, stt)");
  capacity_ = new QDoubleSpinBox;
  capacity_->setObjectName("capacity");
  capacity_->setRange(0.01, 1.0), capacity_->setSingleStep(0.125), capacity_->setDecimals(3);
  capacity_->setValue(ftx::RoutingConfig{}.capacity);
  capacity_->setToolTip("Share of each sequence a routed block computes (gamma)");
  capacity_->setEnabled(false);
  threshold_ = new QCheckBox("threshold g >=");
  threshold_->setObjectName("threshold");
  threshold_->setToolTip(
      "sdt, stt: compute every token whose gate reaches the threshold (causal, a count per sequence) instead of "
      "the top capacity share of each sequence");
  g_th_ = new QDoubleSpinBox;
  g_th_->setObjectName("g_th");
  g_th_->setRange(0.01, 0.99), g_th_->setSingleStep(0.05), g_th_->setDecimals(2);
  g_th_->setValue(ftx::RoutingConfig{}.g_th);
  auto* routing_row = new QHBoxLayout;
  routing_row->addWidget(routing_);
  routing_row->addWidget(new QLabel("capacity"));
  routing_row->addWidget(capacity_);
  routing_row->addWidget(threshold_);
  routing_row->addWidget(g_th_);
  auto enable_routing = [this] {
    const QString r = routing_->currentText();
    const bool surprise = r == ftx::routing_name(ftx::Routing::Sdt) || r == ftx::routing_name(ftx::Routing::Stt);
    const bool threshold = surprise && threshold_->isChecked();
    capacity_->setEnabled(r != ftx::routing_name(ftx::Routing::None) && !threshold);
    threshold_->setEnabled(surprise);
    g_th_->setEnabled(threshold);
  };
  connect(routing_, &QComboBox::currentTextChanged, this, enable_routing);
  connect(threshold_, &QCheckBox::toggled, this, enable_routing);
  enable_routing();
  steps_ = spin(1, 10000000, d.steps), batch_ = spin(1, 4096, d.batch), seed_ = spin(0, 1 << 30, 1);
  lr_ = new QLineEdit(QString::number(d.lr));
  device_ = new QComboBox;
  device_->addItem("CPU", "cpu");
  // bf16 on the CPU: the AMX tiles or VDPBF16PS where they are faster, else its numerics only
  // (the item says which; the tooltip has the whole line `ftx train` prints).
  device_->addItem(ftx::cpu::bf16_inputs_on_tiles() ? "CPU, bf16 GEMMs (AMX tiles)"
                   : ftx::cpu::bf16_inputs_on_vdp() ? "CPU, bf16 GEMMs (VDPBF16PS)"
                                                    : "CPU, bf16 GEMMs (no faster than fp32 on this CPU)",
                   "cpu");
  device_->setItemData(1, "bf16", kPrecisionRole);
  device_->setItemData(1, QString("GEMMs: ") + ftx::cpu::bf16_inputs_engine(), Qt::ToolTipRole);
  device_->addItem("CUDA (not in this build)", "cuda");
  device_->addItem("CUDA, bf16 GEMMs (not in this build)", "cuda");
  device_->setItemData(3, "bf16", kPrecisionRole);
  set_cuda_available(ftx::cuda_in_build());
  name_ = new QLineEdit;
  name_->setPlaceholderText("run name (default: dataset-H-kappa-time)");
  form->addRow("Dataset", dataset_);
  form->addRow("Data", text_row);
  form->addRow("Start from", init_row);
  form->addRow("Preset", preset_);
  form->addRow("Size", size);
  form->addRow("Latent bits H", bits_);
  form->addRow("Kappa (bits)", kappa_row);
  form->addRow("Routing", routing_row);
  form->addRow("Steps", steps_);
  form->addRow("Batch", batch_);
  form->addRow("Learning rate", lr_);
  form->addRow("Seed", seed_);
  form->addRow("Device", device_);
  form->addRow("Run name", name_);
  connect(preset_, &QComboBox::currentTextChanged, this, &TrainView::update_preset);
  connect(dataset_, &QComboBox::currentIndexChanged, this, &TrainView::update_preset);
  connect(init_, &QLineEdit::textChanged, this, &TrainView::update_preset);
  connect(init_, &QLineEdit::editingFinished, this, &TrainView::take_recorded_kappa);
  connect(kappa_, &QLineEdit::textChanged, this, &TrainView::update_kappa_label);
  connect(lr_, &QLineEdit::textChanged, this, [this] {
    bool ok = false;
    const double v = lr_->text().toDouble(&ok);
    mark(lr_, !(ok && v > 0 && v < 1));
  });
  return box;
}

QWidget* TrainView::build_controls() {
  auto* box = new QGroupBox("Training");
  auto* grid = new QGridLayout(box);
  start_ = new QPushButton("Start"), pause_ = new QPushButton("Pause"), resume_ = new QPushButton("Resume");
  stop_ = new QPushButton("Stop"), step_ = new QPushButton("Step once"), set_kappa_ = new QPushButton("Set κ now");
  set_kappa_->setToolTip("Apply the kappa above to the running run from its next step (recorded as an event)");
  sweep_ = new QLineEdit("1/64, 1/8, 1, 8");
  sweep_start_ = new QPushButton("Start κ sweep");
  sweep_start_->setToolTip("One run per kappa value (bits), one after another, with the form's other settings");
  progress_ = new QProgressBar;
  status_ = new QLabel;
  status_->setTextInteractionFlags(Qt::TextSelectableByMouse);
  message_ = new QLabel;
  message_->setWordWrap(true);
  auto* row = new QHBoxLayout;
  for (QPushButton* b : {start_, pause_, resume_, stop_, step_}) row->addWidget(b);
  grid->addLayout(row, 0, 0, 1, 3);
  grid->addWidget(set_kappa_, 1, 0);
  grid->addWidget(sweep_, 1, 1);
  grid->addWidget(sweep_start_, 1, 2);
  grid->addWidget(progress_, 2, 0, 1, 3);
  grid->addWidget(status_, 3, 0, 1, 3);
  grid->addWidget(message_, 4, 0, 1, 3);
  connect(start_, &QPushButton::clicked, this, &TrainView::start);
  connect(sweep_start_, &QPushButton::clicked, this, &TrainView::start_sweep);
  connect(pause_, &QPushButton::clicked, this, &TrainView::pause_requested);
  connect(resume_, &QPushButton::clicked, this, &TrainView::resume_requested);
  connect(stop_, &QPushButton::clicked, this, &TrainView::stop_requested);
  connect(step_, &QPushButton::clicked, this, &TrainView::step_requested);
  connect(set_kappa_, &QPushButton::clicked, this, [this] {
    auto bits = parse_kappa_bits(kappa_->text());
    if (!bits) return show_error(QString::fromStdString(bits.error().message));
    emit kappa_requested(static_cast<float>(ftx::bits_to_nats(*bits)));
  });
  connect(sweep_, &QLineEdit::textChanged, this,
          [this] { mark(sweep_, !ftx::parse_kappa_list(sweep_->text().toStdString())); });
  return box;
}

void TrainView::set_cuda_available(bool on) {
  const char* suffix = on ? "" : " (not in this build)";
  device_->setItemText(2, QString("CUDA") + suffix);
  device_->setItemText(3, QString("CUDA, bf16 GEMMs") + suffix);
  if (auto* items = qobject_cast<QStandardItemModel*>(device_->model()))
    for (int i : {2, 3}) items->item(i)->setEnabled(on);
}

void TrainView::set_run_name(const QString& name) { name_->setText(name); }
void TrainView::set_steps(int steps) { steps_->setValue(steps); }

// Which fields apply: the text fields for the text dataset; with a model to start from, its
// shape and H are the file's, so the size fields are off.
void TrainView::update_preset() {
  const bool custom = preset_->currentText() == kCustom, text = dataset_->currentData().toString() == "text";
  const bool from_file = !init_->text().trimmed().isEmpty();
  if (!custom) {
    auto p = ftx::model_preset(preset_->currentText().toStdString());
    if (p) layers_->setValue(p->n_layers), dim_->setValue(p->dim), heads_->setValue(p->n_heads);
  }
  for (QSpinBox* s : {layers_, dim_, heads_}) s->setEnabled(custom && !from_file);
  preset_->setEnabled(!from_file), bits_->setEnabled(!from_file);
  text_data_->setEnabled(text), seq_len_->setEnabled(text);
}

// A model made by ftx upcycle --kappa-bits records its kappa: the form takes it, as ftx train
// --init does when no kappa is given.
void TrainView::take_recorded_kappa() {
  if (const float k = ftx::recorded_kappa_nats(init_->text().trimmed().toStdString()); k >= 0)
    kappa_->setText(QString::number(ftx::nats_to_bits(k), 'g', 6));
}

void TrainView::update_kappa_label() {
  auto bits = parse_kappa_bits(kappa_->text());
  mark(kappa_, !bits);
  kappa_nats_->setText(bits ? QString("= %1 nats").arg(ftx::bits_to_nats(*bits), 0, 'g', 4) : "not a number of bits");
}

ftx::Result<ftx::TrainRequest> TrainView::request() const {
  ftx::TrainRequest r;
  r.db_path = db_path_.toStdString();
  auto bits = parse_kappa_bits(kappa_->text());
  if (!bits) return bits.error();
  bool ok = false;
  const double lr = lr_->text().toDouble(&ok);
  if (!ok || !(lr > 0 && lr < 1))
    return ftx::make_error("learning rate '" + lr_->text().toStdString() + "' must be a number in (0, 1)");
  r.device = device_->currentData().toString().toStdString();
  r.precision = device_->currentData(kPrecisionRole).toString().toStdString();
  const QString preset = preset_->currentText();
  if (preset == kCustom) {
    r.shape.layers = layers_->value(), r.shape.dim = dim_->value(), r.shape.heads = heads_->value();
  } else {
    r.shape.preset = preset.toStdString();
  }
  r.shape.latent_bits = bits_->value();
  r.shape.routing = routing_->currentText().toStdString();
  if (r.shape.routing != ftx::routing_name(ftx::Routing::None))
    r.shape.route.capacity = static_cast<float>(capacity_->value());
  if (threshold_->isEnabled() && threshold_->isChecked()) {
    r.shape.route_mode = ftx::route_mode_name(ftx::RouteMode::Threshold);
    r.shape.route.g_th = static_cast<float>(g_th_->value());
  }
  r.train.dataset = dataset_->currentData().toString().toStdString();
  if (r.train.dataset == "text") {
    const QString data = text_data_->text().trimmed();
    if (data.isEmpty()) return ftx::make_error("the text dataset needs a token file (written by ftx tokenize --out)");
    r.train.dataset_options["text_data"] = data.toStdString();
    r.train.dataset_options["text_seq_len"] = seq_len_->value();
  }
  r.train.init_from = init_->text().trimmed().toStdString();
  r.train.preset = preset.toStdString();
  r.train.kappa_nats = static_cast<float>(ftx::bits_to_nats(*bits));
  r.train.free_bits = free_bits_->currentData().toString().toStdString();
  r.train.steps = steps_->value(), r.train.batch = batch_->value();
  r.train.lr = static_cast<float>(lr), r.train.seed = static_cast<uint64_t>(seed_->value());
  r.train.eval_every = std::min(r.train.eval_every, std::max(1, r.train.steps / 4));
  r.train.checkpoint_every = r.train.eval_every;
  r.run = name_->text().trimmed().toStdString();
  const QString model = r.train.init_from.empty()
                            ? QString("H%1").arg(r.shape.latent_bits)
                            : QFileInfo(QString::fromStdString(r.train.init_from)).completeBaseName();
  if (r.run.empty())
    r.run = (QString::fromStdString(r.train.dataset) + "-" + model + "-" +
             QString::fromStdString(ftx::kappa_run_suffix(*bits)) + "-" +
             QDateTime::currentDateTime().toString("MMdd-hhmmss"))
                .toStdString();
  return r;
}

void TrainView::start() {
  auto r = request();
  if (!r) return show_error(QString::fromStdString(r.error().message));
  emit start_requested({*r});
}

void TrainView::start_sweep() {
  auto kappas = ftx::parse_kappa_list(sweep_->text().toStdString());
  if (!kappas)
    return show_error(
        QString::fromStdString("sweep '" + sweep_->text().toStdString() + "': " + kappas.error().message));
  auto base = request();
  if (!base) return show_error(QString::fromStdString(base.error().message));
  std::vector<ftx::TrainRequest> sweep;
  for (double bits : *kappas) {
    ftx::TrainRequest r = *base;
    r.train.kappa_nats = static_cast<float>(ftx::bits_to_nats(bits));
    r.run = base->run + "-" + ftx::kappa_run_suffix(bits);  // as ftx sweep names its runs
    sweep.push_back(r);
  }
  emit start_requested(sweep);
}

void TrainView::show_error(const QString& message) {
  message_->setStyleSheet("color: #d33;");
  message_->setText(message);
}

void TrainView::show_snapshot(const ftx::SessionSnapshot& s) {
  using ftx::SessionState;
  const bool active = s.state == SessionState::Running || s.state == SessionState::Paused;
  start_->setEnabled(!active), sweep_start_->setEnabled(!active);
  pause_->setEnabled(s.state == SessionState::Running);
  resume_->setEnabled(s.state == SessionState::Paused), step_->setEnabled(s.state == SessionState::Paused);
  stop_->setEnabled(active), set_kappa_->setEnabled(active);
  progress_->setRange(0, std::max(1, s.total_steps));
  progress_->setValue(s.step);
  if (s.run.empty()) {
    status_->setText("No run in progress. Fill in the form and press Start.");
  } else {
    status_->setText(QString("<b>%1</b> — %2 · step %3/%4 · CE %5 · KL %6 nats · κ %7 · %8 tok/s · ETA %9 s%10")
                         .arg(QString::fromStdString(s.run), ftx::session_state_name(s.state))
                         .arg(s.step)
                         .arg(s.total_steps)
                         .arg(s.ce, 0, 'f', 4)
                         .arg(s.kl, 0, 'f', 4)
                         .arg(QString::fromStdString(ftx::kappa_bits_text(ftx::nats_to_bits(s.kappa_nats))))
                         .arg(s.tokens_per_s, 0, 'f', 0)
                         .arg(s.eta_s, 0, 'f', 0)
                         .arg(s.queued > 0 ? QString(" · %1 queued").arg(s.queued) : QString()));
  }
  if (!s.message.empty()) {
    message_->setStyleSheet(s.state == SessionState::Failed ? "color: #d33;" : "");
    message_->setText(QString::fromStdString(s.message));
  }
}

}  // namespace ftx
