#pragma once
// Minimal assertions for the outside-project tests: no test framework is assumed installed.
#include <cstdio>
#include <cstdlib>

#define RL_CHECK(cond)                                                                   \
  do {                                                                                  \
    if (!(cond)) {                                                                      \
      std::fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond);     \
      std::exit(1);                                                                     \
    }                                                                                   \
  } while (0)
