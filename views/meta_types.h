// Qt metatypes for the explorer structs that travel through signals and queued connections
// between the studio's worker thread and the views (Generations, Latent, Lessons), and the one
// alias that names a list of captioned group columns.
//
// Deliberately not here: conversions or any logic on these structs; they stay plain core types.
#pragma once
#include <QMetaType>
#include <QString>
#include <utility>
#include <vector>

#include "core/explore/explorer.h"

namespace ftx {

// Columns of generations side by side: (caption, groups), e.g. one column per run of a kappa sweep.
using GroupColumns = std::vector<std::pair<QString, std::vector<ftx::GroupView>>>;

// Call once before the first queued connection that carries one of these types.
inline void register_view_meta_types() {
  qRegisterMetaType<ftx::Figure4Request>("ftx::Figure4Request");
  qRegisterMetaType<ftx::GroupView>("ftx::GroupView");
  qRegisterMetaType<std::vector<ftx::GroupView>>("std::vector<ftx::GroupView>");
  qRegisterMetaType<GroupColumns>("ftx::GroupColumns");
  qRegisterMetaType<ftx::LatentInspection>("ftx::LatentInspection");
  qRegisterMetaType<ftx::CoinflipLesson>("ftx::CoinflipLesson");
  qRegisterMetaType<std::vector<double>>("std::vector<double>");
}

}  // namespace ftx

Q_DECLARE_METATYPE(ftx::Figure4Request)
Q_DECLARE_METATYPE(ftx::GroupView)
Q_DECLARE_METATYPE(std::vector<ftx::GroupView>)
Q_DECLARE_METATYPE(ftx::GroupColumns)
Q_DECLARE_METATYPE(ftx::LatentInspection)
Q_DECLARE_METATYPE(ftx::CoinflipLesson)
Q_DECLARE_METATYPE(std::vector<double>)
