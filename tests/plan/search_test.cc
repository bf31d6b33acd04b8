// The layout search: only layouts the trainer accepts, the global batch fixed, the memory limit
// honoured, and what-if scaling moving step times the right way.
#include "plan/search.h"

#include <gtest/gtest.h>

#include "plan_fixtures.h"
#include "train/run_checks.h"

namespace ms::plan {
namespace {

using fixtures::small_model;
using fixtures::test_cluster;

// Sizes the planner's int64 arithmetic cannot hold are refused naming the keys; they once
// wrapped into a recommended layout of -6e10 GiB.
TEST(Search, AModelTooLargeToPlanIsRefusedNamingItsKeys) {
  config::RunConfig huge = small_model();
  huge.model.d_model = int64_t{1} << 40;
  huge.model.n_heads = 4;
  huge.model.n_kv_heads = 4;
  huge.model.d_ff = int64_t{1} << 42;
  for (const bool search : {true, false}) {
    Result<SearchResult> r = search_layouts(test_cluster(4, 1e6), huge, 4);
    Result<Prediction> p = predict_layout(test_cluster(4, 1e6), huge, Layout{}, 4, Scaling{});
    const Status status = search ? r.status() : p.status();
    ASSERT_FALSE(status.ok());
    EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(status.message().find("model.d_model 1099511627776"), std::string::npos)
        << status.message();
    EXPECT_NE(status.message().find("above the 9.01e+15 the planner sizes"), std::string::npos)
        << status.message();
  }
  config::RunConfig many = small_model();
  many.model.n_layers = 400000000;
  Result<SearchResult> r = search_layouts(test_cluster(4, 1e6), many, 4);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("model.n_layers 400000000"), std::string::npos)
      << r.status().message();
  EXPECT_NE(r.status().message().find("tensors"), std::string::npos) << r.status().message();
  EXPECT_TRUE(check_model_fits_planner(small_model()).ok());
}

TEST(Search, OffersOnlyLayoutsTheTrainerAccepts) {
  const config::RunConfig c = small_model();
  const std::vector<Layout> layouts = candidate_layouts(c, 4);
  ASSERT_FALSE(layouts.empty());
  bool saw_tp = false, saw_pp = false, saw_interleaved = false, saw_zb = false;
  for (const Layout& l : layouts) {
    const config::RunConfig applied = apply_layout(c, l);
    Result<int> dp = train::data_parallel_size(applied, 4);
    ASSERT_TRUE(dp.ok()) << layout_name(l) << ": " << dp.status().to_string();
    EXPECT_EQ(*dp, l.dp);
    // The global batch is fixed: dp x micro-batch x micro-batches per step.
    EXPECT_EQ(l.dp * l.micro_batch * l.micro_batches(c.train.global_batch), c.train.global_batch);
    saw_tp |= l.tp > 1;
    saw_pp |= l.pp > 1;
    saw_interleaved |= l.schedule == "interleaved";
    saw_zb |= l.schedule == "zero-bubble";
  }
  EXPECT_TRUE(saw_tp && saw_pp && saw_interleaved && saw_zb);
}

TEST(Search, ExpertParallelismOnlyForMoe) {
  config::RunConfig c = small_model();
  for (const Layout& l : candidate_layouts(c, 4)) EXPECT_EQ(l.ep, 1);
  c.model.moe.num_experts = 4;
  bool saw_ep = false;
  for (const Layout& l : candidate_layouts(c, 4)) saw_ep |= l.ep > 1;
  EXPECT_TRUE(saw_ep);
}

TEST(Search, RanksFastestFirstWithinTheMemoryLimit) {
  const Cluster cluster = test_cluster(4, 64);
  Result<SearchResult> r = search_layouts(cluster, small_model(), 4);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  ASSERT_GT(r->ranked.size(), 10u);
  for (size_t i = 1; i < r->ranked.size(); ++i)
    EXPECT_LE(r->ranked[i - 1].step_s, r->ranked[i].step_s);
  EXPECT_EQ(r->over_memory, 0);
}

TEST(Search, HonoursTheMemoryLimit) {
  const Cluster roomy = test_cluster(4, 64);
  Result<SearchResult> all = search_layouts(roomy, small_model(), 4);
  ASSERT_TRUE(all.ok());
  // A limit between the smallest and the largest peak excludes some layouts, keeps the rest.
  double lo = 1e30, hi = 0;
  for (const Prediction& p : all->ranked)
    lo = std::min(lo, p.peak.total_mib()), hi = std::max(hi, p.peak.total_mib());
  const double limit_gib = (lo + hi) / 2 / 1024;
  Result<SearchResult> tight = search_layouts(test_cluster(4, limit_gib), small_model(), 4);
  ASSERT_TRUE(tight.ok()) << tight.status().to_string();
  EXPECT_GT(tight->over_memory, 0);
  EXPECT_EQ(tight->ranked.size() + static_cast<size_t>(tight->over_memory), all->ranked.size());
  for (const Prediction& p : tight->ranked) EXPECT_LE(p.peak.total_mib(), limit_gib * 1024);
  Result<SearchResult> none = search_layouts(test_cluster(4, lo / 2 / 1024), small_model(), 4);
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.status().message().find("memory_per_rank_gib"), std::string::npos);
}

