// Kappa, the free-bits threshold, as people write and read it: bits <-> nats, parsing "1/8" or
// "0.125 bits", the text of a kappa ("1/8 bit") and the part of a run name it gives ("1_8bit").
// The one home of these rules: the CLI (train, sweep), the studio (Train form, sweep, Runs,
// Benchmarks, Lessons) and the reports all go through it, so a sweep started from either names
// its runs the same way. The threshold's place in the loss is core/model/free_bits.h.
#pragma once
#include <cmath>
#include <string>
#include <string_view>
#include <vector>

#include "kernels/base/result.h"

namespace ftx {

inline double bits_to_nats(double bits) { return bits * std::log(2.0); }
inline double nats_to_bits(double nats) { return nats / std::log(2.0); }

// A kappa in bits: a number ("0.125", "8") or a fraction ("1/8", " 1 / 64 "), optionally followed
// by "bit" or "bits". Finite and >= 0 (0 is no free bits). The error names the text:
// "kappa 'abc' is not a number of bits (e.g. 1/8 or 0.125)".
Result<double> parse_kappa_bits(std::string_view text);
// Kappas separated by commas ("1/64, 1/8, 1, 8"); empty entries are skipped. An error names the
// first bad entry as parse_kappa_bits does, or says "expected kappa values in bits separated by
// commas" when there is none; the caller says where the list came from.
Result<std::vector<double>> parse_kappa_list(std::string_view text);

// "1/8 bit", "1 bit", "8 bits", "0.3 bits". Kappas go through float nats in a run's config, so
// fractions 1/n and integers are recognised within 1e-5.
std::string kappa_bits_text(double bits);
// The same without the unit, where a column or an axis says "bits": "1/8", "1", "8", "0.3".
std::string kappa_short_text(double bits);
// The part of a run name a kappa gives: "1_8bit", "1bit", "8bit", "0.3bit" (no '/' or space).
// Runs of a sweep are <name>-<suffix>, from the CLI and from the studio.
std::string kappa_run_suffix(double bits);

}  // namespace ftx
