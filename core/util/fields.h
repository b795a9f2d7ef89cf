// Config fields declared once, in the shape of gemma.cpp's ForEach visitor. A config struct lists
// its fields in one static member, `template <class Self, class V> static void for_each_field(
// Self& cfg, V&& visit)`, calling visit(member, Field{...}) per field (Self may be const). That one
// list drives validation (check_fields), the JSON of run rows and trainer.json (fields_to_json,
// fields_from_json) and the command line (app/ adds one option per field that has help text).
//
// Messages name a field through a FieldName: core passes field_key ("steps 0: must be
// positive"); the command line passes its own namer, so the same check reads "--steps 0: ...".
// Member types: bool, int, uint64_t, float, double, std::string, std::optional<int>.
//
// Deliberately not here: rules that involve several fields (each config's validate() adds them),
// the command line itself (core includes no CLI header), formats owned by others (Hugging Face's
// config.json has its own reader in core/io/config_json.*).
#pragma once
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <type_traits>

#include <nlohmann/json.hpp>

#include "kernels/base/result.h"

namespace ftx {

// The values a numeric field accepts: lo <= x <= hi, with open ends where marked. Floating fields
// must also be finite (NaN and infinities are never a setting).
struct Bounds {
  double lo = -std::numeric_limits<double>::infinity();
  double hi = std::numeric_limits<double>::infinity();
  bool lo_open = false, hi_open = false;
};
inline constexpr Bounds kAnyValue{};
inline constexpr Bounds kPositive{0, std::numeric_limits<double>::infinity(), true, false};
inline constexpr Bounds kNonNegative{0, std::numeric_limits<double>::infinity(), false, false};
constexpr Bounds closed_range(double lo, double hi) { return {lo, hi, false, false}; }
constexpr Bounds half_open_range(double lo, double hi) { return {lo, hi, false, true}; }  // [lo, hi)

struct Field {
  const char* key = "";          // the JSON key, and the field's name in core's messages
  std::string help = {};         // one line for --help; empty: not a command-line option
  Bounds bounds = kAnyValue;     // numeric fields only
  const char* note = nullptr;    // added to a bounds message, e.g. "(H, latent bits per position)"
  const char* option = nullptr;  // the command-line name when it is not the key with '-' for '_'
};

using FieldName = std::string (*)(const Field&);
inline std::string field_key(const Field& f) { return f.key; }

// Shortest readable form of a value in messages ("0.001", "25", "-1").
template <class T>
std::string field_value_text(const T& v) {
  std::ostringstream s;
  s << v;
  return s.str();
}

// "must be positive", "must be in 0..20", "must be in [0, 1)", ...
std::string bounds_text(const Bounds& b, bool integral);

// One field's value against its bounds; the message names it through `name`.
template <class T>
Status check_field(const T& v, const Field& f, FieldName name) {
  if constexpr (std::is_same_v<T, std::optional<int>>) {
    return v ? check_field(*v, f, name) : Status{};
  } else if constexpr (std::is_arithmetic_v<T> && !std::is_same_v<T, bool>) {
    const double x = static_cast<double>(v);
    const Bounds& b = f.bounds;
    const bool finite = !std::is_floating_point_v<T> || std::isfinite(x);
    const bool inside = finite && (b.lo_open ? x > b.lo : x >= b.lo) && (b.hi_open ? x < b.hi : x <= b.hi);
    if (!inside)
      return make_error(name(f) + " " + field_value_text(v) + ": must be " + bounds_text(b, std::is_integral_v<T>) +
                        (f.note ? std::string(" ") + f.note : std::string()));
    return {};
  } else {
    return {};  // strings and bools: any value is in range (validate() adds what else is needed)
  }
}

// Every field of `cfg` against its bounds, in declaration order; the first failure.
template <class T>
Status check_fields(const T& cfg, FieldName name = field_key) {
  Status first;
  std::remove_const_t<T>::for_each_field(cfg, [&](const auto& member, const Field& f) {
    if (first.ok()) first = check_field(member, f, name);
  });
  return first;
}

// The declaration of field `key` of T (for messages about several fields); asserts it exists.
template <class T>
Field find_field(std::string_view key) {
  const T cfg{};
  std::optional<Field> found;
  T::for_each_field(cfg, [&](const auto&, const Field& f) {
    if (!found && key == f.key) found = f;
  });
  FT_ASSERT(found.has_value(), "no field '%.*s' declared", static_cast<int>(key.size()), key.data());
  return *found;
}

// Writes every field under its key (an unset optional is left out).
template <class T>
void fields_to_json(const T& cfg, nlohmann::json& out) {
  T::for_each_field(cfg, [&](const auto& member, const Field& f) {
    using M = std::decay_t<decltype(member)>;
    if constexpr (std::is_same_v<M, std::optional<int>>) {
      if (member) out[f.key] = *member;
    } else {
      out[f.key] = member;
    }
  });
}

namespace fields_detail {
// One JSON value into one member: exact JSON types (an integer field refuses 3.5 and "3", a bool
// refuses 1); integers must fit the member. Empty string on success, else the problem.
template <class M>
std::string read_value(const nlohmann::json& v, M& out) {
  const std::string got = std::string(v.type_name()) + " " + v.dump();
  if constexpr (std::is_same_v<M, bool>) {
    if (!v.is_boolean()) return "must be true or false, got " + got;
    out = v.get<bool>();
  } else if constexpr (std::is_same_v<M, std::string>) {
    if (!v.is_string()) return "must be a string, got " + got;
    out = v.get<std::string>();
  } else if constexpr (std::is_same_v<M, std::optional<int>>) {
    int x = 0;
    if (std::string e = read_value(v, x); !e.empty()) return e;
    out = x;
  } else if constexpr (std::is_integral_v<M>) {
    if (!v.is_number_integer()) return "must be an integer, got " + got;
    using L = std::numeric_limits<M>;
    const bool fits = v.is_number_unsigned()
                          ? v.get<uint64_t>() <= static_cast<uint64_t>(L::max())
                          : v.get<int64_t>() >= static_cast<int64_t>(L::min()) &&
                                (v.get<int64_t>() < 0 || static_cast<uint64_t>(v.get<int64_t>()) <= L::max());
    if (!fits)
      return "must be an integer in " + std::to_string(L::min()) + ".." + std::to_string(L::max()) + ", got " +
             v.dump();
    out = v.is_number_unsigned() ? static_cast<M>(v.get<uint64_t>()) : static_cast<M>(v.get<int64_t>());
  } else {
    static_assert(std::is_floating_point_v<M>, "unsupported field type");
    if (!v.is_number()) return "must be a number, got " + got;
    out = v.get<M>();
  }
  return {};
}
}  // namespace fields_detail

// Reads the fields present in object `j` (missing keys keep cfg's values; null counts as missing);
// errors "<where>: key '<key>': <problem>". Keys that are no field are left to the caller.
// Bounds are not checked here: the caller's validate() does that once.
template <class T>
Status fields_from_json(const nlohmann::json& j, T& cfg, const std::string& where) {
  if (!j.is_object()) return make_error(where + ": must be a JSON object, got " + j.type_name());
  Status first;
  T::for_each_field(cfg, [&](auto& member, const Field& f) {
    auto it = j.find(f.key);
    if (!first.ok() || it == j.end() || it->is_null()) return;
    if (std::string e = fields_detail::read_value(*it, member); !e.empty())
      first = make_error(where + ": key '" + f.key + "': " + e);
  });
  return first;
}

}  // namespace ftx
