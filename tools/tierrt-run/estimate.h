// `tierrt-run --estimate`: the command runs in observe mode (nothing moves)
// with its events recorded; when it ends, its recorded steps are modeled at a
// few budgets with the planner tierrt would run, against no offload.
#pragma once

#include <iosfwd>
#include <string>
#include <utility>
#include <vector>

#include "policies/link_model.hpp"

namespace tierrt::run {

// The variables an estimating run sets: TIERRT_MODE=observe and
// TIERRT_RECORD=`recording`. Refuses (one line in *error) a --mode other
// than observe, and a recording file name with placeholders (%p, %r): this
// program must find the file the run wrote.
bool estimate_variables(std::vector<std::pair<std::string, std::string>>* vars, const std::string& recording,
                        std::string* error);

// A file for the recording when none was asked for: a fresh one in $TMPDIR
// (else /tmp), removed after the estimate. "" (and *error) when none can be made.
std::string temporary_recording(std::string* error);

// Runs argv (with the environment already set), forwarding SIGINT, SIGTERM
// and SIGHUP to it, and returns its exit status as a shell reports it
// (128 + N for death by signal N); 127 when it cannot be run.
int run_and_wait(std::vector<std::string> argv);

// Reads `recording`, cuts it into steps and prints the estimate to `out`.
// `fallback_link` is the link for a run that measured none (observe mode
// moves nothing): TIERRT_LINK's, else pcie5. Returns false after printing
// one line to `err` when there is nothing to estimate from (no file, a
// corrupt file, no training step found in it).
bool print_estimate(const std::string& recording, const policy::LinkModel& fallback_link, bool link_given,
                    std::ostream& out, std::ostream& err);

}  // namespace tierrt::run
