// ms::cli::Tool: a word that names no subcommand is a usage error (exit 2) naming it, even
// when --help follows it; options' values are not taken for subcommands; an escaped
// std::length_error is worded without the library's internals, and a device out of memory as
// its allocator said it.
#include "cmd/common/tool.h"

#include <gtest/gtest.h>

#include <stdexcept>
#include <string>
#include <vector>

#include "core/device_runtime.h"

namespace ms::cli {
namespace {

// Runs a tool with one subcommand, `prune`, on `args`; the exit code and what it printed on
// stderr.
std::pair<int, std::string> run_tool(std::vector<std::string> args) {
  Tool tool("ms-test", "a test tool");
  tool.add_subcommand("prune", "does nothing", [] { return Result<int>(0); });
  args.insert(args.begin(), "ms-test");
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  ::testing::internal::CaptureStderr();
  ::testing::internal::CaptureStdout();
  const int code = tool.run(static_cast<int>(argv.size()), argv.data());
  ::testing::internal::GetCapturedStdout();
  return {code, ::testing::internal::GetCapturedStderr()};
}

TEST(Tool, AnUnknownSubcommandWithHelpIsAUsageError) {
  const auto [code, err] = run_tool({"grow", "--help"});
  EXPECT_EQ(code, 2);
  EXPECT_NE(err.find("ms-test: error: unknown subcommand 'grow' (ms-test has: prune)"),
            std::string::npos)
      << err;
}

TEST(Tool, AnOptionsValueIsNotASubcommand) {
  EXPECT_EQ(run_tool({"--log-level", "warn", "prune"}).first, 0);
  EXPECT_EQ(run_tool({"--log-level=warn", "prune", "--help"}).first, 0);
  const auto [code, err] = run_tool({"--log-level", "warn", "grow"});
  EXPECT_EQ(code, 2);
  EXPECT_NE(err.find("unknown subcommand 'grow'"), std::string::npos) << err;
}

// A flag takes no value: the word after it is the next argument, not the flag's value (the
// Tool's --log-all-ranks flag here; `ms-train --dry-run --ranks 4` in e2e.train_plan).
TEST(Tool, AFlagTakesNoValue) {
  EXPECT_EQ(run_tool({"--log-all-ranks", "prune"}).first, 0);
  const auto [code, err] = run_tool({"--log-all-ranks", "grow"});
  EXPECT_EQ(code, 2);
  EXPECT_NE(err.find("unknown subcommand 'grow'"), std::string::npos) << err;
}

TEST(Tool, AnUnknownOptionIsLeftToCli11) {
  const auto [code, err] = run_tool({"--bogus", "5", "prune"});
  EXPECT_EQ(code, 2);
  EXPECT_EQ(err.find("unknown subcommand"), std::string::npos) << err;
}

TEST(Tool, LengthErrorIsWordedWithoutLibraryInternals) {
  const Status s = unexpected_exception(std::length_error("vector::_M_default_append"));
  EXPECT_EQ(s.message().find("_M_default_append"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("a count too large for memory"), std::string::npos) << s.message();
}

TEST(Tool, DeviceOutOfMemoryIsPrintedAsTheAllocatorSaidIt) {
  const std::string said = "cuda:0 is out of arena memory allocating 3.0 GiB (in use 70.1 GiB)";
  const Status s = unexpected_exception(DeviceOutOfMemory(said));
  EXPECT_NE(s.message().find(said), std::string::npos) << s.message();
  EXPECT_EQ(s.message().find("an input probably claims"), std::string::npos) << s.message();
}

}  // namespace
}  // namespace ms::cli
