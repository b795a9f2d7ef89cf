// ftx-studio: argument parsing and wiring only (the window is views/main_window).
//   ftx-studio [--db PATH] [--view
//   runs|train|curves|benchmarks|generations|latent|compute|lessons|figure4|kinds[+another]]
//              [--open MODEL]... [--random-ft] [--prompt TEXT] [--size WxH]
//              [--screenshot PNG --after SECONDS] [--train RUN --steps N] [--latency]
#include <unistd.h>

#include <QApplication>
#include <QCommandLineParser>
#include <QSettings>
#include <QSurfaceFormat>
#include <QTimer>
#include <cstdio>
#include <cstdlib>

#include "datasets/registry.h"
#include "kernels/cpu/blas_core.h"
#include "views/main_window.h"

namespace {

// OpenMP reads its wait policy when the library loads, before main: a training thread that spins
// while it waits would take the core the UI thread needs, so the studio restarts itself once with
// a passive policy unless the user chose one.
void ensure_passive_openmp(char** argv) {
  if (std::getenv("OMP_WAIT_POLICY") != nullptr) return;
  setenv("OMP_WAIT_POLICY", "PASSIVE", 1);
  execv("/proc/self/exe", argv);  // returns only on failure: then run as we are
}

int fail(const QString& message) {
  std::fprintf(stderr, "ftx-studio: %s\n", qPrintable(message));
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  ftx::cpu::restart_with_right_blas_core(argv);
  ensure_passive_openmp(argv);
  QSurfaceFormat::setDefaultFormat(QSurfaceFormat::defaultFormat());
  QApplication app(argc, argv);
  QApplication::setOrganizationName("ftx");
  QApplication::setApplicationName("studio");
  QCommandLineParser p;
  p.setApplicationDescription("Free Transformer Studio: train, watch and explore Free Transformers.");
  p.addHelpOption();
  QCommandLineOption db({"d", "db"}, "Run store (SQLite).", "PATH",
                        QSettings().value("store/path", "workspace/runs.db").toString());
  QCommandLineOption view(
      "view",
      "Open on this view: runs, train, curves, benchmarks, generations, latent, compute (compute-student: on the "
      "student router's path), lessons, figure4 (the Figure 4 lesson), kinds (the lesson \"Z picks the document\"); "
      "two joined by + are shown one above the other.",
      "VIEW");
  QCommandLineOption shot("screenshot", "Save a screenshot of the window to PNG, then exit.", "PNG");
  QCommandLineOption after("after", "Seconds before the screenshot (default 3).", "SECONDS", "3");
  QCommandLineOption train("train", "Start training a run of this name with the Train form's settings.", "RUN");
  QCommandLineOption steps("steps", "Steps for --train (default 200).", "N", "200");
  QCommandLineOption latency("latency", "Print the event loop's worst latency (ms) at exit.");
  QCommandLineOption open("open", "Open a model: a checkpoint directory or a .gguf file (repeatable).", "PATH");
  QCommandLineOption random_ft("random-ft",
                               "With --open: also a random-weight Free Transformer (4 layers, dim 128, 8 latent bits) "
                               "with the opened model's tokenizer.");
  QCommandLineOption prompt("prompt", "With --open: generate this prompt once the (last) model is loaded.", "TEXT");
  QCommandLineOption size("size", "Window size in pixels (default 1400x860).", "WxH", "1400x860");
  p.addOptions({db, view, shot, after, train, steps, latency, open, random_ft, prompt, size});
  p.process(app);

  bool ok = false;
  const double after_s = p.value(after).toDouble(&ok);
  if (!ok || after_s < 0 || after_s > 3600)
    return fail("--after '" + p.value(after) + "': expected seconds in 0..3600");
  const int n_steps = p.value(steps).toInt(&ok);
  if (!ok || n_steps < 1) return fail("--steps '" + p.value(steps) + "': expected a positive integer");
  const QStringList wh = p.value(size).split('x');
  const int width = wh.size() == 2 ? wh[0].toInt(&ok) : 0, height = ok && wh.size() == 2 ? wh[1].toInt(&ok) : 0;
  if (!ok || width < 200 || height < 200 || width > 10000 || height > 10000)
    return fail("--size '" + p.value(size) + "': expected WIDTHxHEIGHT in pixels, e.g. 1400x860");
  const QString view_name = p.value(view);
  if ((p.isSet(random_ft) || p.isSet(prompt)) && !p.isSet(open)) return fail("--random-ft and --prompt need --open");
  ftx::MainWindow w(ftx::StudioOptions{p.value(db), view_name, ftx::make_dataset, p.values(open), p.isSet(random_ft),
                                       p.value(prompt)});
  if (!view_name.isEmpty() && !w.raise_view(view_name))
    return fail("--view '" + view_name +
                "': unknown (expected runs, train, curves, benchmarks, generations, latent, compute, lessons, figure4 "
                "or kinds)");
  w.resize(width, height);
  w.show();
  // The probe starts once the first frames are drawn: it measures the steady state, not start-up.
  if (p.isSet(latency)) QTimer::singleShot(1500, &w, [&w] { w.start_latency_probe(); });
  if (p.isSet(train)) w.start_training(p.value(train), n_steps);
  int code = 0;
  if (p.isSet(shot)) {
    QTimer::singleShot(static_cast<int>(after_s * 1000), &w, [&] {
      // The probe measures the window at work, not the PNG written on the way out on the UI thread:
      // the probe's next tick, still delivered before quit, counted it as 113-125 ms of lateness in
      // about one run of five (StudioTest.EventLoopStaysResponsiveWhileTraining failed CI once).
      w.stop_latency_probe();
      if (!w.save_view_png(p.value(shot))) code = fail("--screenshot: cannot write " + p.value(shot));
      QApplication::quit();
    });
  }
  const int rc = app.exec();
  if (p.isSet(latency))
    std::printf("event loop worst latency: %.1f ms over %d steps\n", w.worst_latency_ms(), w.trained_steps());
  return code ? code : rc;
}
