// The JSON forms of requests and completions (infer/request_json.h): prompts-file lines parsed
// into requests or refused in place, and a completion as an output line or between ranks.
#include "infer/request_json.h"

#include <gtest/gtest.h>

#include "tests/infer/test_models.h"

namespace ms::infer {
namespace {

using testing::take;

class RequestJson : public ::testing::Test {
 protected:
  void SetUp() override { tok_ = take(data::Tokenizer::load(testing::gpt2_tokenizer())); }
  std::unique_ptr<data::Tokenizer> tok_;
};

TEST_F(RequestJson, ALineOverridesTheDefaultsItNames) {
  Request defaults;
  defaults.id = "line-1";
  defaults.max_tokens = 64;
  defaults.sampling.seed = 9;
  const Request r = take(parse_request(
      R"({"id": 7, "prompt": "Hello", "max_tokens": 3, "temperature": 0.5, "stop": "\n"})",
      "p.jsonl:1", *tok_, defaults));
  EXPECT_EQ(r.id, "7");
  EXPECT_EQ(r.prompt, tok_->encode("Hello"));
  EXPECT_EQ(r.max_tokens, 3);
  EXPECT_FLOAT_EQ(r.sampling.temperature, 0.5f);
  EXPECT_EQ(r.sampling.seed, 9u);
  EXPECT_EQ(r.stop, std::vector<std::string>{"\n"});
}

TEST_F(RequestJson, MalformedLinesAreRefusedNamingTheLine) {
  const Request defaults;
  const Status not_object = parse_request("[1]", "p.jsonl:2", *tok_, defaults).status();
  EXPECT_EQ(not_object.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(not_object.message(), "p.jsonl:2: not a JSON object");
  const Status no_prompt = parse_request(R"({"id": "a"})", "p.jsonl:3", *tok_, defaults).status();
  EXPECT_EQ(no_prompt.message(), "p.jsonl:3: missing string key \"prompt\"");
  const Status wrong = parse_request(R"({"prompt": "x", "max_tokens": "many"})", "p.jsonl:4",
                                     *tok_, defaults)
                           .status();
  EXPECT_EQ(wrong.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(wrong.message().find("p.jsonl:4: a key has the wrong type"), std::string::npos)
      << wrong.message();
}

TEST_F(RequestJson, AFileKeepsEachLinesPlaceAndSkipsBlankLines) {
  const ParsedPrompts p =
      parse_prompts("{\"prompt\": \"a\"}\n\n  \nnot json\n{\"id\": \"x\", \"prompt\": \"b\"}\n",
                    "p.jsonl", *tok_, Request{});
  ASSERT_EQ(p.requests.size(), 2u);
  EXPECT_EQ(p.requests[0].id, "line-1");
  EXPECT_EQ(p.requests[1].id, "x");
  ASSERT_EQ(p.refused.size(), 1u);
  EXPECT_EQ(p.refused[0].id, "line-4");
  EXPECT_EQ(p.refused[0].finish_reason, "error");
  EXPECT_EQ(p.refused[0].error, "p.jsonl:4: not a JSON object");
  EXPECT_EQ(p.slot, (std::vector<int64_t>{0, -1, 1}));
}

Completion sample_completion() {
  Completion c;
  c.id = "r1";
  c.tokens = {5, 6};
  c.text = "hi\xe2";  // cut inside a UTF-8 sequence
  c.finish_reason = "length";
  c.prompt_tokens = 3;
  c.ttft_ms = 1.5;
  c.latency_ms = 2.5;
  c.logits = {{0.5f}, {-1.0f}};
  return c;
}

TEST(CompletionJson, AnOutputLineHasItsKeysInOrderAndErrorOnlyWhenThereIsOne) {
  Completion c = sample_completion();
  c.text = "hi";
  EXPECT_EQ(completion_json(c, CompletionForm::kOutputLine).dump(),
            R"({"id":"r1","text":"hi","tokens":[5,6],"finish_reason":"length","prompt_tokens":3,)"
            R"("completion_tokens":2,"ttft_ms":1.5,"latency_ms":2.5})");
  c.error = "too long";
  EXPECT_EQ(completion_json(c, CompletionForm::kOutputLine).back(), "too long");
}

TEST(CompletionJson, BetweenRanksTheCompletionComesBackWhole) {
  const Completion c = sample_completion();
  const nlohmann::ordered_json j = completion_json(c, CompletionForm::kBetweenRanks, 4);
  EXPECT_EQ(j.at("index").get<size_t>(), 4u);
  const Completion back = completion_from(nlohmann::json::parse(j.dump()));
  EXPECT_EQ(back.id, c.id);
  EXPECT_EQ(back.tokens, c.tokens);
  EXPECT_EQ(back.text, c.text);
  EXPECT_EQ(back.finish_reason, c.finish_reason);
  EXPECT_EQ(back.error, c.error);
  EXPECT_EQ(back.prompt_tokens, c.prompt_tokens);
  EXPECT_EQ(back.ttft_ms, c.ttft_ms);
  EXPECT_EQ(back.latency_ms, c.latency_ms);
  EXPECT_EQ(back.logits, c.logits);
}

}  // namespace
}  // namespace ms::infer