TEST(Search, WhatIfScalesStepTimesTheRightWay) {
  const Cluster cluster = test_cluster(4, 64);
  const config::RunConfig c = small_model();
  const Layout dp4{.dp = 4, .micro_batch = 4};
  Result<Prediction> base = predict_layout(cluster, c, dp4, 4);
  Result<Prediction> slow_net = predict_layout(cluster, c, dp4, 4, {.compute = 1, .net = 0.5});
  Result<Prediction> fast = predict_layout(cluster, c, dp4, 4, {.compute = 2, .net = 1});
  ASSERT_TRUE(base.ok() && slow_net.ok() && fast.ok());
  EXPECT_GT(slow_net->step_s, base->step_s);
  EXPECT_GT(slow_net->dp_exposed_s, base->dp_exposed_s * 1.9);
  EXPECT_LT(fast->step_s, base->step_s);
  EXPECT_NEAR(fast->compute_s, base->compute_s / 2, 1e-12);  // dp alone: no comm in the pipeline
  // Faster links never make the best layout slower.
  Result<SearchResult> b = search_layouts(cluster, c, 4);
  Result<SearchResult> n = search_layouts(cluster, c, 4, {.compute = 1, .net = 4});
  ASSERT_TRUE(b.ok() && n.ok());
  EXPECT_LE(n->ranked.front().step_s, b->ranked.front().step_s);
}

TEST(Search, MoreLinkTrafficOnSlowerLinks) {
  // tp over the inter-node link (tp 4 on nodes of 2) costs more than within a node.
  Cluster cluster = test_cluster(4, 64);
  const config::RunConfig c = small_model();
  const Layout tp4{.dp = 1, .tp = 4, .micro_batch = 4};
  Result<Prediction> within = predict_layout(cluster, c, tp4, 4);
  cluster.ranks_per_node = 2;
  Result<Prediction> across = predict_layout(cluster, c, tp4, 4);
  ASSERT_TRUE(within.ok() && across.ok());
  EXPECT_GT(within->tp.bytes, 0);
  EXPECT_DOUBLE_EQ(within->tp.bytes, across->tp.bytes);
  EXPECT_GT(across->tp.seconds, within->tp.seconds);
}

TEST(Search, ParsesWhatIf) {
  Result<Scaling> s = parse_what_if("net=0.5,compute=2");
  ASSERT_TRUE(s.ok());
  EXPECT_DOUBLE_EQ(s->net, 0.5);
  EXPECT_DOUBLE_EQ(s->compute, 2);
  EXPECT_FALSE(parse_what_if("net=0").ok());
  EXPECT_FALSE(parse_what_if("disk=2").ok());
  EXPECT_FALSE(parse_what_if("net").ok());
  EXPECT_NE(parse_what_if("net=fast").status().message().find("net=fast"), std::string::npos);
}

}  // namespace
}  // namespace ms::plan

