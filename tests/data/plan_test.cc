// Mixture plans as a specification: the blend keeps every source within one sample of its
// share at every prefix (per schedule phase), validation documents never reach training,
// samples are seq_len + 1 consecutive tokens of a per-epoch shuffled document stream, the file
// round-trips, and damaged or stale plans are refused with what is wrong.
#include "data/plan.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <fstream>
#include <limits>
#include <set>

#include "core/philox.h"
#include "io/fault_env.h"
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

// Megatron's rule serves a source at most one sample ahead of its share, and at most 1 + w_s
// behind it (the max(i, 1) target lags the i + 1 one by a sample).
TEST(Blend, EveryPrefixStaysWithinItsShareBounds) {
  for (uint64_t seed : {1, 2, 3}) {
    const std::vector<double> w = random_weights(8, seed);
    const std::vector<PlanPhase> phases{{0, w}};
    const BlendResult r = blend(phases, 8, 20000);
    std::vector<double> counts(8, 0);
    for (int64_t n = 1; n <= 20000; ++n) {
      counts[r.source[n - 1]] += 1;
      for (size_t s = 0; s < 8; ++s) {
        ASSERT_LT(counts[s], w[s] * n + 1.0) << "source " << s << " after " << n;
        ASSERT_GT(counts[s], w[s] * (n - 1) - 1.0) << "source " << s << " after " << n;
      }
    }
  }
}

// Source sequences worked out by hand from Megatron-LM's build_blending_indices: sample i goes
// to argmax_s w_s * max(i, 1) - taken_s, ties to the lower index. For 0.8/0.2:
//   i=0: (0.8, 0.2) -> 0     i=1: (-0.2, 0.2) -> 1    i=2: (0.6, -0.6) -> 0
//   i=3: (0.4, -0.4) -> 0    i=4: (0.2, -0.2) -> 0    i=5: (0, 0) tie -> 0
//   i=6: (-0.2, 0.2) -> 1 ...
// The old i + 1 target gave 0, 0, 1, ... (sample 1 differed).
std::string source_string(const BlendResult& r) {
  std::string out;
  for (uint16_t s : r.source) out.push_back(static_cast<char>('0' + s));
  return out;
}

TEST(Blend, MatchesMegatronSequencesComputedByHand) {
  struct Case {
    std::vector<double> weights;
    std::string expected;
  };
  const std::vector<Case> cases = {
      {{0.8, 0.2}, "010000100001"},
      {{0.5, 0.3, 0.2}, "012010201001"},
      {{0.25, 0.25, 0.5}, "201202120212"},
      {{0.7, 0.2, 0.1}, "010200100001"},
  };
  for (const Case& c : cases) {
    const std::vector<PlanPhase> phases{{0, c.weights}};
    EXPECT_EQ(source_string(blend(phases, c.weights.size(), 12)), c.expected)
        << "weights " << ::testing::PrintToString(c.weights);
  }
}

// Megatron's helper would give sample 1 of a (0, 1) blend to the zero-weight source (0 - 0 ties
// 1 - 1); ms-data leaves unweighted sources out, so a phase is Megatron's blend over its
// weighted sources.
TEST(Blend, ZeroWeightSourcesAreLeftOutOfTheRule) {
  const std::vector<PlanPhase> with_zero{{0, {0.8, 0.0, 0.2}}};
  std::string s = source_string(blend(with_zero, 3, 12));
  EXPECT_EQ(s, "020000200002");
  const std::vector<PlanPhase> only_second{{0, {0.0, 1.0}}};
  EXPECT_EQ(source_string(blend(only_second, 2, 6)), "111111");
}

