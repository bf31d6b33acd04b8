// The RL config: algorithm defaults, overrides, and errors naming the key.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <string>
#include <utility>

#include "rl/rl_config.h"

namespace ms::rl {
namespace {

const std::string kBase =
    "run: {dir: /tmp/x}\nactor: {checkpoint: /tmp/ck}\nprompts: {train: p.jsonl}\n";

TEST(RlConfig, GrpoAndDapoDefaults) {
  Result<RlConfig> grpo = parse_rl_config(kBase, "rl.yaml");
  ASSERT_TRUE(grpo.ok()) << grpo.status().to_string();
  EXPECT_EQ(grpo->algorithm, Algorithm::kGrpo);
  EXPECT_EQ(grpo->loss_agg, LossAggregation::kSeqMeanTokenMean);
  EXPECT_EQ(grpo->clip.high, 0.2);
  EXPECT_FALSE(grpo->dynamic_sampling);
  EXPECT_EQ(grpo->overlong_cache_len, 0);

  Result<RlConfig> dapo =
      parse_rl_config(kBase + "algorithm: {name: dapo}\nrollout: {max_tokens: 40}\n", "rl.yaml");
  ASSERT_TRUE(dapo.ok()) << dapo.status().to_string();
  EXPECT_EQ(dapo->loss_agg, LossAggregation::kTokenMean);
  EXPECT_EQ(dapo->clip.low, 0.2);
  EXPECT_EQ(dapo->clip.high, 0.28);
  EXPECT_EQ(dapo->clip.dual, 3.0);
  EXPECT_TRUE(dapo->dynamic_sampling);
  EXPECT_EQ(dapo->overlong_cache_len, 10);

  Result<RlConfig> custom = parse_rl_config(
      kBase + "algorithm: {name: dapo, clip_high: 0.3, loss_agg: seq-mean-token-sum-norm, "
              "dynamic_sampling: false, overlong_cache_len: 0}\n",
      "rl.yaml");
  ASSERT_TRUE(custom.ok()) << custom.status().to_string();
  EXPECT_EQ(custom->clip.high, 0.3);
  EXPECT_EQ(custom->loss_agg, LossAggregation::kSeqMeanTokenSumNorm);
  EXPECT_FALSE(custom->dynamic_sampling);
  EXPECT_EQ(custom->overlong_cache_len, 0);
}

std::string error_of(const std::string& yaml) {
  Result<RlConfig> r = parse_rl_config(yaml, "rl.yaml");
  EXPECT_FALSE(r.ok()) << yaml;
  return r.ok() ? "" : r.status().message();
}

TEST(RlConfig, ParallelAndPlacement) {
  Result<RlConfig> plain = parse_rl_config(kBase, "rl.yaml");
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(plain->tp, 1);
  EXPECT_EQ(plain->rollout_ranks, 0);  // colocated
  Result<RlConfig> split = parse_rl_config(
      kBase + "parallel: {tp: 2}\nplacement: {mode: split, rollout_ranks: 3}\n", "rl.yaml");
  ASSERT_TRUE(split.ok()) << split.status().to_string();
  EXPECT_EQ(split->tp, 2);
  EXPECT_EQ(split->rollout_ranks, 3);
  Result<RlConfig> async_split = parse_rl_config(
      kBase + "parallel: {tp: 2}\nplacement: {mode: split, rollout_ranks: 1}\n"
              "rollout: {async_staleness: 2}\n", "rl.yaml");
  ASSERT_TRUE(async_split.ok()) << async_split.status().to_string();
  EXPECT_EQ(async_split->async_staleness, 2);
  const std::pair<std::string, std::string> refused[] = {
      {"parallel: {tp: 0}\n", "parallel.tp must be at least 1"},
      {"parallel: {tp: 2}\nrollout: {async_staleness: 1}\n",
       "parallel.tp 2 with rollout.async_staleness 1"},
      {"placement: {mode: split}\n", "needs placement.rollout_ranks of at least 1"},
      {"placement: {rollout_ranks: 1}\n", "placement.rollout_ranks applies to placement.mode split"},
      {"placement: {mode: apart}\n", "placement.mode must be colocated or split, got 'apart'"},
  };
  for (const auto& [yaml, message] : refused) {
    EXPECT_NE(error_of(kBase + yaml).find(message), std::string::npos)
        << yaml << " gave: " << error_of(kBase + yaml);
  }
}

TEST(RlConfig, PpoAndVapoDefaults) {
  Result<RlConfig> ppo = parse_rl_config(kBase + "algorithm: {name: ppo}\n", "rl.yaml");
  ASSERT_TRUE(ppo.ok()) << ppo.status().to_string();
  EXPECT_TRUE(has_critic(ppo->algorithm));
  EXPECT_EQ(ppo->loss_agg, LossAggregation::kTokenMean);
  EXPECT_EQ(ppo->clip.high, 0.2);
  EXPECT_EQ(ppo->gamma, 1.0);
  EXPECT_EQ(ppo->lambda, 1.0);
  EXPECT_EQ(ppo->positive_nll_coef, 0.0);
  EXPECT_EQ(ppo->critic_warmup_steps, 0);
  EXPECT_EQ(ppo->value_clip, 0.5);
  EXPECT_EQ(ppo->critic_lr, 2.0 * ppo->optimizer.lr);  // twice the actor's by default
  EXPECT_FALSE(ppo->dynamic_sampling);

  Result<RlConfig> vapo = parse_rl_config(
      kBase + "algorithm: {name: vapo}\ntrain: {steps: 60}\nrollout: {group_size: 1}\n",
      "rl.yaml");
  ASSERT_TRUE(vapo.ok()) << vapo.status().to_string();
  EXPECT_EQ(vapo->algorithm, Algorithm::kVapo);
  EXPECT_EQ(vapo->loss_agg, LossAggregation::kTokenMean);
  EXPECT_EQ(vapo->clip.high, 0.28);
  EXPECT_EQ(vapo->lambda_alpha, 0.05);
  EXPECT_EQ(vapo->positive_nll_coef, 0.1);
  EXPECT_EQ(vapo->critic_warmup_steps, 50);
  EXPECT_TRUE(std::isinf(vapo->critic_warmup_until_ev));  // no early end
  EXPECT_EQ(vapo->group_size, 1);  // a value model needs no group

  Result<RlConfig> custom = parse_rl_config(
      kBase + "algorithm: {name: vapo, lambda_alpha: 0.1, positive_nll_coef: 0}\n"
              "critic: {lr: 3e-6, value_clip: 0.2, warmup_steps: 2,\n"
              "         warmup_until_explained_variance: 0.6}\n",
      "rl.yaml");
  ASSERT_TRUE(custom.ok()) << custom.status().to_string();
  EXPECT_EQ(custom->critic_lr, 3e-6);
  EXPECT_EQ(custom->value_clip, 0.2);
  EXPECT_EQ(custom->critic_warmup_steps, 2);
  EXPECT_EQ(custom->critic_warmup_until_ev, 0.6);
  EXPECT_NE(error_of(kBase + "algorithm: {name: ppo}\n"
                             "critic: {warmup_until_explained_variance: 1.5}\n")
                .find("critic.warmup_until_explained_variance must be at most 1"),
            std::string::npos);
  EXPECT_EQ(custom->positive_nll_coef, 0.0);

  // VAPO's 50 value pretraining steps leave nothing for the actor in the default 10 steps.
  EXPECT_NE(error_of(kBase + "algorithm: {name: vapo}\n").find("critic.warmup_steps (50)"),
            std::string::npos);
  EXPECT_NE(error_of(kBase + "critic: {lr: 1e-6}\n").find("applies to ppo and vapo"),
            std::string::npos);
  EXPECT_NE(error_of(kBase + "algorithm: {name: ppo}\ncritic: {value_clip: 0}\n")
                .find("critic.value_clip"),
            std::string::npos);
  EXPECT_NE(error_of(kBase + "algorithm: {name: ppo, lambda: 1.5}\n").find("algorithm.lambda"),
            std::string::npos);
  EXPECT_NE(error_of(kBase + "algorithm: {name: ppo, dynamic_sampling: true}\n"
                          "rollout: {group_size: 1}\n")
                .find("dynamic_sampling"),
            std::string::npos);
}

TEST(RlConfig, ErrorsNameTheKey) {
  EXPECT_NE(error_of(kBase + "rollout: {group_sise: 4}\n").find("unknown key 'rollout.group_sise'"),
            std::string::npos);
  EXPECT_NE(error_of(kBase + "rolout: {}\n").find("unknown section 'rolout'"), std::string::npos);
  EXPECT_NE(error_of(kBase + "rollout: {group_size: many}\n").find("rollout.group_size"),
            std::string::npos);
  EXPECT_NE(error_of(kBase + "rollout: {group_size: 1}\n").find("rollout.group_size"),
            std::string::npos);
  EXPECT_NE(error_of(kBase + "algorithm: {name: reinforce}\n").find("algorithm.name"),
            std::string::npos);
  EXPECT_NE(error_of(kBase + "algorithm: {dual_clip: 0.5}\n").find("algorithm.dual_clip"),
            std::string::npos);
  EXPECT_NE(error_of(kBase + "algorithm: {loss_agg: mean}\n").find("algorithm.loss_agg"),
            std::string::npos);
  EXPECT_NE(error_of(kBase + "reward: {builtin: magic}\n").find("reward.builtin"), std::string::npos);
  EXPECT_NE(error_of("run: {dir: /tmp/x}\nprompts: {train: p}\n").find("actor.checkpoint"),
            std::string::npos);
  EXPECT_NE(error_of(kBase + "train: {mini_batches: 9}\n").find("train.mini_batches"),
            std::string::npos);
  EXPECT_NE(error_of(kBase + "rollout: {max_tokens: 8}\nalgorithm: {overlong_cache_len: 9}\n")
                .find("algorithm.overlong_cache_len"),
            std::string::npos);
  EXPECT_NE(error_of(kBase + "checkpoint: {resume: latest}\n").find("checkpoint.resume"),
            std::string::npos);
  EXPECT_NE(error_of(kBase + "checkpoint: {every: -1}\n").find("checkpoint.every"),
            std::string::npos);
  EXPECT_NE(error_of(kBase + "checkpoint: {keep: -2}\n").find("checkpoint.keep"),
            std::string::npos);
  EXPECT_NE(error_of(kBase + "rollout: {speculative_tokens: -1}\n").find("rollout.speculative_tokens"),
            std::string::npos);
  EXPECT_NE(error_of(kBase + "rollout: {async_staleness: -2}\n").find("rollout.async_staleness"),
            std::string::npos);
}

TEST(RlConfig, FapoKeys) {
  Result<RlConfig> plain = parse_rl_config(kBase, "rl.yaml");
  ASSERT_TRUE(plain.ok());
  EXPECT_TRUE(plain->step_checker.empty());
  EXPECT_EQ(plain->flawed_penalty, 1.0);  // verl's recipe/fapo default
  Result<RlConfig> fapo = parse_rl_config(
      kBase + "reward: {step_checker: ./check_steps.py, flawed_penalty: 0.5}\n", "rl.yaml");
  ASSERT_TRUE(fapo.ok()) << fapo.status().to_string();
  EXPECT_EQ(fapo->step_checker, "./check_steps.py");
  EXPECT_EQ(fapo->flawed_penalty, 0.5);
  EXPECT_NE(error_of(kBase + "reward: {flawed_penalty: -1}\n").find("reward.flawed_penalty"),
            std::string::npos);
}

TEST(RlConfig, CheckpointKeys) {
  Result<RlConfig> plain = parse_rl_config(kBase, "rl.yaml");
  ASSERT_TRUE(plain.ok()) << plain.status().to_string();
  EXPECT_EQ(plain->checkpoint_every, 0);
  EXPECT_EQ(plain->resume, "auto");
  Result<RlConfig> set =
      parse_rl_config(kBase + "checkpoint: {every: 5, keep: 2, resume: none}\n", "rl.yaml");
  ASSERT_TRUE(set.ok()) << set.status().to_string();
  EXPECT_EQ(set->checkpoint_every, 5);
  EXPECT_EQ(set->checkpoint_keep, 2);
  EXPECT_EQ(set->resume, "none");
}

TEST(RlConfig, LearningRateSchedule) {
  Result<RlConfig> plain = parse_rl_config(kBase, "rl.yaml");
  ASSERT_TRUE(plain.ok()) << plain.status().to_string();
  EXPECT_EQ(plain->optimizer.schedule, config::LrSchedule::kConstant);
  EXPECT_EQ(plain->optimizer.warmup_steps, 0);
  Result<RlConfig> cosine = parse_rl_config(
      kBase + "optimizer: {lr: 1.0e-4, schedule: cosine, warmup_steps: 3, min_lr: 1.0e-6}\n",
      "rl.yaml");
  ASSERT_TRUE(cosine.ok()) << cosine.status().to_string();
  EXPECT_EQ(cosine->optimizer.schedule, config::LrSchedule::kCosine);
  EXPECT_EQ(cosine->optimizer.warmup_steps, 3);
  EXPECT_EQ(cosine->optimizer.min_lr, 1.0e-6);
  EXPECT_NE(error_of(kBase + "optimizer: {schedule: step}\n").find("optimizer.schedule"),
            std::string::npos);
}

TEST(RlConfig, BundledConfigLoads) {
  const char* root = std::getenv("MS_SOURCE_DIR");
  Result<RlConfig> r = load_rl_config(std::string(root ? root : MS_RL_TEST_SOURCE_DIR) +
                                      "/configs/rl-arithmetic.yaml");
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->checkpoint, "runs/tiny/checkpoints");
  EXPECT_EQ(r->stop, std::vector<std::string>{"."});
  EXPECT_EQ(r->reward_builtin, "exact_number");
}

}  // namespace
}  // namespace ms::rl
