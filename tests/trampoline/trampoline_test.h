// Shared by the stub (stub.c) and the test program (main.c).
#ifndef TIERRT_TESTS_TRAMPOLINE_TEST_H
#define TIERRT_TESTS_TRAMPOLINE_TEST_H

// What the stub saw of the last call it answered in the trampoline's stead.
struct tt_record {
  char via;             // 'd' / 'v': dlsym / dlvsym driver path; 'l': where libc's function would run
  void *handle;
  const char *name;
  const char *version;  // dlvsym only
  void *caller;         // the return address the callee found: the trampoline must not be it
};

#endif
