#include "infer/request_json.h"

#include <sstream>

namespace ms::infer {

using nlohmann::json;
using nlohmann::ordered_json;

ordered_json completion_json(const Completion& c, CompletionForm form, size_t index) {
  if (form == CompletionForm::kBetweenRanks) {
    return ordered_json{{"index", index},
                        {"id", c.id},
                        {"tokens", c.tokens},
                        {"text", std::vector<uint8_t>(c.text.begin(), c.text.end())},
                        {"finish_reason", c.finish_reason},
                        {"error", c.error},
                        {"prompt_tokens", c.prompt_tokens},
                        {"ttft_ms", c.ttft_ms},
                        {"latency_ms", c.latency_ms},
                        {"logits", c.logits}};
  }
  ordered_json j;
  j["id"] = c.id;
  j["text"] = c.text;
  j["tokens"] = c.tokens;
  j["finish_reason"] = c.finish_reason;
  j["prompt_tokens"] = c.prompt_tokens;
  j["completion_tokens"] = c.tokens.size();
  j["ttft_ms"] = c.ttft_ms;
  j["latency_ms"] = c.latency_ms;
  if (!c.error.empty()) j["error"] = c.error;
  return j;
}

Completion completion_from(const json& j) {
  Completion c;
  c.id = j.at("id").get<std::string>();  // ids come from JSON input, so they are valid UTF-8
  c.tokens = j.at("tokens").get<std::vector<int32_t>>();
  const std::vector<uint8_t> text = j.at("text").get<std::vector<uint8_t>>();
  c.text.assign(text.begin(), text.end());
  c.finish_reason = j.at("finish_reason").get<std::string>();
  c.error = j.at("error").get<std::string>();
  c.prompt_tokens = j.at("prompt_tokens").get<int64_t>();
  c.ttft_ms = j.at("ttft_ms").get<double>();
  c.latency_ms = j.at("latency_ms").get<double>();
  c.logits = j.at("logits").get<std::vector<std::vector<float>>>();
  return c;
}

Result<Request> parse_request(std::string_view line, const std::string& where,
                              const data::Tokenizer& tok, const Request& defaults) {
  const json j = json::parse(line, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return InvalidArgument(where + ": not a JSON object");
  if (!j.contains("prompt") || !j["prompt"].is_string()) {
    return InvalidArgument(where + ": missing string key \"prompt\"");
  }
  Request r = defaults;
  try {
    r.id = j.contains("id") ? (j["id"].is_string() ? j["id"].get<std::string>() : j["id"].dump())
                            : r.id;
    r.prompt = tok.encode(j["prompt"].get<std::string>());
    r.max_tokens = j.value("max_tokens", r.max_tokens);
    r.sampling.temperature = j.value("temperature", r.sampling.temperature);
    r.sampling.top_p = j.value("top_p", r.sampling.top_p);
    r.sampling.top_k = j.value("top_k", r.sampling.top_k);
    r.sampling.seed = j.value("seed", r.sampling.seed);
    if (j.contains("stop")) {
      r.stop = j["stop"].is_string() ? std::vector<std::string>{j["stop"].get<std::string>()}
                                     : j["stop"].get<std::vector<std::string>>();
    }
  } catch (const json::exception& e) {
    return InvalidArgument(where + ": a key has the wrong type (" + e.what() + ")");
  }
  return r;
}

ParsedPrompts parse_prompts(std::string_view text, const std::string& path,
                            const data::Tokenizer& tok, const Request& defaults) {
  ParsedPrompts p;
  std::istringstream in{std::string(text)};
  std::string line;
  for (int64_t n = 1; std::getline(in, line); ++n) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    Request line_defaults = defaults;
    line_defaults.id = "line-" + std::to_string(n);
    Result<Request> r = parse_request(line, path + ":" + std::to_string(n), tok, line_defaults);
    if (r.ok()) {
      p.slot.push_back(static_cast<int64_t>(p.requests.size()));
      p.requests.push_back(std::move(*r));
      continue;
    }
    p.slot.push_back(-1 - static_cast<int64_t>(p.refused.size()));
    Completion c;
    c.id = line_defaults.id;
    c.finish_reason = "error";
    c.error = r.status().message();
    p.refused.push_back(std::move(c));
  }
  return p;
}

}  // namespace ms::infer
