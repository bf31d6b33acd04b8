// A user reward program: an external command (run by /bin/sh -c) that reads JSON lines
// {"prompt": ..., "response": ..., "answer": ...} on stdin and writes one reward (a finite
// number) per line on stdout, in order. The queries are split over `processes` copies of the
// program running at once, each given a contiguous share. Every copy must exit 0 within the
// timeout and print exactly one number per query; anything else (a crash, a non-zero exit, a
// hang past the timeout, a missing, extra or unparsable line) fails the whole call with an
// error naming the command and the line, and no reward is returned: a step never trains on
// partial rewards.
#pragma once

#include <span>
#include <string>
#include <vector>

#include "core/status.h"

namespace ms::rl {

struct RewardQuery {
  std::string prompt;
  std::string response;
  std::string answer;
};

struct RewardProgram {
  std::string command;     // shell command line
  double timeout_s = 60.0; // wall-clock bound for every copy together
  int processes = 1;       // copies run at once
};

// One reward per query. InvalidArgument for an empty command, processes < 1 or timeout <= 0;
// DeadlineExceeded on the timeout (every copy is killed, its whole process group); Internal
// naming the exit status or signal; Corruption naming the output line for bad output.
Result<std::vector<double>> run_reward_program(const RewardProgram& program,
                                               std::span<const RewardQuery> queries);

// FAPO's flawed positives (Ding et al., "FAPO: Flawed-Aware Policy Optimization", 2025; verl's
// recipe/fapo): the queries whose reward is positive go to `checker`, a program run as a reward
// program is, which prints for each the index of the first flawed step of its response, or -1
// when every step holds (FAPO's generative reward model answers the same way). True for each
// positive the checker flags; the others are false and never shown to it. The checker's
// failures are run_reward_program's; a line that is not an integer of at least -1 is
// Corruption naming the checker and the line.
Result<std::vector<bool>> flawed_positives(const RewardProgram& checker,
                                           std::span<const RewardQuery> queries,
                                           std::span<const double> rewards);

}  // namespace ms::rl
