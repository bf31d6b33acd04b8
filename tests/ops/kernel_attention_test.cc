// The attention kernels (kernels/attention.cuh, kernels/paged_attention.cuh) against their CPU
// twins in lib/ops on the same seeded inputs: grouped-query heads, sliding windows, document ids
// of both widths, cp-style blocks given by global indices (two contiguous runs, queries that see
// no key of the block), Tq != Tk, lengths that are not a multiple of the 32-token tile, and head
// dims 1 to 256. Outputs sit between sentinel guard bands; accumulating outputs start from
// non-zero values; every kernel runs twice and must repeat its bits (issue 42's determinism).
//
// Tolerance: |gpu - cpu| <= 1e-5 (1 + |cpu|) per element (issue 42's f32 parity). Both sides
// compute in f32 with the same formulas (queries prescaled by 1/sqrt(head_dim), online
// softmax, exp of score - lse); they differ only in the order of the f32 sums (tiles, sgemm
// blocking, shuffle trees), which moves results by a few ulp of the summed magnitudes (< 1e-6
// here). -inf (rows that see nothing) and the cache store must match exactly.
//
// Argument-check tests run on every machine; the rest skip without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <ostream>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "kernels/attention.cuh"
#include "kernels/device.h"
#include "kernels/paged_attention.cuh"
#include "ops/attention.h"
#include "ops/paged_attention.h"
#include "tests/ops/device_buffers.h"
#include "tests/ops/guarded.h"

namespace ms::kernels {
namespace {

using Rng = std::mt19937_64;
using test::succeeded;
constexpr double kTolerance = 1e-5;

class AttentionKernelTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const Result<int> count = device_count();
    if (!count.ok()) GTEST_SKIP() << "no CUDA device: " << count.status().message();
  }
};

template <typename T>
DeviceBuffer upload(const std::vector<T>& values) {
  return test::upload(values.data(), values.size());
}

// A device output with guard bands: starts as `initial` (bands included), read back whole.
class DeviceOutput {
 public:
  explicit DeviceOutput(const std::vector<float>& initial) : host_(initial) {
    Result<DeviceBuffer> buffer = DeviceBuffer::allocate(host_.storage_bytes());
    if (!succeeded(buffer.status())) return;
    buffer_ = std::move(buffer).value();
    succeeded(copy_to_device(buffer_.data(), host_.storage(), host_.storage_bytes()));
  }
  float* data() { return buffer_.as<float>() + test::kGuardElements; }
  // The device contents, guard bands included, after the work on the default stream.
  const test::Guarded<float>& fetch() {
    succeeded(synchronize(nullptr));
    succeeded(copy_to_host(host_.storage(), buffer_.data(), host_.storage_bytes()));
    return host_;
  }

 private:
  test::Guarded<float> host_;
  DeviceBuffer buffer_;
};

// Worst |got - want| / (1 + |want|); infinite when non-finite values differ.
double worst_error(const test::Guarded<float>& got, const std::vector<float>& want) {
  double worst = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const double g = got[i], w = want[i];
    if (g == w) continue;
    if (!std::isfinite(g) || !std::isfinite(w)) return INFINITY;
    worst = std::max(worst, std::fabs(g - w) / (1 + std::fabs(w)));
  }
  return worst;
}

