// Mixture plans as a specification: the blend keeps every source within one sample of its
// share at every prefix (per schedule phase), validation documents never reach training,
// samples are seq_len + 1 consecutive tokens of a per-epoch shuffled document stream, the file
// round-trips, and damaged or stale plans are refused with what is wrong.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <set>

#include "core/philox.h"
#include "data/plan.h"
#include "data/plan_builder.h"
#include "data/plan_samples.h"
#include "plan_fixtures.h"

namespace ms::data {
namespace {

using ::testing::HasSubstr;
using testing::PlanDir;

std::vector<double> random_weights(size_t n, uint64_t seed) {
  std::vector<double> w(n);
  double sum = 0;
  for (size_t i = 0; i < n; ++i) sum += (w[i] = 0.01 + uniform(seed, 1, i));
  for (double& x : w) x /= sum;
  return w;
}

TEST(Blend, EveryPrefixStaysWithinOneSampleOfEachShare) {
  for (uint64_t seed : {1, 2, 3}) {
    const std::vector<double> w = random_weights(8, seed);
    const std::vector<PlanPhase> phases{{0, w}};
    const BlendResult r = blend(phases, 8, 20000);
    std::vector<double> counts(8, 0);
    for (int64_t n = 1; n <= 20000; ++n) {
      counts[r.source[n - 1]] += 1;
      for (size_t s = 0; s < 8; ++s) {
        ASSERT_LE(std::abs(counts[s] - w[s] * n), 1.0) << "source " << s << " after " << n;
      }
    }
  }
}

TEST(Blend, IndicesCountEachSourceAndZeroWeightIsNeverPicked) {
  const std::vector<PlanPhase> phases{{0, {0.5, 0.0, 0.5}}};
  const BlendResult r = blend(phases, 3, 101);
  EXPECT_EQ(r.counts, (std::vector<uint64_t>{51, 0, 50}));
  std::vector<uint64_t> next(3, 0);
  for (size_t i = 0; i < r.source.size(); ++i) EXPECT_EQ(r.index[i], next[r.source[i]]++);
}

TEST(Blend, ScheduleSwitchesWeightsAtTheGivenSample) {
  const std::vector<PlanPhase> phases{{0, {1.0, 0.0}}, {100, {0.25, 0.75}}};
  const BlendResult r = blend(phases, 2, 500);
  for (int i = 0; i < 100; ++i) ASSERT_EQ(r.source[i], 0);
  double taken1 = 0;
  for (int i = 100; i < 500; ++i) {
    taken1 += r.source[i];
    ASSERT_LE(std::abs(taken1 - 0.75 * (i - 99)), 1.0);
  }
}

TEST(Blend, IsDeterministic) {
  const std::vector<PlanPhase> phases{{0, random_weights(5, 9)}};
  EXPECT_EQ(blend(phases, 5, 3000).source, blend(phases, 5, 3000).source);
}

TEST(Shuffle, IsASeededPermutation) {
  std::vector<uint32_t> a(1000);
  for (uint32_t i = 0; i < a.size(); ++i) a[i] = i;
  std::vector<uint32_t> b = a, c = a;
  shuffle(b, 1, 2);
  shuffle(c, 1, 2);
  EXPECT_EQ(b, c);
  EXPECT_NE(b, a);
  std::sort(c.begin(), c.end());
  EXPECT_EQ(c, a);
  shuffle(c, 1, 3);
  EXPECT_NE(c, b);
}

TEST(Plan, ValidationDocumentsAreDisjointFromTraining) {
  PlanDir dir;
  const MixtureConfig config = testing::two_source_mixture(dir, 2000);
  testing::plan_or_fail(config, dir.file("mix.plan"));
  auto plan = Plan::open(dir.file("mix.plan"));
  ASSERT_TRUE(plan.ok()) << plan.status().to_string();
  for (uint32_t s = 0; s < 2; ++s) {
    const auto train = (*plan)->sequence_order(Split::kTrain, s);
    const auto val = (*plan)->sequence_order(Split::kValidation, s);
    const std::set<uint32_t> train_set(train.begin(), train.end());
    const std::set<uint32_t> val_set(val.begin(), val.end());
    ASSERT_FALSE(val_set.empty());
    for (uint32_t seq : val_set) EXPECT_EQ(train_set.count(seq), 0u) << "sequence " << seq;
    const PlanSource& src = (*plan)->info().sources[s];
    EXPECT_EQ(train_set.size() + val_set.size(), src.dataset_sequences);
    for (uint32_t seq : val_set) EXPECT_TRUE(held_out_for_validation(7, seq, 0.2));
  }
}

TEST(Plan, SamplesAreConsecutiveWindowsOfShuffledEpochs) {
  PlanDir dir;
  const MixtureConfig config = testing::two_source_mixture(dir, 400);
  testing::plan_or_fail(config, dir.file("mix.plan"));
  auto plan = Plan::open(dir.file("mix.plan"));
  ASSERT_TRUE(plan.ok());
  auto reader = PlanSampleReader::open(*plan, Split::kTrain);
  ASSERT_TRUE(reader.ok()) << reader.status().to_string();
  const PlanSource& a = (*plan)->info().sources[0];
  // Source a's stream: its epochs, each a permutation of its training sequences.
  const auto order = (*plan)->sequence_order(Split::kTrain, 0);
  ASSERT_EQ(order.size(), a.splits[0].epochs * a.splits[0].sequences);
  EXPECT_GE(a.splits[0].epochs, 2u);
  std::vector<uint32_t> first(order.begin(), order.begin() + a.splits[0].sequences);
  std::vector<uint32_t> second(order.begin() + a.splits[0].sequences,
                               order.begin() + 2 * a.splits[0].sequences);
  EXPECT_NE(first, second);
  std::sort(first.begin(), first.end());
  std::sort(second.begin(), second.end());
  EXPECT_EQ(first, second);
  std::vector<int32_t> stream;
  auto dataset = IndexedDataset::open(a.prefix);
  ASSERT_TRUE(dataset.ok());
  for (uint32_t seq : order) {
    std::vector<int32_t> doc(dataset->sequence_length(seq));
    dataset->read_tokens(seq, 0, doc.size(), doc.data());
    stream.insert(stream.end(), doc.begin(), doc.end());
  }
  // Every global sample of source a is stream[k*L, k*L + L + 1).
  std::vector<int32_t> sample(17);
  for (int64_t g = 0; g < 400; ++g) {
    const SampleRef ref = (*plan)->sample(Split::kTrain, g);
    if (ref.source != 0) continue;
    ASSERT_TRUE((*reader)->read(g, sample).ok());
    const std::vector<int32_t> expected(stream.begin() + ref.index * 16,
                                        stream.begin() + ref.index * 16 + 17);
    ASSERT_EQ(sample, expected) << "global sample " << g;
  }
}

TEST(Plan, RecordsTheMixtureAndRoundTrips) {
  PlanDir dir;
  MixtureConfig config = testing::two_source_mixture(dir, 300);
  config.schedule = {{100, {{"b", 1.0}}}};
  Result<PlanInfo> written = plan_mixture(config, dir.file("mix.plan"));
  ASSERT_TRUE(written.ok()) << written.status().to_string();
  auto plan = Plan::open(dir.file("mix.plan"));
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ((*plan)->info(), *written);
  const PlanInfo& info = (*plan)->info();
  EXPECT_EQ(info.seq_len, 16);
  EXPECT_EQ(info.samples[0], 300);
  EXPECT_EQ(info.samples[1], 24);
  ASSERT_EQ(info.schedule.size(), 2u);
  EXPECT_EQ(info.schedule[1].weights, (std::vector<double>{0.0, 1.0}));
  EXPECT_DOUBLE_EQ(info.sources[0].weight, 0.75);
  EXPECT_EQ(info.sources[0].splits[0].samples + info.sources[1].splits[0].samples, 300u);
  EXPECT_EQ(info.sources[0].splits[0].samples, 75u);  // 0.75 of the first 100, none after
  EXPECT_EQ(info.sources[0].vocab_size, 50257);
  EXPECT_EQ((*plan)->hash().size(), 16u);
}

TEST(Plan, SameConfigAndDataGiveTheSameBytes) {
  PlanDir dir;
  const MixtureConfig config = testing::two_source_mixture(dir);
  testing::plan_or_fail(config, dir.file("one.plan"));
  testing::plan_or_fail(config, dir.file("two.plan"));
  auto one = Plan::open(dir.file("one.plan"));
  auto two = Plan::open(dir.file("two.plan"));
  ASSERT_TRUE(one.ok() && two.ok());
  EXPECT_EQ((*one)->hash(), (*two)->hash());
}

TEST(Plan, SourceWithWeightButNoTokensIsNamed) {
  PlanDir dir;
  MixtureConfig config = testing::two_source_mixture(dir);
  config.sources[1].prefix = testing::write_dataset(dir.file("empty"), {}, 3);
  Result<PlanInfo> r = plan_mixture(config, dir.file("mix.plan"));
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), HasSubstr("source 'b'"));
  EXPECT_FALSE(std::filesystem::exists(dir.file("mix.plan")));
}

