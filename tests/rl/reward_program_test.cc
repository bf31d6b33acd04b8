// User reward programs: rewards in order across a pool of copies, and every failure (crash,
// non-zero exit, hang past the timeout, garbage, too few or too many lines) an error naming the
// program, with no rewards returned.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "rl/reward_program.h"

namespace ms::rl {
namespace {

std::vector<RewardQuery> queries(int n) {
  std::vector<RewardQuery> q;
  for (int i = 0; i < n; ++i) {
    q.push_back({"What is " + std::to_string(i) + " + 1?", " It is " + std::to_string(i + 1) + ".",
                 std::to_string(i + 1)});
  }
  return q;
}

// Scores 1 when the answer appears in the response, and prints the query's number after it so
// the order is checked: reward = match + answer / 1000.
const char* kScorer =
    "python3 -c 'import json,sys\n"
    "for line in sys.stdin:\n"
    "    q = json.loads(line)\n"
    "    print(float(q[\"answer\"] in q[\"response\"]) + int(q[\"answer\"]) / 1000)'";

TEST(RewardProgram, RewardsInOrderAcrossAPool) {
  for (int processes : {1, 3}) {
    RewardProgram program{kScorer, 30.0, processes};
    Result<std::vector<double>> r = run_reward_program(program, queries(7));
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    ASSERT_EQ(r->size(), 7u);
    for (int i = 0; i < 7; ++i) EXPECT_DOUBLE_EQ((*r)[static_cast<size_t>(i)], 1.0 + (i + 1) / 1000.0);
  }
}

TEST(RewardProgram, LargeInputDoesNotDeadlock) {
  // More than a pipe buffer each way: the program reads everything before it writes.
  std::vector<RewardQuery> q = queries(3000);
  for (auto& x : q) x.response += std::string(200, 'x');
  RewardProgram program{"python3 -c 'import sys\nlines = sys.stdin.readlines()\n"
                        "sys.stdout.write(\"0.5\\n\" * len(lines))'", 60.0, 2};
  Result<std::vector<double>> r = run_reward_program(program, q);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->size(), 3000u);
  EXPECT_EQ(r->back(), 0.5);
}

std::string failure(const std::string& command, int n = 3, double timeout_s = 10.0, int processes = 1) {
  RewardProgram program{command, timeout_s, processes};
  Result<std::vector<double>> r = run_reward_program(program, queries(n));
  EXPECT_FALSE(r.ok()) << command << " succeeded";
  const std::string m = r.ok() ? "" : r.status().message();
  EXPECT_NE(m.find(command), std::string::npos) << "error does not name the program: " << m;
  return m;
}

TEST(RewardProgram, CrashIsAnError) {
  const std::string m = failure("echo 1; echo broken >&2; kill -SEGV $$");
  EXPECT_NE(m.find("killed by signal 11"), std::string::npos) << m;
  EXPECT_NE(m.find("broken"), std::string::npos) << m;
}

TEST(RewardProgram, NonZeroExitIsAnError) {
  const std::string m = failure("cat > /dev/null; echo 1; echo 1; echo 1; exit 3");
  EXPECT_NE(m.find("exited with status 3"), std::string::npos) << m;
}

TEST(RewardProgram, HangIsKilledAtTheTimeout) {
  const std::string m = failure("sleep 30", 3, 0.3);
  EXPECT_NE(m.find("did not finish within"), std::string::npos) << m;
  // A child that closes its output but keeps running is caught too.
  const std::string m2 = failure("exec >&- 2>&-; sleep 30", 3, 0.3);
  EXPECT_NE(m2.find("did not exit within"), std::string::npos) << m2;
}

TEST(RewardProgram, GarbageNamesTheLine) {
  const std::string m = failure("cat > /dev/null; printf '1\\n0.5\\nabc\\n'");
  EXPECT_NE(m.find("output line 3"), std::string::npos) << m;
  EXPECT_NE(m.find("'abc'"), std::string::npos) << m;
  const std::string nan = failure("cat > /dev/null; printf '1\\nnan\\n1\\n'");
  EXPECT_NE(nan.find("output line 2"), std::string::npos) << nan;
  const std::string trailing = failure("cat > /dev/null; printf '1\\n2 3\\n1\\n'");
  EXPECT_NE(trailing.find("output line 2"), std::string::npos) << trailing;
}

TEST(RewardProgram, WrongLineCountIsAnError) {
  const std::string few = failure("cat > /dev/null; printf '1\\n0\\n'");
  EXPECT_NE(few.find("printed 2 lines for 3 responses"), std::string::npos) << few;
  const std::string many = failure("cat > /dev/null; printf '1\\n0\\n1\\n1\\n'");
  EXPECT_NE(many.find("more lines"), std::string::npos) << many;
  // A program that exits without reading its input does not take the trainer down (SIGPIPE).
  const std::string unread = failure("echo 1", 2000);
  EXPECT_NE(unread.find("printed 1 lines for 2000"), std::string::npos) << unread;
}

// FAPO's step checker sees only the positives, in order, and flags those whose line is not -1;
// a line that is not the index of a step (or -1) is an error naming the checker and the line.
TEST(FlawedPositives, OnlyPositivesAreCheckedAndNonMinusOneFlags) {
  // Flags a response that says "guess" (its step 0), and fails if it is shown the negative
  // ("wrong" in the response), which it must never see.
  const std::string checker =
      "while IFS= read -r line; do case \"$line\" in *wrong*) exit 3;; *guess*) echo 0;; "
      "*) echo -1;; esac; done";
  std::vector<RewardQuery> q = queries(5);
  q[1].response = " I guess it is 2.";
  q[2].response = " wrong: a guess";  // negative: never shown, or the checker exits 3
  q[4].response = " guess 5.";
  const std::vector<double> rewards = {1.0, 1.0, -1.0, 0.5, 1.0};
  for (int processes : {1, 2}) {
    Result<std::vector<bool>> flawed =
        flawed_positives(RewardProgram{checker, 30.0, processes}, q, rewards);
    ASSERT_TRUE(flawed.ok()) << flawed.status().to_string();
    EXPECT_EQ(*flawed, (std::vector<bool>{false, true, false, false, true}));
  }
  // Nothing positive: the checker is not run at all.
  Result<std::vector<bool>> none =
      flawed_positives(RewardProgram{"exit 1", 30.0, 1}, q, std::vector<double>(5, 0.0));
  ASSERT_TRUE(none.ok()) << none.status().to_string();
  EXPECT_EQ(*none, std::vector<bool>(5, false));

  for (const char* bad : {"cat > /dev/null; printf '%s\\n' -1 1.5 -1 -1",
                          "cat > /dev/null; printf '%s\\n' -1 -2 -1 -1"}) {
    Result<std::vector<bool>> r = flawed_positives(RewardProgram{bad, 30.0, 1}, q, rewards);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_NE(r.status().message().find("step checker"), std::string::npos) << r.status().message();
    EXPECT_NE(r.status().message().find("line 2"), std::string::npos) << r.status().message();
  }
  // A crashing checker fails like a crashing reward program, named as the step checker.
  Result<std::vector<bool>> crashed =
      flawed_positives(RewardProgram{"cat > /dev/null; kill -9 $$", 30.0, 1}, q, rewards);
  ASSERT_FALSE(crashed.ok());
  EXPECT_NE(crashed.status().message().find("step checker"), std::string::npos)
      << crashed.status().message();
}

TEST(RewardProgram, RejectsBadSettings) {
  EXPECT_FALSE(run_reward_program(RewardProgram{"", 1.0, 1}, queries(1)).ok());
  EXPECT_FALSE(run_reward_program(RewardProgram{"cat", 0.0, 1}, queries(1)).ok());
  EXPECT_FALSE(run_reward_program(RewardProgram{"cat", 1.0, 0}, queries(1)).ok());
}

}  // namespace
}  // namespace ms::rl
