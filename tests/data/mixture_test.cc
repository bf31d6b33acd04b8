// Mixture YAML as a user writes it: what parses, and the errors (with file:line:col and a
// did-you-mean) for typos inside sources, schedules and at the top level.
#include "data/mixture.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace ms::data {
namespace {

using ::testing::HasSubstr;

constexpr const char* kMix =
    "seq_len: 64\n"
    "seed: 5\n"
    "total_samples: 1000\n"
    "validation: {fraction: 0.1}\n"
    "sources:\n"
    "  - {name: books, prefix: data/books, weight: 3}\n"
    "  - name: code\n"
    "    prefix: data/code\n"
    "    weight: 1\n"
    "schedule:\n"
    "  - {at_sample: 500, weights: {code: 1}}\n";

std::string error_of(const std::string& text, const std::vector<std::string>& sets = {}) {
  Result<MixtureConfig> r = parse_mixture(text, "mix.yaml", sets);
  EXPECT_FALSE(r.ok()) << "parsed unexpectedly:\n" << text;
  return r.ok() ? "" : r.status().message();
}

TEST(Mixture, ParsesSourcesScheduleAndTotals) {
  Result<MixtureConfig> r = parse_mixture(kMix, "mix.yaml");
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  ASSERT_EQ(r->sources.size(), 2u);
  EXPECT_EQ(r->sources[0], (MixtureSource{"books", "data/books", 3.0}));
  EXPECT_EQ(r->sources[1], (MixtureSource{"code", "data/code", 1.0}));
  EXPECT_EQ(r->seq_len, 64);
  EXPECT_EQ(r->train_samples(), 1000);
  EXPECT_EQ(r->validation_samples(), 100);
  ASSERT_EQ(r->schedule.size(), 1u);
  EXPECT_EQ(r->schedule[0].at_sample, 500);
  EXPECT_EQ(r->schedule[0].weights, (std::vector<std::pair<std::string, double>>{{"code", 1.0}}));
}

TEST(Mixture, TotalTokensBecomeSamples) {
  Result<MixtureConfig> r = parse_mixture(kMix, "mix.yaml", {"total_samples=0", "total_tokens=6401", "schedule=[]"});
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->train_samples(), 101);
}

TEST(Mixture, DumpReadsBack) {
  Result<MixtureConfig> r = parse_mixture(kMix, "mix.yaml");
  ASSERT_TRUE(r.ok());
  Result<MixtureConfig> again = parse_mixture(mixture_schema().dump(*r), "dump.yaml");
  ASSERT_TRUE(again.ok()) << again.status().to_string() << "\n" << mixture_schema().dump(*r);
  EXPECT_EQ(*again, *r);
}

TEST(Mixture, UnknownKeyInsideASourceNamesItemLineAndSuggestion) {
  const std::string text = std::string(kMix) + "";
  std::string bad = text;
  bad.replace(bad.find("weight: 1\n"), 9, "wieght: 1");
  const std::string e = error_of(bad);
  EXPECT_THAT(e, HasSubstr("mix.yaml:6:"));
  EXPECT_THAT(e, HasSubstr("'sources' item 2 (line 7)"));
  EXPECT_THAT(e, HasSubstr("unknown key 'wieght'; did you mean 'weight'?"));
}

TEST(Mixture, TopLevelTypoGetsDidYouMean) {
  EXPECT_THAT(error_of(std::string(kMix) + "sed_len: 3\n"),
              HasSubstr("unknown key 'sed_len'; did you mean 'seq_len'?"));
}

TEST(Mixture, MissingSourceKeyAndNegativeWeight) {
  EXPECT_THAT(error_of("total_samples: 5\nsources: [{name: a, weight: 1}]\n"),
              HasSubstr("missing key 'prefix'"));
  EXPECT_THAT(error_of("total_samples: 5\nsources: [{name: a, prefix: p, weight: -1}]\n"),
              HasSubstr("'weight' must be >= 0"));
}

TEST(Mixture, RulesBetweenKeys) {
  EXPECT_THAT(error_of("sources: [{name: a, prefix: p, weight: 1}]\n"),
              HasSubstr("set exactly one of total_samples and total_tokens"));
  EXPECT_THAT(error_of(kMix, {"total_tokens=10"}), HasSubstr("exactly one"));
  EXPECT_THAT(error_of(kMix, {"sources=[{name: a, prefix: p, weight: 1}, {name: a, prefix: q, weight: 1}]"}),
              HasSubstr("source name 'a' is used twice"));
  EXPECT_THAT(error_of(kMix, {"sources=[{name: a, prefix: p, weight: 0}]"}),
              HasSubstr("every source has weight 0"));
  EXPECT_THAT(error_of(kMix, {"sources=[]"}), HasSubstr("must not be empty"));
}

TEST(Mixture, ScheduleErrors) {
  EXPECT_THAT(error_of(kMix, {"schedule=[{at_sample: 10, weights: {cod: 1}}]"}),
              HasSubstr("unknown source 'cod'; did you mean 'code'?"));
  EXPECT_THAT(error_of(kMix, {"schedule=[{at_sample: 10, weights: {code: 1}}, {at_sample: 5, weights: {code: 1}}]"}),
              HasSubstr("increasing"));
  EXPECT_THAT(error_of(kMix, {"schedule=[{at_sample: 5000, weights: {code: 1}}]"}),
              HasSubstr("after the last training sample"));
  EXPECT_THAT(error_of(kMix, {"schedule=[{at_sample: 5, weight: {code: 1}}]"}),
              HasSubstr("did you mean 'weights'?"));
}

TEST(Mixture, ValidationBounds) {
  EXPECT_THAT(error_of(kMix, {"validation.fraction=1"}), HasSubstr("'validation.fraction' must be in [0, 1)"));
  EXPECT_THAT(error_of(kMix, {"validation={fraction: 0, samples: 5}"}),
              HasSubstr("no documents are held out"));
}

}  // namespace
}  // namespace ms::data
