// Bounds as words for the messages of check_field (see fields.h).
#include "core/util/fields.h"

namespace ftx {
namespace {

std::string number(double x) { return field_value_text(x); }

}  // namespace

std::string bounds_text(const Bounds& b, bool integral) {
  const bool lo_inf = std::isinf(b.lo), hi_inf = std::isinf(b.hi);
  if (lo_inf && hi_inf) return "a finite number";
  if (hi_inf) {
    if (b.lo == 0) return b.lo_open ? "positive" : ">= 0";
    return (b.lo_open ? "> " : ">= ") + number(b.lo);
  }
  if (lo_inf) return (b.hi_open ? "< " : "<= ") + number(b.hi);
  if (integral && !b.lo_open && !b.hi_open) return "in " + number(b.lo) + ".." + number(b.hi);
  return std::string("in ") + (b.lo_open ? "(" : "[") + number(b.lo) + ", " + number(b.hi) + (b.hi_open ? ")" : "]");
}

}  // namespace ftx
