// `ms-infer plan`: how to serve a MoE model disaggregated on N ranks. Measures the model's own
// per-layer attention and expert costs on this machine (and, under mpirun, the link between
// ranks 0 and 1), then searches attention/expert rank splits, micro-batch counts and sizes for
// the highest decode throughput whose time per output token meets --tpot-ms, beside the best
// colocated deployment on the same ranks (infer/plan.h).
#include "infer/plan.h"

#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "cmd/common/mpi_world.h"
#include "cmd/common/registry.h"
#include "comm/agree.h"
#include "core/host_metrics.h"
#include "infer/model_loader.h"

namespace ms::infer_cmd {
namespace {

struct PlanArgs {
  std::string model, checkpoint;
  int ranks = 0;
  double tpot_ms = 100;
  int64_t context = -1;  // -1: half the model's context
  std::vector<int64_t> sizes = {1, 2, 4, 8, 16, 32, 64};
  int max_micro = 8;
  double link_latency_us = -1, link_gbps = -1;
  int repeats = 3;
  int top = 10;
};

std::vector<int64_t> expert_row_counts(const std::vector<int64_t>& sizes,
                                       const config::ModelConfig& c, int ranks) {
  // Rows per expert reach (attention ranks * micro-batch * top_k / experts); cover that range.
  const int64_t most = std::max<int64_t>(1, ranks * sizes.back() * c.moe.top_k);
  std::vector<int64_t> rows;
  for (int64_t n = 1; n < most; n *= 4) rows.push_back(n);
  rows.push_back(most);
  return rows;
}

void print_costs(const infer::ServingCosts& c) {
  std::printf("measured per layer at context %lld (model code on this process, best of runs):\n",
              static_cast<long long>(c.context));
  std::printf("  attention side, b decode tokens:");
  for (size_t i = 0; i < c.attention.at.size(); ++i) {
    std::printf(" b=%g %.3f ms;", c.attention.at[i], c.attention.seconds[i] * 1e3);
  }
  std::printf("\n  one expert, n rows:");
  for (size_t i = 0; i < c.expert.at.size(); ++i) {
    std::printf(" n=%g %.3f ms;", c.expert.at[i], c.expert.seconds[i] * 1e3);
  }
  std::printf("\n  per step (embedding, final norm, lm_head, sampling), b tokens:");
  for (size_t i = 0; i < c.head.at.size(); ++i) {
    std::printf(" b=%g %.3f ms;", c.head.at[i], c.head.seconds[i] * 1e3);
  }
  std::printf("\n  link: %.1f us + %.2f GB/s (%s)\n", c.link_latency_s * 1e6,
              c.link_bytes_per_s / 1e9, c.link_source.c_str());
}

void print_rows(const std::vector<infer::PlanRow>& rows, int top) {
  std::printf(
      "| attn | expert | m | micro-batch | seqs/attn rank | Ta ms | Te ms | Tc ms | m needed | "
      "TPOT ms | tokens/s |\n");
  std::printf(
      "|------|--------|---|-------------|----------------|-------|-------|-------|----------|"
      "---------|----------|\n");
  for (size_t i = 0; i < rows.size() && static_cast<int>(i) < top; ++i) {
    const infer::PlanRow& r = rows[i];
    std::printf("| %4d | %6d | %d | %11lld | %14lld | %5.3f | %5.3f | %5.3f | %8.2f | %7.2f | %8.1f |\n",
                r.attention, r.experts, r.micro_batches, static_cast<long long>(r.micro_batch),
                static_cast<long long>(r.micro_batch * r.micro_batches), r.ta * 1e3, r.te * 1e3,
                r.tc * 1e3, r.m_needed, r.tpot_s * 1e3, r.tokens_per_s);
  }
}

// The best colocated deployment (every rank the whole model) within the same target.
void print_colocated(const infer::ServingCosts& c, const PlanArgs& a, int ranks,
                     const infer::PlanRow* best) {
  infer::PlanRow colocated;
  for (int64_t b : a.sizes) {
    for (int m = 1; m <= a.max_micro; ++m) {
      const infer::PlanRow r = infer::colocated_plan(c, ranks, b * m);
      if (r.tpot_s <= a.tpot_ms / 1e3 && r.tokens_per_s > colocated.tokens_per_s) colocated = r;
    }
  }
  if (colocated.tokens_per_s == 0) {
    std::printf("colocated: no batch size meets the target\n");
    return;
  }
  std::printf("colocated on %d ranks: batch %lld per rank, TPOT %.2f ms, %.1f tokens/s",
              ranks, static_cast<long long>(colocated.micro_batch), colocated.tpot_s * 1e3,
              colocated.tokens_per_s);
  if (best != nullptr) {
    std::printf("; disaggregated plan / colocated: %.2fx", best->tokens_per_s /
                                                              colocated.tokens_per_s);
  }
  std::printf("\n");
}

Status plan_on_rank0(const PlanArgs& a, infer::LoadedModel& m, infer::ServingCosts costs,
                     int ranks) {
  const config::ModelConfig& c = m.model->config();
  const int64_t context = a.context >= 0 ? a.context : c.max_seq_len / 2;
  // The measurements run the model at the largest sizes the flags give: the decode micro-batch
  // with its key/value context, and the expert rows of all attention ranks' micro-batches. They
  // are checked against the machine before anything is sized by them.
  const double largest = static_cast<double>(*std::max_element(a.sizes.begin(), a.sizes.end()));
  const double head_dim = static_cast<double>(c.d_model / c.n_heads);
  MS_RETURN_IF_ERROR(check_memory_need(
      largest * static_cast<double>(context) * 2 * static_cast<double>(c.n_kv_heads) * head_dim *
          sizeof(float),
      "--micro-batch-sizes " + std::to_string(static_cast<int64_t>(largest)) + " x --context " +
          std::to_string(context) + " (the attention measurement's keys and values)"));
  MS_RETURN_IF_ERROR(
      check_memory_need(static_cast<double>(ranks) * largest * static_cast<double>(c.moe.top_k) *
                            static_cast<double>(c.d_model + 3 * c.d_ff) * sizeof(float),
                        "--ranks " + std::to_string(ranks) + " x --micro-batch-sizes " +
                            std::to_string(static_cast<int64_t>(largest)) + " x model.moe.top_k " +
                            std::to_string(c.moe.top_k) + " (the expert measurement's rows)"));
  MS_ASSIGN_OR_RETURN(infer::ServingCosts measured,
                      infer::measure_serving_costs(*m.model, context, a.sizes,
                                                   expert_row_counts(a.sizes, c, ranks),
                                                   a.repeats));
  measured.link_latency_s = costs.link_latency_s;
  measured.link_bytes_per_s = costs.link_bytes_per_s;
  measured.link_source = costs.link_source;
  print_costs(measured);
  const std::vector<infer::PlanRow> rows =
      infer::search_plans(measured, ranks, a.tpot_ms / 1e3, a.max_micro, a.sizes);
  std::printf("\nplans for %d ranks with time per output token <= %.1f ms, best first:\n", ranks,
              a.tpot_ms);
  if (rows.empty()) {
    std::printf("none: no split meets the target; raise --tpot-ms or add ranks\n");
  } else {
    print_rows(rows, a.top);
    const infer::PlanRow& b = rows.front();
    std::printf(
        "\nbest: %d attention + %d expert ranks, %d micro-batches of %lld tokens "
        "(m >= %.2f keeps both sides busy), TPOT %.2f ms, %.1f tokens/s\n",
        b.attention, b.experts, b.micro_batches, static_cast<long long>(b.micro_batch),
        b.m_needed, b.tpot_s * 1e3, b.tokens_per_s);
    std::printf("  ms-infer bench/generate: mpirun -np %d ... --attention-ranks %d --micro-batches %d "
                "--max-batch %lld\n",
                ranks, b.attention, b.micro_batches,
                static_cast<long long>(b.micro_batch * b.micro_batches));
  }
  print_colocated(measured, a, ranks, rows.empty() ? nullptr : &rows.front());
  return Status::OK();
}

Result<int> plan_in_world(const PlanArgs& a, comm::Communicator& world) {
  infer::ServingCosts link;
  if (a.link_latency_us >= 0 && a.link_gbps > 0) {
    link.link_latency_s = a.link_latency_us * 1e-6;
    link.link_bytes_per_s = a.link_gbps * 1e9;
    link.link_source = "given";
  } else if (world.size() >= 2) {
    MS_RETURN_IF_ERROR(infer::measure_link(world, link));
  } else {
    link.link_source = "assumed; run under mpirun to measure, or give --link-latency-us and --link-gbps";
  }
  const int ranks = a.ranks > 0 ? a.ranks : std::max(world.size(), 2);
  Status planned = Status::OK();
  if (world.rank() == 0) {
    Result<infer::LoadedModel> m = infer::load_model(a.model, a.checkpoint);
    planned = m.ok() ? plan_on_rank0(a, *m, link, ranks) : m.status();
  }
  // The other ranks only wait; rank 0's failure becomes theirs.
  MS_RETURN_IF_ERROR(comm::agree(world, planned, "planning"));
  return 0;
}

Result<int> run_plan(PlanArgs a) {
  std::sort(a.sizes.begin(), a.sizes.end());
  a.sizes.erase(std::unique(a.sizes.begin(), a.sizes.end()), a.sizes.end());
  if (a.tpot_ms <= 0 || a.max_micro < 1 || a.sizes.empty() || a.sizes.front() < 1 ||
      a.repeats < 1) {
    return InvalidArgument(
        "--tpot-ms must be positive, --max-micro-batches and --repeats at least 1, "
        "--micro-batch-sizes positive");
  }
  return cli::run_in_world(
      [&](comm::MpiCommunicator& world) { return plan_in_world(a, world); });
}

void add_plan_command(cli::Tool& tool) {
  auto a = std::make_shared<PlanArgs>();
  CLI::App* sub = tool.add_subcommand(
      "plan",
      "Choose attention/expert ranks and micro-batches for disaggregated MoE serving from "
      "measured costs",
      [a] { return run_plan(*a); });
  sub->add_option("--model", a->model, "Hugging Face model directory");
  sub->add_option("--checkpoint", a->checkpoint, "Training checkpoint");
  // Counts that size loops and tables are bounded before use (checked again against memory
  // where they size measurements).
  sub->add_option("--ranks", a->ranks, "Ranks to plan for (default: the mpirun size, at least 2)")
      ->check(CLI::Range(0, 1 << 20));
  sub->add_option("--tpot-ms", a->tpot_ms, "Target time per output token (ms)")
      ->capture_default_str();
  sub->add_option("--context", a->context,
                  "KV positions each decode token attends over (default: half the model's "
                  "context)");
  sub->add_option("--micro-batch-sizes", a->sizes,
                  "Decode tokens per micro-batch to measure and consider")
      ->delimiter(',');
  sub->add_option("--max-micro-batches", a->max_micro, "Largest micro-batch count considered")
      ->capture_default_str()
      ->check(CLI::Range(1, 1024));
  sub->add_option("--link-latency-us", a->link_latency_us,
                  "Point-to-point latency instead of measuring it (with --link-gbps)");
  sub->add_option("--link-gbps", a->link_gbps, "Point-to-point bandwidth in GB/s");
  sub->add_option("--repeats", a->repeats, "Timing runs per measurement (best kept)")
      ->capture_default_str();
  sub->add_option("--top", a->top, "Plans to print")->capture_default_str();
}

}  // namespace

MS_CLI_COMMAND(plan, add_plan_command);

}  // namespace ms::infer_cmd
