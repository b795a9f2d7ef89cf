#include "core/model/kappa.h"

#include <cstdio>
#include <cstdlib>

namespace ftx {
namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

// A whole, finite, plain decimal number (no "inf", "nan", hex or trailing characters).
bool parse_number(std::string_view s, double& out) {
  s = trim(s);
  if (s.empty() || s.size() > 64) return false;
  for (char c : s)
    if (!((c >= '0' && c <= '9') || c == '.' || c == 'e' || c == 'E' || c == '+' || c == '-')) return false;
  const std::string z(s);
  char* end = nullptr;
  out = std::strtod(z.c_str(), &end);
  return end == z.c_str() + z.size() && std::isfinite(out);
}

bool near(double x, double y) { return std::abs(x - y) <= 1e-5 * std::abs(y); }

}  // namespace

Result<double> parse_kappa_bits(std::string_view text) {
  auto bad = [&] {
    return make_error("kappa '" + std::string(text) + "' is not a number of bits (e.g. 1/8 or 0.125)");
  };
  std::string_view t = trim(text);
  for (std::string_view unit : {"bits", "bit"}) {
    if (t.size() > unit.size() && t.substr(t.size() - unit.size()) == unit) {
      t = trim(t.substr(0, t.size() - unit.size()));
      break;
    }
  }
  double v = 0;
  if (const size_t slash = t.find('/'); slash != std::string_view::npos) {
    double num = 0, den = 0;
    if (!parse_number(t.substr(0, slash), num) || !parse_number(t.substr(slash + 1), den) || !(den > 0)) return bad();
    v = num / den;
  } else if (!parse_number(t, v)) {
    return bad();
  }
  if (!(v >= 0) || !std::isfinite(v)) return bad();
  return v + 0.0;  // -0 reads as 0
}

Result<std::vector<double>> parse_kappa_list(std::string_view text) {
  std::vector<double> out;
  size_t start = 0;
  while (start <= text.size()) {
    const size_t comma = std::min(text.find(',', start), text.size());
    const std::string_view part = trim(text.substr(start, comma - start));
    start = comma + 1;
    if (part.empty()) continue;  // "1, 8, " is "1, 8"
    auto v = parse_kappa_bits(part);
    if (!v) return v.error();
    out.push_back(*v);
  }
  if (out.empty()) return make_error("expected kappa values in bits separated by commas");
  return out;
}

std::string kappa_short_text(double bits) {
  char buf[32];
  if (bits > 0 && bits < 1 && near(1 / bits, std::round(1 / bits)))
    std::snprintf(buf, sizeof buf, "1/%ld", std::lround(1 / bits));
  else if (bits >= 1 && near(bits, std::round(bits)))
    std::snprintf(buf, sizeof buf, "%ld", std::lround(bits));
  else
    std::snprintf(buf, sizeof buf, "%.3g", bits);
  return buf;
}

std::string kappa_bits_text(double bits) {
  const std::string s = kappa_short_text(bits);
  const bool one_or_less = s == "1" || s.rfind("1/", 0) == 0;
  return s + (one_or_less ? " bit" : " bits");
}

std::string kappa_run_suffix(double bits) {
  std::string out = kappa_short_text(bits);
  for (char& c : out)
    if (c == '/') c = '_';
  return out + "bit";
}

}  // namespace ftx
