// The entry point every fuzz target defines: libFuzzer calls it with each
// input when built with clang's -fsanitize=fuzzer (scripts/fuzz); the meson
// build links it with corpus_main.cpp, which feeds it the committed corpus.
#pragma once

#include <cstddef>
#include <cstdint>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size);

// A broken property: reported and aborted on, so that libFuzzer keeps the input
// and the corpus run fails.
[[noreturn]] void fuzz_violation(const char* what);

#define FUZZ_CHECK(cond)                                  \
  do {                                                    \
    if (!(cond)) fuzz_violation(#cond " at " __FILE__);   \
  } while (0)
