// The block allocator's free list and the cache arena's layout, and forward_cached's refusal of
// chunks that do not fit the cache or the model.
#include "infer/kv_cache.h"

#include <gtest/gtest.h>

#include <cmath>

#include "model/transformer.h"
#include "tests/infer/test_models.h"

namespace ms::infer {
namespace {

TEST(BlockAllocator, HandsOutEveryBlockOnceThenRefuses) {
  BlockAllocator a(4);
  std::optional<std::vector<int32_t>> x = a.allocate(3);
  ASSERT_TRUE(x.has_value());
  EXPECT_EQ(*x, (std::vector<int32_t>{0, 1, 2}));
  EXPECT_EQ(a.num_free(), 1);
  EXPECT_FALSE(a.allocate(2).has_value());
  EXPECT_EQ(a.num_free(), 1);  // a refused request takes nothing
  EXPECT_EQ(*a.allocate(1), std::vector<int32_t>{3});
  EXPECT_FALSE(a.allocate(1).has_value());
}

TEST(BlockAllocator, FreedBlocksAreReusedLastInFirstOut) {
  BlockAllocator a(6);
  std::vector<int32_t> x = *a.allocate(2);
  std::vector<int32_t> y = *a.allocate(2);
  a.free(x);
  EXPECT_EQ(a.num_free(), 4);
  EXPECT_EQ(*a.allocate(2), (std::vector<int32_t>{1, 0}));
  a.free(y);
  EXPECT_EQ(*a.allocate(1), std::vector<int32_t>{3});
}

TEST(BlockAllocatorDeathTest, DoubleFreeAborts) {
  BlockAllocator a(2);
  std::vector<int32_t> x = *a.allocate(1);
  a.free(x);
  EXPECT_DEATH(a.free(x), "freed twice");
}

TEST(KvCache, SizesTheArenaFromTheModel) {
  const config::ModelConfig c = testing::tiny_dense();
  KvCache cache(c, 10, 16);
  EXPECT_EQ(cache.blocks_for(1), 1);
  EXPECT_EQ(cache.blocks_for(16), 1);
  EXPECT_EQ(cache.blocks_for(17), 2);
  EXPECT_EQ(cache.bytes(), 2 * c.n_layers * 10 * 16 * c.n_kv_heads * (c.d_model / c.n_heads) * 4);
  EXPECT_EQ(cache.view().k.size(), static_cast<size_t>(c.n_layers));
}

// Small and large (a mapping of its own, faulted in as used) arenas both read as zeros.
TEST(KvCache, StartsZeroFilled) {
  const config::ModelConfig c = testing::tiny_dense();
  for (int64_t blocks : {int64_t{2}, int64_t{600}}) {
    KvCache cache(c, blocks, 16);
    const int64_t per_layer = blocks * 16 * c.n_kv_heads * (c.d_model / c.n_heads);
    double sum = 0;
    for (const float* k : cache.view().k) {
      for (int64_t i = 0; i < per_layer; ++i) sum += std::fabs(k[i]);
    }
    for (const float* v : cache.view().v) {
      for (int64_t i = 0; i < per_layer; ++i) sum += std::fabs(v[i]);
    }
    EXPECT_EQ(sum, 0.0) << blocks << " blocks";
    EXPECT_GE(cache.bytes(), blocks > 100 ? (int64_t{2} << 20) : 0);
  }
}

TEST(ForwardCached, RefusesChunksThatDoNotFit) {
  const config::ModelConfig c = testing::tiny_dense();
  Result<std::unique_ptr<model::Transformer>> m = model::Transformer::create(c, 1);
  ASSERT_TRUE(m.ok());
  KvCache cache(c, 2, 4);
  const std::vector<int32_t> tokens = {1, 2, 3, 4, 5};
  const std::vector<int32_t> one_block = {0}, bad_block = {0, 7}, two = {0, 1};
  const std::vector<int32_t> bad_token = {1, 500};
  const auto message = [&](std::span<const int32_t> t, int64_t start,
                           std::span<const int32_t> blocks) {
    const model::CachedChunk chunk{t, start, blocks};
    Result<Tensor> r = (*m)->forward_cached(std::span(&chunk, 1), cache.view());
    EXPECT_FALSE(r.ok());
    return r.status().message();
  };
  EXPECT_NE(message(tokens, 0, one_block).find("block table covers fewer than 5"),
            std::string::npos);
  EXPECT_NE(message(tokens, 0, bad_block).find("block 7 is outside"), std::string::npos);
  EXPECT_NE(message(bad_token, 0, two).find("token 500"), std::string::npos);
  EXPECT_NE(message(tokens, 62, two).find("model.max_seq_len"), std::string::npos);
  EXPECT_NE(message({}, 0, two).find("no tokens"), std::string::npos);
  KvCache other(config::ModelConfig{}, 2, 4);  // another model's shape
  const model::CachedChunk chunk{tokens, 0, two};
  EXPECT_FALSE((*m)->forward_cached(std::span(&chunk, 1), other.view()).ok());
}

}  // namespace
}  // namespace ms::infer