TEST(Plan, SourcesWithDifferentTokenizersAreRefused) {
  PlanDir dir;
  const MixtureConfig config = testing::two_source_mixture(dir);
  auto inputs = load_plan_inputs(config);
  ASSERT_TRUE(inputs.ok());
  (*inputs)[1].tokenizer_hash = "other";
  Result<PlanInfo> r = build_plan(config, *inputs, dir.file("mix.plan"));
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), HasSubstr("different tokenizers"));
}

TEST(Plan, MissingDatasetIsNamed) {
  PlanDir dir;
  MixtureConfig config = testing::two_source_mixture(dir);
  config.sources[0].prefix = dir.file("nope");
  Result<PlanInfo> r = plan_mixture(config, dir.file("mix.plan"));
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), HasSubstr("source 'a'"));
}

// ---- damaged plans ----

class DamagedPlan : public ::testing::Test {
 protected:
  void SetUp() override {
    testing::plan_or_fail(testing::two_source_mixture(dir_), dir_.file("mix.plan"));
    std::ifstream in(dir_.file("mix.plan"), std::ios::binary);
    bytes_.assign(std::istreambuf_iterator<char>(in), {});
    ASSERT_GT(bytes_.size(), 200u);
  }
  std::string error_of(std::string bytes) {
    auto plan = Plan::from_bytes(std::move(bytes), "mix.plan");
    EXPECT_FALSE(plan.ok());
    return plan.ok() ? "" : plan.status().to_string();
  }
  PlanDir dir_;
  std::string bytes_;
};

