// Finding libtierrt.so and checking it before the command runs, so that a
// wrong path is one clear line rather than the loader's complaints from every
// process the command starts, or a run that is silently not tiered.
#pragma once

#include <string>

namespace tierrt::run {

// $TIERRT_LIBRARY when set; else beside this program in an installed tree
// (../lib*/libtierrt.so, ../lib/<multiarch>/libtierrt.so); else the library
// of the build this program came from. "" when none of them exists.
std::string find_library();

// Checks that `path` exists and that a process started with `ld_preload` as
// its LD_PRELOAD (the command's, with `path` in it) loads it and finds
// tierrt's API in it. Returns "" when so, else one line saying what is wrong.
//
// The library is loaded into a child, this program run again with
// kCheckLibraryFlag, not dlopen()ed here: libtierrt.so uses initial-exec TLS
// (the launch path reads its thread state without a call), which only a
// library loaded at start-up can have.
std::string check_library(const std::string& path, const std::string& ld_preload);

// The child's side: argv is {program, kCheckLibraryFlag, path}. Exit status 0
// when tierrt's API resolves to `path`, else 1 with one line on stderr.
inline constexpr const char* kCheckLibraryFlag = "--check-preloaded-library";
int check_preloaded_library(const char* path);

}  // namespace tierrt::run
