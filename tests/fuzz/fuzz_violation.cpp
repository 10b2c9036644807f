#include <cstdio>
#include <cstdlib>

#include "fuzz_target.h"

void fuzz_violation(const char* what) {
  std::fprintf(stderr, "fuzz property broken: %s\n", what);
  std::abort();
}