bool same_bits(const test::Guarded<float>& a, const test::Guarded<float>& b) {
  return std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// Checks one output of a twin comparison: guard bands, tolerance, and the bits of a rerun.
void expect_output(const std::string& what, const test::Guarded<float>& first,
                   const test::Guarded<float>& second, const std::vector<float>& want) {
  EXPECT_TRUE(first.guards_intact()) << what << " wrote outside its output";
  EXPECT_LE(worst_error(first, want), kTolerance) << what;
  EXPECT_TRUE(same_bits(first, second)) << what << " differs between two identical runs";
}

// ---- Block attention ----

// Where queries and keys sit in the packed sequence. kSelf: indices 0..T-1 (null index
// arrays). kCpQueryRuns: queries are cp chunks 0 and 3 (two runs), keys chunks 1 and 2, so the
// chunk-0 queries see none of these keys. kCpKeyRuns: queries chunks 1 and 2, keys 0 and 3.
enum class Placement { kSelf, kCpQueryRuns, kCpKeyRuns };
enum class Docs { kNone, kI32, kI64 };

struct AttentionCase {
  const char* name;
  int64_t batch, tq, tk, heads, kv_heads, head_dim, window;
  Placement placement;
  Docs docs;
};

const AttentionCase kAttentionCases[] = {
    {"causal_gqa_hd64", 2, 77, 77, 4, 2, 64, 0, Placement::kSelf, Docs::kNone},
    {"window_hd16", 1, 100, 100, 4, 2, 16, 13, Placement::kSelf, Docs::kNone},
    {"docs_i32_hd128", 2, 70, 70, 4, 2, 128, 0, Placement::kSelf, Docs::kI32},
    {"docs_i64_window_hd64", 2, 90, 90, 2, 1, 64, 20, Placement::kSelf, Docs::kI64},
    {"cp_query_runs_docs_hd64", 2, 48, 40, 4, 2, 64, 0, Placement::kCpQueryRuns, Docs::kI64},
    {"cp_key_runs_window_hd16", 1, 45, 66, 4, 2, 16, 9, Placement::kCpKeyRuns, Docs::kI32},
    {"tq_ne_tk_hd40", 2, 37, 70, 4, 4, 40, 0, Placement::kSelf, Docs::kNone},
    {"tq_gt_tk_hd128", 1, 65, 33, 4, 1, 128, 0, Placement::kSelf, Docs::kNone},
    {"long_window_docs_hd128", 1, 300, 300, 4, 1, 128, 40, Placement::kSelf, Docs::kI32},
    {"head_dim_256", 1, 45, 45, 2, 1, 256, 0, Placement::kSelf, Docs::kNone},
    {"single_token_hd1", 3, 1, 1, 1, 1, 1, 0, Placement::kSelf, Docs::kNone},
};

// Global indices of `n` tokens made of runs [start, start + length).
std::vector<int64_t> runs(std::initializer_list<std::pair<int64_t, int64_t>> parts) {
  std::vector<int64_t> out;
  for (const auto& [start, length] : parts) {
    for (int64_t i = 0; i < length; ++i) out.push_back(start + i);
  }
  return out;
}

void PrintTo(const AttentionCase& c, std::ostream* os) { *os << c.name; }

// A problem's host data: inputs, mask arrays (empty when absent) and the shape.
struct HostAttention {
  ops::AttentionShape shape;
  std::vector<float> q, k, v, dout;
  std::vector<int64_t> q_index, k_index;
  std::vector<int64_t> q_doc, k_doc;  // widened; narrowed to int32 for Docs::kI32
  std::vector<int32_t> q_doc32, k_doc32;
  Docs docs = Docs::kNone;

  explicit HostAttention(const AttentionCase& c, uint64_t seed) : docs(c.docs) {
    shape.batch = c.batch;
    shape.seq = c.tq;
    shape.kv_seq = c.tk;
    shape.heads = c.heads;
    shape.kv_heads = c.kv_heads;
    shape.head_dim = c.head_dim;
    shape.window = c.window;
    shape.block = 16;  // the CPU's tile; the kernels tile by 32
    Rng rng(seed);
    q = test::random_floats(size_t(c.batch * c.tq * c.heads * c.head_dim), rng, -1, 1);
    k = test::random_floats(size_t(c.batch * c.tk * c.kv_heads * c.head_dim), rng, -1, 1);
    v = test::random_floats(k.size(), rng, -1, 1);
    dout = test::random_floats(q.size(), rng, -1, 1);
    std::vector<int64_t> q_pos = runs({{0, c.tq}}), k_pos = runs({{0, c.tk}});
    const int64_t qa = c.tq / 2, ka = c.tk / 2;
    if (c.placement == Placement::kCpQueryRuns) {
      q_pos = runs({{0, qa}, {qa + c.tk, c.tq - qa}});
      k_pos = runs({{qa, c.tk}});
    } else if (c.placement == Placement::kCpKeyRuns) {
      k_pos = runs({{0, ka}, {ka + c.tq, c.tk - ka}});
      q_pos = runs({{ka, c.tq}});
    }
    for (int64_t b = 0; b < c.batch; ++b) {
      if (c.placement != Placement::kSelf) {
        q_index.insert(q_index.end(), q_pos.begin(), q_pos.end());
        k_index.insert(k_index.end(), k_pos.begin(), k_pos.end());
      }
      if (c.docs == Docs::kNone) continue;
      // Documents of 1..60 tokens over the row's global positions, different per row: longer
      // than the windows, so that both masks bind.
      const int64_t span = c.tq + c.tk;
      std::vector<int64_t> doc_of(static_cast<size_t>(span));
      std::uniform_int_distribution<int64_t> length(1, 60);
      for (int64_t pos = 0, id = 0; pos < span; ++id) {
        for (int64_t end = std::min(span, pos + length(rng)); pos < end; ++pos) doc_of[pos] = id;
      }
      for (int64_t p : q_pos) q_doc.push_back(doc_of[size_t(p)]);
      for (int64_t p : k_pos) k_doc.push_back(doc_of[size_t(p)]);
    }
    q_doc32.assign(q_doc.begin(), q_doc.end());
    k_doc32.assign(k_doc.begin(), k_doc.end());
  }

  // The mask over the host arrays.
  ops::AttentionMask mask() const {
    return mask_over(q_index.data(), k_index.data(), q_doc32.data(), k_doc32.data(), q_doc.data(),
                     k_doc.data());
  }
  // The mask over arrays laid out as this problem's (host or device copies).
  ops::AttentionMask mask_over(const int64_t* qi, const int64_t* ki, const int32_t* qd32,
                               const int32_t* kd32, const int64_t* qd64,
                               const int64_t* kd64) const {
    ops::AttentionMask m;
    if (!q_index.empty()) m.q_index = qi, m.k_index = ki;
    if (docs == Docs::kI32) m.q_doc.i32 = qd32, m.k_doc.i32 = kd32;
    if (docs == Docs::kI64) m.q_doc.i64 = qd64, m.k_doc.i64 = kd64;
    return m;
  }
};

// The problem's device inputs and mask arrays.
struct DeviceAttention {
  DeviceBuffer q, k, v, dout, q_index, k_index, q_doc32, k_doc32, q_doc, k_doc;
  ops::AttentionMask mask;
  explicit DeviceAttention(const HostAttention& h)
      : q(upload(h.q)),
        k(upload(h.k)),
        v(upload(h.v)),
        dout(upload(h.dout)),
        q_index(upload(h.q_index)),
        k_index(upload(h.k_index)),
        q_doc32(upload(h.q_doc32)),
        k_doc32(upload(h.k_doc32)),
        q_doc(upload(h.q_doc)),
        k_doc(upload(h.k_doc)),
        mask(h.mask_over(q_index.as<int64_t>(), k_index.as<int64_t>(), q_doc32.as<int32_t>(),
                         k_doc32.as<int32_t>(), q_doc.as<int64_t>(), k_doc.as<int64_t>())) {}
};

size_t lse_size(const ops::AttentionShape& s) { return size_t(s.batch * s.heads * s.seq); }

class AttentionTwinTest : public AttentionKernelTest,
                          public ::testing::WithParamInterface<AttentionCase> {};

TEST_P(AttentionTwinTest, ForwardMatchesCpuAndRepeatsItsBits) {
  const HostAttention h(GetParam(), 11);
  const ops::AttentionShape& s = h.shape;
  std::vector<float> out(h.q.size()), lse(lse_size(s));
  ops::attention_block_forward(s, h.mask(), h.q.data(), h.k.data(), h.v.data(), out.data(),
                               lse.data());
  const DeviceAttention d(h);
  const ops::AttentionMask& mask = d.mask;
  // Outputs start as garbage: the forward overwrites every element.
  DeviceOutput out1(std::vector<float>(out.size(), 7.5f)), lse1(std::vector<float>(lse.size(), 3));
  DeviceOutput out2(std::vector<float>(out.size(), -2)), lse2(std::vector<float>(lse.size(), 9));
  ASSERT_TRUE(succeeded(kernels::attention_block_forward(
      s, mask, d.q.as<float>(), d.k.as<float>(), d.v.as<float>(), out1.data(), lse1.data())));
  ASSERT_TRUE(succeeded(kernels::attention_block_forward(
      s, mask, d.q.as<float>(), d.k.as<float>(), d.v.as<float>(), out2.data(), lse2.data())));
  expect_output("out", out1.fetch(), out2.fetch(), out);
  expect_output("lse", lse1.fetch(), lse2.fetch(), lse);
  // The cp placement with query runs has rows that see no key: lse -inf, out 0, exactly.
  if (GetParam().placement == Placement::kCpQueryRuns) {
    EXPECT_EQ(lse1.fetch()[0], -INFINITY);
    EXPECT_EQ(out1.fetch()[0], 0.0f);
  }
}

TEST_P(AttentionTwinTest, BackwardAccumulatesLikeCpuAndRepeatsItsBits) {
  const HostAttention h(GetParam(), 12);
  const ops::AttentionShape& s = h.shape;
  std::vector<float> out(h.q.size()), lse(lse_size(s));
  ops::attention_block_forward(s, h.mask(), h.q.data(), h.k.data(), h.v.data(), out.data(),
                               lse.data());
  // dq, dk, dv accumulate: they start from earlier blocks' (random) shares.
  Rng rng(13);
  const std::vector<float> dq0 = test::random_floats(h.q.size(), rng, -1, 1);
  const std::vector<float> dk0 = test::random_floats(h.k.size(), rng, -1, 1);
  const std::vector<float> dv0 = test::random_floats(h.k.size(), rng, -1, 1);
  std::vector<float> dq = dq0, dk = dk0, dv = dv0;
  ops::attention_block_backward(s, h.mask(), h.q.data(), h.k.data(), h.v.data(), out.data(),
                                lse.data(), h.dout.data(), dq.data(), dk.data(), dv.data());
  const DeviceAttention d(h);
  const DeviceBuffer d_out = upload(out), d_lse = upload(lse);
  const ops::AttentionMask& mask = d.mask;
  DeviceOutput dq1(dq0), dk1(dk0), dv1(dv0), dq2(dq0), dk2(dk0), dv2(dv0);
  for (auto [gq, gk, gv] : {std::tuple{&dq1, &dk1, &dv1}, std::tuple{&dq2, &dk2, &dv2}}) {
    ASSERT_TRUE(succeeded(kernels::attention_block_backward(
        s, mask, d.q.as<float>(), d.k.as<float>(), d.v.as<float>(), d_out.as<float>(),
        d_lse.as<float>(), d.dout.as<float>(), gq->data(), gk->data(), gv->data())));
  }
  expect_output("dq", dq1.fetch(), dq2.fetch(), dq);
  expect_output("dk", dk1.fetch(), dk2.fetch(), dk);
  expect_output("dv", dv1.fetch(), dv2.fetch(), dv);
}

INSTANTIATE_TEST_SUITE_P(Shapes, AttentionTwinTest, ::testing::ValuesIn(kAttentionCases),
                         [](const auto& info) { return std::string(info.param.name); });

TEST_F(AttentionKernelTest, MergeMatchesCpuIncludingRowsWithoutKeys) {
  ops::AttentionShape s;
  s.batch = 2, s.seq = 37, s.heads = 3, s.kv_heads = 1, s.head_dim = 70;
  Rng rng(21);
  const size_t n_out = size_t(s.batch * s.seq * s.heads * s.head_dim), n_lse = lse_size(s);
  const std::vector<float> out0 = test::random_floats(n_out, rng, -1, 1);
  const std::vector<float> out_b = test::random_floats(n_out, rng, -1, 1);
  std::vector<float> lse0 = test::random_floats(n_lse, rng, -3, 6);
  std::vector<float> lse_b = test::random_floats(n_lse, rng, -3, 6);
  // Every combination of an empty accumulator row and an empty block row.
  for (size_t i = 0; i < n_lse; i += 3) lse0[i] = -INFINITY;
  for (size_t i = 0; i < n_lse; i += 2) lse_b[i] = -INFINITY;
  std::vector<float> out = out0, lse = lse0;
  ops::attention_merge(s, out_b.data(), lse_b.data(), out.data(), lse.data());
  const DeviceBuffer d_out_b = upload(out_b), d_lse_b = upload(lse_b);
  DeviceOutput out1(out0), lse1(lse0), out2(out0), lse2(lse0);
  ASSERT_TRUE(succeeded(kernels::attention_merge(s, d_out_b.as<float>(), d_lse_b.as<float>(),
                                                 out1.data(), lse1.data())));
  ASSERT_TRUE(succeeded(kernels::attention_merge(s, d_out_b.as<float>(), d_lse_b.as<float>(),
                                                 out2.data(), lse2.data())));
  expect_output("out", out1.fetch(), out2.fetch(), out);
  expect_output("lse", lse1.fetch(), lse2.fetch(), lse);
}

// A ring on the device: one query block against two key blocks, merged in either order,
// against the same ring on the CPU (whose equality with one whole block attention_block_test
// checks). The cp placement leaves query rows that see no key of either block.
TEST_F(AttentionKernelTest, RingOfBlocksMergedOnTheDeviceMatchesTheCpuRing) {
  const AttentionCase c{"ring", 2, 40, 48, 4, 2, 64, 0, Placement::kCpQueryRuns, Docs::kI64};
  const HostAttention blocks[2] = {HostAttention(c, 31), HostAttention(c, 32)};
  const DeviceAttention device[2] = {DeviceAttention(blocks[0]), DeviceAttention(blocks[1])};
  const ops::AttentionShape& s = blocks[0].shape;
  const std::vector<float>& q = blocks[0].q;  // both blocks' keys see block 0's queries
  for (const auto& order : {std::array<int, 2>{0, 1}, std::array<int, 2>{1, 0}}) {
    std::vector<float> out(q.size(), 0.0f), lse(lse_size(s), -INFINITY);
    std::vector<float> part_out(out.size()), part_lse(lse.size());
    DeviceOutput acc_out(out), acc_lse(lse), d_part_out(part_out), d_part_lse(part_lse);
    for (int b : order) {
      const HostAttention& h = blocks[b];
      ops::attention_block_forward(s, h.mask(), q.data(), h.k.data(), h.v.data(), part_out.data(),
                                   part_lse.data());
      ops::attention_merge(s, part_out.data(), part_lse.data(), out.data(), lse.data());
      ASSERT_TRUE(succeeded(kernels::attention_block_forward(
          s, device[b].mask, device[0].q.as<float>(), device[b].k.as<float>(),
          device[b].v.as<float>(), d_part_out.data(), d_part_lse.data())));
      ASSERT_TRUE(succeeded(kernels::attention_merge(s, d_part_out.data(), d_part_lse.data(),
                                                     acc_out.data(), acc_lse.data())));
    }
    EXPECT_LE(worst_error(acc_out.fetch(), out), kTolerance) << "block order " << order[0];
    EXPECT_LE(worst_error(acc_lse.fetch(), lse), kTolerance) << "block order " << order[0];
    EXPECT_EQ(acc_lse.fetch()[0], -INFINITY) << "row 0 sees no key of either block";
  }
}

// ---- Paged attention ----

struct PagedCase {
  const char* name;
  int64_t heads, kv_heads, head_dim, window;
  bool documents;  // later tokens of a sequence start at a document boundary (`first`)
};

const PagedCase kPagedCases[] = {
    {"gqa_hd64", 4, 2, 64, 0, false},        {"window_hd16", 4, 2, 16, 5, false},
    {"documents_hd128", 4, 1, 128, 0, true}, {"window_documents_hd40", 2, 2, 40, 23, true},
    {"hd256", 2, 1, 256, 0, false},
};

// Sequences of different lengths in a shuffled arena of 16-position blocks, the cache filled by
// paged_kv_store with every position (a prefill). Attention runs for every position of the short
// sequences and every 5th (and the last) of the long ones: the 300-position sequence spans more
// than the 4 x 64 positions of the kernel's splits, so they wrap around, and the 140 attending
// tokens take two of the kernel's passes (128 tokens each).
struct HostPaged {
  ops::PagedAttentionShape store_shape, attend_shape;
  std::vector<int64_t> lengths{1, 17, 40, 100, 300};
  std::vector<int32_t> tables;          // every sequence's block table, concatenated
  std::vector<ops::PagedQuery> stored;  // one per cached position
  std::vector<int64_t> table_of;        // per stored token: its sequence's table offset
  std::vector<int64_t> attending;       // stored tokens that attend
  std::vector<bool> last_of_sequence;   // per attending token
  std::vector<float> q, k, v;           // q per attending token, k and v per stored one
  int64_t num_blocks = 0;

  HostPaged(const PagedCase& c, uint64_t seed) {
    store_shape.heads = c.heads;
    store_shape.kv_heads = c.kv_heads;
    store_shape.head_dim = c.head_dim;
    store_shape.block_size = 16;
    store_shape.window = c.window;
    const int64_t bs = store_shape.block_size;
    for (int64_t len : lengths) num_blocks += (len + bs - 1) / bs;
    num_blocks += 3;  // unused blocks in the arena
    Rng rng(seed);
    std::vector<int32_t> arena(static_cast<size_t>(num_blocks));
    std::iota(arena.begin(), arena.end(), 0);
    std::shuffle(arena.begin(), arena.end(), rng);
    size_t next = 0;
    for (int64_t len : lengths) {
      const auto table = int64_t(tables.size());
      for (int64_t b = 0; b < (len + bs - 1) / bs; ++b) tables.push_back(arena[next++]);
      for (int64_t pos = 0; pos < len; ++pos) {
        ops::PagedQuery t;
        t.pos = pos;
        t.first = c.documents ? pos / 13 * 13 : 0;  // documents of 13 tokens
        if (len <= 40 || pos % 5 == 0 || pos == len - 1) {
          attending.push_back(int64_t(stored.size()));
          last_of_sequence.push_back(pos == len - 1);
        }
        stored.push_back(t);
        table_of.push_back(table);
      }
    }
    store_shape.tokens = int64_t(stored.size());
    attend_shape = store_shape;
    attend_shape.tokens = int64_t(attending.size());
    q = test::random_floats(size_t(attend_shape.tokens * c.heads * c.head_dim), rng, -1, 1);
    k = test::random_floats(size_t(store_shape.tokens * c.kv_heads * c.head_dim), rng, -1, 1);
    v = test::random_floats(k.size(), rng, -1, 1);
  }
  size_t cache_size() const {
    return size_t(num_blocks * store_shape.kv_heads * store_shape.block_size *
                  store_shape.head_dim);
  }
  // The stored tokens (or only the attending ones) with their block tables inside
  // `table_base` (`tables` or its device copy).
  std::vector<ops::PagedQuery> with_tables(const int32_t* table_base, bool attending_only) const {
    std::vector<ops::PagedQuery> out;
    for (size_t i = 0, a = 0; i < stored.size(); ++i) {
      if (attending_only && (a == attending.size() || attending[a] != int64_t(i))) continue;
      a += attending_only;
      out.push_back(stored[i]);
      out.back().blocks = table_base + table_of[i];
    }
    return out;
  }
};

void PrintTo(const PagedCase& c, std::ostream* os) { *os << c.name; }

class PagedTwinTest : public AttentionKernelTest,
                      public ::testing::WithParamInterface<PagedCase> {};

TEST_P(PagedTwinTest, StoreAndAttentionMatchCpuAndDecodeRepeatsPrefillBits) {
  const HostPaged h(GetParam(), 41);
  // CPU: store, then attend (positions never written keep the sentinel 0.25).
  std::vector<float> k_cache(h.cache_size(), 0.25f), v_cache(h.cache_size(), 0.25f);
  const std::vector<ops::PagedQuery> cpu_stored = h.with_tables(h.tables.data(), false);
  const std::vector<ops::PagedQuery> cpu_attending = h.with_tables(h.tables.data(), true);
  ops::paged_kv_store(h.store_shape, cpu_stored.data(), h.k.data(), h.v.data(), k_cache.data(),
                      v_cache.data());
  std::vector<float> out(h.q.size());
  ops::paged_attention(h.attend_shape, cpu_attending.data(), h.q.data(), k_cache.data(),
                       v_cache.data(), out.data());

  const DeviceBuffer d_tables = upload(h.tables);
  const DeviceBuffer d_stored = upload(h.with_tables(d_tables.as<int32_t>(), false));
  const std::vector<ops::PagedQuery> attending = h.with_tables(d_tables.as<int32_t>(), true);
  const DeviceBuffer d_attending = upload(attending);
  const DeviceBuffer d_q = upload(h.q), d_k = upload(h.k), d_v = upload(h.v);
  DeviceOutput gk(std::vector<float>(h.cache_size(), 0.25f));
  DeviceOutput gv(std::vector<float>(h.cache_size(), 0.25f));
  ASSERT_TRUE(
      succeeded(kernels::paged_kv_store(h.store_shape, d_stored.as<ops::PagedQuery>(),
                                        d_k.as<float>(), d_v.as<float>(), gk.data(), gv.data())));
  EXPECT_TRUE(gk.fetch().guards_intact() && gv.fetch().guards_intact());
  EXPECT_EQ(std::vector<float>(gk.fetch().data(), gk.fetch().data() + k_cache.size()), k_cache);
  EXPECT_EQ(std::vector<float>(gv.fetch().data(), gv.fetch().data() + v_cache.size()), v_cache);

  DeviceOutput out1(std::vector<float>(out.size(), 5)), out2(std::vector<float>(out.size(), -5));
  for (DeviceOutput* o : {&out1, &out2}) {
    ASSERT_TRUE(
        succeeded(kernels::paged_attention(h.attend_shape, d_attending.as<ops::PagedQuery>(),
                                           d_q.as<float>(), gk.data(), gv.data(), o->data())));
  }
  expect_output("out", out1.fetch(), out2.fetch(), out);

  // Decode: each sequence's last token alone gives bitwise the prefill's row.
  const int64_t row = h.attend_shape.heads * h.attend_shape.head_dim;
  std::vector<ops::PagedQuery> last;
  std::vector<float> last_q;
  std::vector<int64_t> last_row;
  for (size_t i = 0; i < attending.size(); ++i) {
    if (!h.last_of_sequence[i]) continue;
    last.push_back(attending[i]);
    last_row.push_back(int64_t(i));
    last_q.insert(last_q.end(), h.q.begin() + int64_t(i) * row, h.q.begin() + int64_t(i + 1) * row);
  }
  ops::PagedAttentionShape decode = h.attend_shape;
  decode.tokens = int64_t(last.size());
  const DeviceBuffer d_last = upload(last), d_last_q = upload(last_q);
  DeviceOutput decoded(std::vector<float>(last_q.size(), 1));
  ASSERT_TRUE(
      succeeded(kernels::paged_attention(decode, d_last.as<ops::PagedQuery>(), d_last_q.as<float>(),
                                         gk.data(), gv.data(), decoded.data())));
  const test::Guarded<float>& prefill = out1.fetch();
  const test::Guarded<float>& got = decoded.fetch();
  EXPECT_TRUE(got.guards_intact());
  for (size_t n = 0; n < last_row.size(); ++n) {
    EXPECT_EQ(std::memcmp(got.data() + int64_t(n) * row, prefill.data() + last_row[n] * row,
                          size_t(row) * sizeof(float)),
              0)
        << "decode of sequence " << n << " differs from its prefill row";
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, PagedTwinTest, ::testing::ValuesIn(kPagedCases),
                         [](const auto& info) { return std::string(info.param.name); });

// ---- Argument checks: no GPU needed (they come before any CUDA call) ----

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// Host memory stands in for device pointers: every call below fails its checks first.
alignas(64) float host_floats[4096];

ops::AttentionShape small_shape() {
  ops::AttentionShape s;
  s.batch = 1, s.seq = 4, s.heads = 2, s.kv_heads = 1, s.head_dim = 8;
  return s;
}

void expect_invalid(const Status& s, const std::string& part) {
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.to_string();
  EXPECT_TRUE(contains(s.message(), part)) << s.message();
}

TEST(AttentionKernelArgsTest, NullOrMisalignedBuffersNameOpAndOperand) {
  float* f = host_floats;
  expect_invalid(
      kernels::attention_block_forward(small_shape(), {}, nullptr, f, f, f + 512, f + 1024),
      "kernels::attention_block_forward: q is null");
  expect_invalid(kernels::attention_block_forward(small_shape(), {}, f, f, f, f + 512, nullptr),
                 "kernels::attention_block_forward: lse is null");
  const auto* odd = reinterpret_cast<float*>(reinterpret_cast<char*>(f) + 2);
  expect_invalid(kernels::attention_block_forward(small_shape(), {}, f, odd, f, f + 512, f + 1024),
                 "k is not aligned");
  expect_invalid(kernels::attention_merge(small_shape(), f, nullptr, f + 512, f + 1024),
                 "lse_b is null");
  expect_invalid(kernels::attention_block_backward(small_shape(), {}, f, f, f, f, f, f, f + 512,
                                                   nullptr, f + 1024),
                 "kernels::attention_block_backward: dk is null");
  ops::AttentionMask misaligned;
  misaligned.q_index = reinterpret_cast<const int64_t*>(reinterpret_cast<char*>(f) + 4);
  expect_invalid(
      kernels::attention_block_forward(small_shape(), misaligned, f, f, f, f + 512, f + 1024),
      "mask.q_index is not aligned");
}

TEST(AttentionKernelArgsTest, BadShapesAreInvalidArgument) {
  float* f = host_floats;
  ops::AttentionShape s = small_shape();
  s.heads = 3, s.kv_heads = 2;
  expect_invalid(kernels::attention_block_forward(s, {}, f, f, f, f + 512, f + 1024), "kv_heads");
  s = small_shape();
  s.head_dim = 257;
  expect_invalid(kernels::attention_block_forward(s, {}, f, f, f, f + 512, f + 1024),
                 "head_dim 257");
  expect_invalid(kernels::attention_block_backward(s, {}, f, f, f, f, f, f, f, f, f),
                 "head_dim 257");
  s = small_shape();
  s.window = -1;
  expect_invalid(kernels::attention_merge(s, f, f, f + 512, f + 1024), "window");
  s = small_shape();
  s.seq = -1;
  expect_invalid(kernels::attention_merge(s, f, f, f + 512, f + 1024), "negative");
}

TEST(AttentionKernelArgsTest, DocumentIdsForOnlyOneSideAreInvalidArgument) {
  float* f = host_floats;
  static const int32_t docs[4] = {0, 0, 1, 1};
  ops::AttentionMask m;
  m.q_doc.i32 = docs;
  expect_invalid(kernels::attention_block_forward(small_shape(), m, f, f, f, f + 512, f + 1024),
                 "queries but not keys");
}

TEST(AttentionKernelArgsTest, OverlappingOutputsAreInvalidArgument) {
  float* f = host_floats;
  // out is (1, 4, 2, 8) = 64 floats: lse at f + 600 + 8 lies inside it.
  expect_invalid(kernels::attention_block_forward(small_shape(), {}, f, f, f, f + 600, f + 608),
                 "out and lse overlap");
  expect_invalid(kernels::attention_block_backward(small_shape(), {}, f, f, f, f, f, f, f + 512,
                                                   f + 1024, f + 1030),
                 "dk and dv overlap");
}

TEST(AttentionKernelArgsTest, EmptyShapesSucceedWithoutTouchingCuda) {
  ops::AttentionShape s = small_shape();
  s.batch = 0;
  EXPECT_TRUE(
      kernels::attention_block_forward(s, {}, nullptr, nullptr, nullptr, nullptr, nullptr).ok());
  EXPECT_TRUE(kernels::attention_merge(s, nullptr, nullptr, nullptr, nullptr).ok());
  EXPECT_TRUE(kernels::attention_block_backward(s, {}, nullptr, nullptr, nullptr, nullptr, nullptr,
                                                nullptr, nullptr, nullptr, nullptr)
                  .ok());
  ops::PagedAttentionShape p;
  p.tokens = 0;
  EXPECT_TRUE(kernels::paged_kv_store(p, nullptr, nullptr, nullptr, nullptr, nullptr).ok());
  EXPECT_TRUE(kernels::paged_attention(p, nullptr, nullptr, nullptr, nullptr, nullptr).ok());
}

TEST(AttentionKernelArgsTest, PagedChecksShapeAndBuffers) {
  float* f = host_floats;
  alignas(64) static ops::PagedQuery queries[2];
  ops::PagedAttentionShape p;
  p.tokens = 2, p.heads = 4, p.kv_heads = 2, p.head_dim = 8, p.block_size = 16;
  expect_invalid(kernels::paged_attention(p, nullptr, f, f, f, f + 512),
                 "kernels::paged_attention: queries is null");
  expect_invalid(kernels::paged_kv_store(p, queries, f, f, nullptr, f), "k_cache is null");
  expect_invalid(kernels::paged_attention(p, queries, f, f, f, f + 8), "out and q overlap");
  p.block_size = 0;
  expect_invalid(kernels::paged_attention(p, queries, f, f, f, f + 512), "block_size");
  p.block_size = 16;
  p.heads = 3;
  expect_invalid(kernels::paged_kv_store(p, queries, f, f, f, f), "kv_heads");
  p.heads = 4;
  p.head_dim = 512;
  expect_invalid(kernels::paged_attention(p, queries, f, f, f, f + 512), "head_dim 512");
}

}  // namespace
}  // namespace ms::kernels
