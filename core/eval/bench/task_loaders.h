// The task families behind load_task (task.cpp dispatches on TaskInfo::kind). Internal to
// core/eval/bench.
#pragma once
#include <memory>
#include <string>

#include "core/eval/bench/task.h"

namespace ftx::bench {

// humaneval, humaneval_plus, mbpp, mbpp_plus (code_tasks.cpp): pass@k in the sandbox.
Result<std::unique_ptr<Task>> load_code_task(const TaskInfo& info, const std::string& path,
                                             const std::string& fewshot_path);
// mmlu, csqa, hellaswag, arc_*, piqa, winogrande, boolq, obqa, race_* (choice_tasks.cpp).
Result<std::unique_ptr<Task>> load_choice_task(const TaskInfo& info, const std::string& path,
                                               const std::string& fewshot_path);
// gsm8k, nq_open, triviaqa (generative_tasks.cpp): exact match.
Result<std::unique_ptr<Task>> load_generative_task(const TaskInfo& info, const std::string& path,
                                                   const std::string& fewshot_path);

}  // namespace ftx::bench
