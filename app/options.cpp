// Dataset options on the command line, and how it names a field (see options.h).
#include "app/options.h"

#include "datasets/registry.h"

namespace ftx::app {

std::string option_name(const Field& f) {
  std::string name = f.option ? f.option : f.key;
  for (char& ch : name)
    if (ch == '_') ch = '-';
  return "--" + name;
}

void add_dataset_options(CLI::App* c, TrainConfig& t) {
  t.dataset_options = default_dataset_options();
  for (const DatasetInfo& d : registered_datasets())
    for (const DatasetOption& o : d.options) {
      const std::string help = o.field.help + " (dataset " + d.name + ")";
      if (o.text) {
        c->add_option_function<std::string>(
            option_name(o.field), [&t, o](const std::string& v) { t.dataset_options[o.field.key] = v; }, help);
        continue;
      }
      auto set = [&t, o](double v) { t.dataset_options[o.field.key] = dataset_option_json(o, v); };
      CLI::Option* opt = o.integer ? c->add_option_function<int>(
                                         option_name(o.field), [set](const int& v) { set(v); }, help)
                                   : c->add_option_function<double>(option_name(o.field), set, help);
      opt->default_str(field_value_text(o.default_value));
    }
}

}  // namespace ftx::app
