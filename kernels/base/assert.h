// FT_ASSERT: always-on check for broken invariants (bugs), never for anything a user or a file
// controls (those return Result, kernels/base/result.h). Prints file:line and aborts.
#pragma once
#include <cstdio>
#include <cstdlib>

#define FT_ASSERT(cond, ...)                                                            \
  do {                                                                                  \
    if (!(cond)) {                                                                      \
      std::fprintf(stderr, "%s:%d: assertion failed: %s: ", __FILE__, __LINE__, #cond); \
      std::fprintf(stderr, __VA_ARGS__);                                                \
      std::fprintf(stderr, "\n");                                                       \
      std::abort();                                                                     \
    }                                                                                   \
  } while (0)