TEST_F(DamagedPlan, IntactBytesParse) { EXPECT_TRUE(Plan::from_bytes(bytes_, "x").ok()); }

TEST_F(DamagedPlan, TruncatedIsRefused) {
  EXPECT_THAT(error_of(bytes_.substr(0, 10)), HasSubstr("truncated"));
  EXPECT_THAT(error_of(bytes_.substr(0, bytes_.size() - 8)), HasSubstr("truncated"));
  EXPECT_THAT(error_of(""), HasSubstr("truncated"));
}

TEST_F(DamagedPlan, BadMagicIsRefused) {
  bytes_[0] = 'X';
  EXPECT_THAT(error_of(bytes_), HasSubstr("bad magic"));
}

TEST_F(DamagedPlan, FlippedPayloadByteFailsTheCrc) {
  bytes_[bytes_.size() / 2] ^= 0x40;
  EXPECT_THAT(error_of(bytes_), HasSubstr("payload crc32c mismatch"));
}

TEST_F(DamagedPlan, FlippedHeaderByteFailsTheHeaderCrc) {
  bytes_[20] ^= 0x01;
  EXPECT_THAT(error_of(bytes_), HasSubstr("header crc32c mismatch"));
}

TEST_F(DamagedPlan, NewerVersionIsRefusedAsSuch) {
  bytes_[8] = 9;
  auto plan = Plan::from_bytes(bytes_, "mix.plan");
  ASSERT_FALSE(plan.ok());
  EXPECT_EQ(plan.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_THAT(plan.status().message(), HasSubstr("format version 9"));
}

TEST_F(DamagedPlan, TrailingBytesAreRefused) {
  EXPECT_THAT(error_of(bytes_ + "junk"), HasSubstr("trailing bytes"));
}

TEST(Plan, MissingFileIsNotFound) {
  auto plan = Plan::open("/nonexistent/mix.plan");
  ASSERT_FALSE(plan.ok());
  EXPECT_EQ(plan.status().code(), StatusCode::kNotFound);
}

TEST(Plan, DatasetChangedSincePlanningIsRefusedNamingTheSource) {
  PlanDir dir;
  const MixtureConfig config = testing::two_source_mixture(dir);
  testing::plan_or_fail(config, dir.file("mix.plan"));
  testing::write_dataset(config.sources[1].prefix, testing::varied_lengths(41, 25), 2);
  auto plan = Plan::open(dir.file("mix.plan"));
  ASSERT_TRUE(plan.ok());
  auto reader = PlanSampleReader::open(*plan, Split::kTrain);
  ASSERT_FALSE(reader.ok());
  EXPECT_EQ(reader.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_THAT(reader.status().message(), HasSubstr("source 'b'"));
  EXPECT_THAT(reader.status().message(), HasSubstr("changed since the plan was made"));
}

}  // namespace
}  // namespace ms::data
