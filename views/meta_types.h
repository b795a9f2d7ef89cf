// Qt metatypes for the explorer structs that travel through signals and queued connections
// between the studio's worker thread and the views (Generations, Latent, Compute, Lessons), the one alias
// that names a list of captioned group columns, and the plain struct that carries the
// "Z picks the document" lesson's stored numbers.
//
// Deliberately not here: conversions or any logic on these structs; they stay plain core types.
#pragma once
#include <QMetaType>
#include <QString>
#include <cmath>
#include <optional>
#include <utility>
#include <vector>

#include "core/eval/kind_groups.h"
#include "core/explore/compute.h"
#include "core/explore/explorer.h"

namespace ftx {

// Columns of generations side by side: (caption, groups), e.g. one column per run of a kappa sweep.
using GroupColumns = std::vector<std::pair<QString, std::vector<ftx::GroupView>>>;

// One run of the text-kinds pair as the store holds it (read on the explorer's thread).
struct KindsLessonRun {
  QString run;    // empty: not in the store
  int step = -1;  // its latest checkpoint
  int latent_bits = 0;
  std::optional<ftx::KindsNumbers> kinds;  // its "kinds/..." metrics at that step, when measured
  double val_ce = std::nan("");            // val/ce_prior at that step (a plain decoder's own CE); NaN: none
};
// The "Z picks the document" lesson: the shipped Free Transformer and its baseline.
struct KindsLesson {
  KindsLessonRun free, baseline;
  QString model_path;  // what "Generate in Models (text)" opens; empty: nothing to open
};

// Call once before the first queued connection that carries one of these types.
inline void register_view_meta_types() {
  qRegisterMetaType<ftx::Figure4Request>("ftx::Figure4Request");
  qRegisterMetaType<ftx::GroupView>("ftx::GroupView");
  qRegisterMetaType<std::vector<ftx::GroupView>>("std::vector<ftx::GroupView>");
  qRegisterMetaType<GroupColumns>("ftx::GroupColumns");
  qRegisterMetaType<ftx::LatentInspection>("ftx::LatentInspection");
  qRegisterMetaType<ftx::ComputeInspection>("ftx::ComputeInspection");
  qRegisterMetaType<ftx::LatentGeneration>("ftx::LatentGeneration");
  qRegisterMetaType<ftx::CoinflipLesson>("ftx::CoinflipLesson");
  qRegisterMetaType<std::vector<double>>("std::vector<double>");
  qRegisterMetaType<ftx::KindsLesson>("ftx::KindsLesson");
}

}  // namespace ftx

Q_DECLARE_METATYPE(ftx::Figure4Request)
Q_DECLARE_METATYPE(ftx::GroupView)
Q_DECLARE_METATYPE(std::vector<ftx::GroupView>)
Q_DECLARE_METATYPE(ftx::GroupColumns)
Q_DECLARE_METATYPE(ftx::LatentInspection)
Q_DECLARE_METATYPE(ftx::ComputeInspection)
Q_DECLARE_METATYPE(ftx::CoinflipLesson)
Q_DECLARE_METATYPE(std::vector<double>)
Q_DECLARE_METATYPE(ftx::KindsLesson)
