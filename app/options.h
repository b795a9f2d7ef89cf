// Command-line options made from the config field lists (core/util/fields.h): one option per
// field that has help text, named "--" + the key with '-' for '_' (or the field's own option
// name), with the field's help and default; and one option per declared dataset option. Errors
// from core name fields by key; the commands pass option_name so that they name the option.
//
// Deliberately not here: options that are no config field (--db, --run, --device, the kappa in
// bits): each command adds those itself.
#pragma once
#include <optional>
#include <string>
#include <type_traits>

#include <CLI/CLI.hpp>

#include "core/model/config.h"
#include "core/train/train_config.h"
#include "core/util/fields.h"

namespace ftx::app {

// "--steps", "--kv-heads", "--post-sampler-std": how the command line names a field.
std::string option_name(const Field& f);

// One option per field of `cfg` that has help text. Bools become a flag and its "--no-" form.
template <class T>
void add_field_options(CLI::App* c, T& cfg) {
  T::for_each_field(cfg, [c](auto& member, const Field& f) {
    using M = std::decay_t<decltype(member)>;
    if (f.help.empty()) return;
    const std::string name = option_name(f);
    if constexpr (std::is_same_v<M, bool>) {
      c->add_flag(name + ",!--no-" + name.substr(2), member, f.help);
    } else if constexpr (std::is_same_v<M, std::optional<int>>) {
      c->add_option(name, member, f.help);
    } else {
      CLI::Option* o = c->add_option(name, member, f.help)->capture_default_str();
      if constexpr (std::is_unsigned_v<M>) o->check(CLI::NonNegativeNumber);
    }
  });
}

// --preset, --layers, --dim, --heads, --kv-heads, --ffn, --latent-bits (ftx train, ftx bench).
inline void add_shape_options(CLI::App* c, ShapeOverrides& s) { add_field_options(c, s); }

// The options of every registered dataset (--coinflip-eps, --coinflip-len), written into
// t.dataset_options; every one of them starts at its default, so a run row lists them all.
void add_dataset_options(CLI::App* c, TrainConfig& t);

}  // namespace ftx::app
