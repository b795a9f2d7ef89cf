// Placeholder until the choice tasks land; replaced as a whole by their implementation.
#include "core/eval/bench/task_loaders.h"

namespace ftx::bench {

Result<std::unique_ptr<Task>> load_choice_task(const TaskInfo& info, const std::string& path, const std::string&) {
  return make_error(path + ": task '" + info.name + "' is not implemented yet");
}

}  // namespace ftx::bench