namespace ms::plan {
namespace {

TEST(OpCosts, MeasuredShapesWinAndConcurrentTimesServeSeveralRanksPerNode) {
  Cluster c = test_cluster(4, 64);
  c.devices_per_node = 2;
  c.concurrency_efficiency = 0.5;
  const std::string key = gemm_key(64, 64, 64);
  c.device.measured[key] = 1e-3;
  const CostModel alone(c, 1);
  EXPECT_DOUBLE_EQ(alone.gemm_seconds(64, 64, 64), 1e-3);
  // Two ranks on the node, no concurrent measurement: the alone time at concurrency_efficiency.
  EXPECT_DOUBLE_EQ(CostModel(c, 2).gemm_seconds(64, 64, 64), 2e-3);
  // A concurrent measurement replaces that; four ranks on two devices share them on top.
  c.device.measured_concurrent[key] = 1.5e-3;
  EXPECT_DOUBLE_EQ(CostModel(c, 2).gemm_seconds(64, 64, 64), 1.5e-3);
  EXPECT_DOUBLE_EQ(CostModel(c, 4).gemm_seconds(64, 64, 64), 3e-3);
  // Collectives: intra-node links, or links.oversubscribed once a node has more ranks than
  // devices (where measured).
  const double bytes = 1 << 20;
  const double intra = CostModel(c, 2).comm_seconds(Collective::kAllReduce, bytes, 2, false);
  EXPECT_DOUBLE_EQ(CostModel(c, 4).comm_seconds(Collective::kAllReduce, bytes, 2, false), intra);
  c.oversubscribed = {c.intra_node.bandwidth_gbs / 2, c.intra_node.latency_us * 10};
  EXPECT_DOUBLE_EQ(CostModel(c, 2).comm_seconds(Collective::kAllReduce, bytes, 2, false), intra);
  const double over = CostModel(c, 4).comm_seconds(Collective::kAllReduce, bytes, 2, false);
  EXPECT_DOUBLE_EQ(over, collective_seconds(c.oversubscribed, Collective::kAllReduce, bytes, 2));
  EXPECT_GT(over, intra);
  EXPECT_DOUBLE_EQ(CostModel(c, 4).comm_seconds(Collective::kAllReduce, bytes, 2, true),
                   collective_seconds(c.inter_node, Collective::kAllReduce, bytes, 2));
  // A shape not measured comes from the curve: 2 m n k / (peak * efficiency).
  const double flops = 2.0 * 128 * 128 * 128;
  EXPECT_NEAR(alone.gemm_seconds(128, 128, 128), flops / alone.curve_rate(flops), 1e-15);
  EXPECT_NEAR(alone.curve_rate(1e12), 0.1e12 * 0.9 * 1000 / 1000.001, 1e3);
}

// The profile's per-element kernels (SwiGLU, AdamW) replace those kernels' memory traffic, by
// exactly their elements times the measured ns, and nothing else moves.
TEST(OpCosts, MeasuredElementwiseKernelsReplaceTheirMemoryTraffic) {
  const config::RunConfig c = small_model();  // 4 layers, d_ff 352, seq 128, batch 16
  Cluster traffic = test_cluster(1, 64);
  Cluster measured = traffic;
  measured.device.swiglu_forward_ns_per_element = 5;
  measured.device.swiglu_backward_ns_per_element = 7;
  measured.device.adamw_ns_per_element = 10;
  Layout l;
  l.micro_batch = 4;
  Result<Prediction> a = predict_layout(traffic, c, l, 1);
  Result<Prediction> b = predict_layout(measured, c, l, 1);
  ASSERT_TRUE(a.ok() && b.ok());
  const double bw = 10e9;                      // test_cluster's memory_bandwidth_gbs
  const double swiglu = 4.0 * 128 * 352;       // elements per layer and micro-batch
  const double calls = 4.0 * 4;                // layers x micro-batches
  EXPECT_NEAR(b->forward_s - a->forward_s, calls * swiglu * (5e-9 - 12.0 / bw), 1e-12);
  EXPECT_NEAR(b->backward_s - a->backward_s, calls * swiglu * (7e-9 - 24.0 / bw), 1e-12);
  // One rank, no ZeRO sharding: every element is updated; traffic 8 + 28 bytes per element.
  const double elements = a->optimizer_s * bw / 36.0;
  EXPECT_NEAR(b->optimizer_s, elements * (8.0 / bw + 10e-9), 1e-12);
  EXPECT_GT(b->step_s, a->step_s);
}

}  // namespace
}  // namespace ms::plan

namespace ms::plan {
namespace {

// A whole layer measured by the profile (layer_key) replaces the op sum of that layer at its own
// shape exactly, and scales a split layer's op sum (tp 2) by the same measured / op-sum ratio.
TEST(OpCosts, MeasuredLayersCalibrateTheOpSums) {
  const config::RunConfig c = small_model();  // 4 layers, micro-batch 4 of 128 tokens, batch 16
  auto with_layers = [](double fwd, double bwd) {
    Cluster cl = test_cluster(2, 64);
    cl.device.measured[layer_key(4, 128, false)] = fwd;
    cl.device.measured[layer_key(4, 128, true)] = bwd;
    return cl;
  };
  const double f = 2e-3, b = 5e-3;
  Layout dp1;
  dp1.micro_batch = 4;
  Result<Prediction> one = predict_layout(with_layers(f, b), c, dp1, 1);
  Result<Prediction> two = predict_layout(with_layers(2 * f, 2 * b), c, dp1, 1);
  ASSERT_TRUE(one.ok() && two.ok());
  const double calls = 4.0 * 4;  // layers x micro-batches
  EXPECT_NEAR(two->forward_s - one->forward_s, calls * f, 1e-12);
  EXPECT_NEAR(two->backward_s - one->backward_s, calls * b, 1e-12);
  // tp 2: each rank runs about half of every layer's ops, at the same measured ratio.
  Layout tp2 = dp1;
  tp2.tp = 2;
  Result<Prediction> tp_one = predict_layout(with_layers(f, b), c, tp2, 2);
  Result<Prediction> tp_two = predict_layout(with_layers(2 * f, 2 * b), c, tp2, 2);
  ASSERT_TRUE(tp_one.ok() && tp_two.ok());
  const double share = (tp_two->forward_s - tp_one->forward_s) / (calls * f);
  EXPECT_GT(share, 0.4);
  EXPECT_LT(share, 0.6);
}

}  // namespace
}  // namespace ms::plan