TEST(Blend, APhaseCountsItsSamplesFromItsOwnStart) {
  const std::vector<PlanPhase> phases{{0, {0.0, 1.0}}, {5, {0.8, 0.2}}};
  const std::string s = source_string(blend(phases, 2, 17));
  EXPECT_EQ(s.substr(0, 5), "11111");
  EXPECT_EQ(s.substr(5), "010000100001");
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

// The rule as written: for each sample, score every weighted source and take the first
// maximum. The blender ranks the deficits one pick behind to shorten its dependency chain; it
// must pick exactly what this loop picks, ties included.
std::vector<uint16_t> plain_blend(const std::vector<PlanPhase>& phases, size_t num_sources,
                                  int64_t samples) {
  std::vector<uint16_t> picks;
  for (size_t p = 0; p < phases.size(); ++p) {
    const int64_t begin = phases[p].at_sample;
    const int64_t end = p + 1 < phases.size() ? phases[p + 1].at_sample : samples;
    std::vector<double> taken(num_sources, 0.0);
    for (int64_t i = begin; i < end; ++i) {
      const double k = static_cast<double>(std::max<int64_t>(i - begin, 1));
      int best = -1;
      double best_deficit = 0;
      for (size_t s = 0; s < num_sources; ++s) {
        const double w = phases[p].weights[s];
        if (w <= 0) continue;
        const double deficit = w * k - taken[s];
        if (best < 0 || deficit > best_deficit) {
          best = static_cast<int>(s);
          best_deficit = deficit;
        }
      }
      const uint16_t pick = static_cast<uint16_t>(std::max(best, 0));
      picks.push_back(pick);
      taken[pick] += 1.0;
    }
  }
  return picks;
}

TEST(Blend, PicksWhatThePlainRulePicks) {
  std::vector<std::pair<std::string, std::vector<PlanPhase>>> cases = {
      {"equal weights (ties every step)", {{0, {0.25, 0.25, 0.25, 0.25}}}},
      {"one source", {{0, {1.0}}}},
      {"two sources 0.8/0.2", {{0, {0.8, 0.2}}}},
      {"thirds", {{0, {1.0 / 3, 1.0 / 3, 1.0 / 3}}}},
      {"a zero weight between", {{0, {0.5, 0.0, 0.25, 0.25}}}},
      {"1:2:...:8", {{0, {1 / 36.0, 2 / 36.0, 3 / 36.0, 4 / 36.0, 5 / 36.0, 6 / 36.0, 7 / 36.0,
                          8 / 36.0}}}},
      {"no weighted source, then a schedule", {{0, {0.0, 0.0}}, {7, {0.3, 0.7}}, {5000, {1.0, 0.0}}}},
  };
  for (uint64_t seed = 1; seed <= 6; ++seed) {
    const size_t n = 2 + seed * 3;
    std::vector<double> w = random_weights(n, seed);
    if (seed % 2 == 0) w[seed % n] = 0;  // normalization does not matter to the rule
    cases.push_back({"random weights over " + std::to_string(n) + " sources, seed " +
                         std::to_string(seed),
                     {{0, w}, {3001, random_weights(n, seed + 100)}}});
  }
  for (const auto& [name, phases] : cases) {
    const size_t sources = phases[0].weights.size();
    const BlendResult r = blend(phases, sources, 20000);
    const std::vector<uint16_t> expected = plain_blend(phases, sources, 20000);
    ASSERT_EQ(r.source.size(), expected.size()) << name;
    for (size_t i = 0; i < expected.size(); ++i) {
      ASSERT_EQ(r.source[i], expected[i]) << name << ": sample " << i;
    }
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

// A plan rewritten in place while a loader has it mapped: an error naming it, not SIGBUS.
TEST(Plan, TruncatedWhileMappedIsAnErrorNamingIt) {
  PlanDir dir;
  const MixtureConfig config = testing::two_source_mixture(dir, 400);
  testing::plan_or_fail(config, dir.file("mix.plan"));
  auto plan = Plan::open(dir.file("mix.plan"));
  ASSERT_TRUE(plan.ok());
  const std::span<const uint32_t> order = (*plan)->sequence_order(Split::kTrain, 0);
  ASSERT_FALSE(order.empty());
  ASSERT_EQ(::truncate(dir.file("mix.plan").c_str(), 0), 0);
  EXPECT_EXIT(
      {
        const volatile uint32_t first = order[0];
        (void)first;
      },
      ::testing::ExitedWithCode(1), "error: .*/mix\\.plan was truncated or changed while mapped");
}

TEST(Plan, RecordsTheMixtureAndRoundTrips) {
  PlanDir dir;
  MixtureConfig config = testing::two_source_mixture(dir, 300);
  config.schedule = {{100, {{"b", 1.0}}}};
  Result<PlannedMixture> written = plan_mixture(config, dir.file("mix.plan"));
  ASSERT_TRUE(written.ok()) << written.status().to_string();
  auto plan = Plan::open(dir.file("mix.plan"));
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ((*plan)->info(), written->info);
  // The writer reports the file as a reader sees it, without reading it back.
  EXPECT_EQ(written->file.hash, (*plan)->hash());
  EXPECT_EQ(written->file.bytes, (*plan)->file_size());
  EXPECT_EQ(written->file.bytes, std::filesystem::file_size(dir.file("mix.plan")));
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
  Result<PlannedMixture> r = plan_mixture(config, dir.file("mix.plan"));
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), HasSubstr("source 'b'"));
  EXPECT_FALSE(std::filesystem::exists(dir.file("mix.plan")));
}

// A sample count that would size the plan's tables past the machine is refused naming the key
// before anything is allocated (it once tried to allocate 2^62 samples' tables).
TEST(Plan, ASampleCountBeyondTheMachineIsRefusedNamingTheKey) {
  PlanDir dir;
  MixtureConfig config = testing::two_source_mixture(dir);
  config.total_samples = int64_t{1} << 62;
  config.validation.samples = 0;
  Result<PlannedMixture> r = plan_mixture(config, dir.file("mix.plan"));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(r.status().message(),
              HasSubstr("total_samples 4611686018427387904: the plan's sample table needs"));
  EXPECT_FALSE(std::filesystem::exists(dir.file("mix.plan")));
  config.total_samples = 0;
  config.total_tokens = std::numeric_limits<int64_t>::max();
  r = plan_mixture(config, dir.file("mix.plan"));
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), HasSubstr("total_tokens 9223372036854775807: the plan's"));
}

TEST(Plan, SourcesWithDifferentTokenizersAreRefused) {
  PlanDir dir;
  const MixtureConfig config = testing::two_source_mixture(dir);
  auto inputs = load_plan_inputs(config);
  ASSERT_TRUE(inputs.ok());
  (*inputs)[1].tokenizer_hash = "other";
  Result<PlannedMixture> r = build_plan(config, *inputs, dir.file("mix.plan"));
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), HasSubstr("different tokenizers"));
}

TEST(Plan, MissingDatasetIsNamed) {
  PlanDir dir;
  MixtureConfig config = testing::two_source_mixture(dir);
  config.sources[0].prefix = dir.file("nope");
  Result<PlannedMixture> r = plan_mixture(config, dir.file("mix.plan"));
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

// ---- numbers a plan file claims ----

// The arrays of an open plan, to write it again with some field changed.
std::array<PlanSplitArrays, 2> arrays_of(const Plan& plan) {
  std::array<PlanSplitArrays, 2> arrays;
  for (Split split : {Split::kTrain, Split::kValidation}) {
    PlanSplitArrays& a = arrays[static_cast<int>(split)];
    for (int64_t g = 0; g < plan.samples(split); ++g) {
      a.blend_source.push_back(static_cast<uint16_t>(plan.sample(split, g).source));
      a.blend_index.push_back(plan.sample(split, g).index);
    }
    for (uint32_t s = 0; s < plan.info().sources.size(); ++s) {
      const auto order = plan.sequence_order(split, s);
      const auto ends = plan.stream_end(split, s);
      a.sequence_order.emplace_back(order.begin(), order.end());
      a.stream_end.emplace_back(ends.begin(), ends.end());
    }
  }
  return arrays;
}

class ClaimedPlan : public ::testing::Test {
 protected:
  void SetUp() override {
    testing::plan_or_fail(testing::two_source_mixture(dir_), dir_.file("mix.plan"));
    auto plan = Plan::open(dir_.file("mix.plan"));
    ASSERT_TRUE(plan.ok()) << plan.status().to_string();
    info_ = (*plan)->info();
    arrays_ = arrays_of(**plan);
  }
  Result<std::shared_ptr<const Plan>> rewrite() {
    EXPECT_TRUE(write_plan_file(dir_.file("claimed.plan"), info_, arrays_).ok());
    return Plan::open(dir_.file("claimed.plan"));
  }
  PlanDir dir_;
  PlanInfo info_;
  std::array<PlanSplitArrays, 2> arrays_;
};

TEST_F(ClaimedPlan, RewrittenUnchangedOpens) { EXPECT_TRUE(rewrite().ok()); }

// The writer reports what a reader sees, and a disk that fails while a plan is written (an
// error, a full disk, a failing fsync, which the writer issues in stages too) fails the write
// naming the file and leaves neither the plan nor a temporary file behind.
TEST_F(ClaimedPlan, DiskFaultsLeaveNothingBehind) {
  const std::string path = dir_.file("faulty.plan");
  for (int fault = 0; fault < 4; ++fault) {
    io::FaultInjectingEnv env(io::default_env());
    if (fault == 0) env.fail_nth_write(2);
    if (fault == 1) env.enospc_after(3000);
    if (fault == 2) env.fail_file_sync(true);
    if (fault == 3) env.fail_rename(true);
    Result<PlanFileSummary> written = write_plan_file(env, path, info_, arrays_);
    ASSERT_FALSE(written.ok()) << "fault " << fault;
    EXPECT_THAT(written.status().message(), HasSubstr("faulty.plan")) << "fault " << fault;
    EXPECT_FALSE(std::filesystem::exists(path)) << "fault " << fault;
    for (const auto& entry : std::filesystem::directory_iterator(dir_.path())) {
      EXPECT_EQ(entry.path().string().find("faulty.plan"), std::string::npos)
          << "fault " << fault << " left " << entry.path();
    }
  }
  Result<PlanFileSummary> written = write_plan_file(path, info_, arrays_);
  ASSERT_TRUE(written.ok()) << written.status().to_string();
  auto plan = Plan::open(path);
  ASSERT_TRUE(plan.ok()) << plan.status().to_string();
  EXPECT_EQ(written->hash, (*plan)->hash());
  EXPECT_EQ(written->bytes, (*plan)->file_size());
}

// A loader sizes its buffers by seq_len: 2^40 is refused at open, naming the field.
TEST_F(ClaimedPlan, HugeSeqLenIsRefused) {
  info_.seq_len = int64_t{1} << 40;
  auto plan = rewrite();
  ASSERT_EQ(plan.status().code(), StatusCode::kCorruption) << plan.status().to_string();
  EXPECT_THAT(plan.status().message(), HasSubstr("claimed.plan"));
  EXPECT_THAT(plan.status().message(), HasSubstr("seq_len 1099511627776 is outside [1, 16777216]"));
}

TEST_F(ClaimedPlan, StreamLongerThanItsEpochsOfTokensIsRefused) {
  for (uint64_t& end : arrays_[0].stream_end[0]) end *= 2;
  auto plan = rewrite();
  ASSERT_EQ(plan.status().code(), StatusCode::kCorruption) << plan.status().to_string();
  EXPECT_THAT(plan.status().message(), HasSubstr("source 'a' train stream ends at token"));
}

// A stream whose entries do not span the dataset's real sequence lengths passes the file's own
// checks but is refused once the dataset is opened, naming the entry.
TEST_F(ClaimedPlan, StreamThatDoesNotMatchTheDatasetIsRefused) {
  arrays_[0].stream_end[1][0] += 1;
  auto plan = rewrite();
  ASSERT_TRUE(plan.ok()) << plan.status().to_string();
  auto reader = PlanSampleReader::open(*plan, Split::kTrain);
  ASSERT_EQ(reader.status().code(), StatusCode::kCorruption) << reader.status().to_string();
  EXPECT_THAT(reader.status().message(), HasSubstr("source 'b' train stream entry 0"));
  EXPECT_THAT(reader.status().message(), HasSubstr("does not describe this dataset"));
}

TEST(Mixture, SeqLenAboveTheBoundIsRefused) {
  auto config = parse_mixture("seq_len: 1099511627776\ntotal_samples: 1\nsources: [{name: a, prefix: a, weight: 1}]\n",
                              "mix.yaml");
  ASSERT_FALSE(config.ok());
  EXPECT_THAT(config.status().message(), HasSubstr("seq_len"));
}

}  // namespace
}  // namespace ms::data
