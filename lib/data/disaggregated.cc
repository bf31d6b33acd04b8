// Loader ranks serving ready micro-batches to trainer ranks over MPI; see disaggregated.h for
// the roles and the protocol. The server polls one outstanding length receive per trainer
// (nonblocking, so any trainer may ask next) and answers each request with blocking sends; the
// Loaders' own prefetch threads build batches while it waits, and only the server's calling
// thread touches MPI.
#include "data/disaggregated.h"

#include <chrono>
#include <cstring>
#include <map>
#include <nlohmann/json.hpp>
#include <thread>

#include "comm/variable_length.h"
#include "core/logging.h"

namespace ms::data {

namespace {

using nlohmann::json;

constexpr int kRequestTag = 7101;
constexpr int kReplyTag = 7102;
// code, message bytes, step, micro_index, rows, seq_len, stop (the loader rank got a stop signal)
constexpr size_t kReplyHeaderWords = 7;
constexpr size_t kStopWord = 6;

// A reply: a status (with its message or, when OK, `text`) and optionally a micro-batch.
std::string encode_reply(const Status& status, const std::string& text, const MicroBatch* batch) {
  const std::string& message = status.ok() ? text : status.message();
  const int64_t header[kReplyHeaderWords] = {
      static_cast<int64_t>(status.code()), static_cast<int64_t>(message.size()),
      batch ? batch->step : 0, batch ? batch->micro_index : 0, batch ? batch->rows : 0,
      batch ? batch->seq_len : 0, 0};
  std::string out(reinterpret_cast<const char*>(header), sizeof(header));
  out += message;
  if (batch) {
    out.append(reinterpret_cast<const char*>(batch->inputs.data()), batch->inputs.size() * 4);
    out.append(reinterpret_cast<const char*>(batch->targets.data()), batch->targets.size() * 4);
  }
  return out;
}

// Sets the stop word of an encoded reply.
void mark_stop(std::string& reply, bool stop) {
  const int64_t word = stop ? 1 : 0;
  std::memcpy(reply.data() + kStopWord * sizeof(int64_t), &word, sizeof(word));
}

struct Reply {
  bool stop = false;
  Status status;
  std::string text;
  MicroBatch batch;
};

Result<Reply> decode_reply(const std::string& bytes, int server) {
  int64_t header[kReplyHeaderWords];
  if (bytes.size() < sizeof(header)) return CommError("short reply from loader rank " + std::to_string(server));
  std::memcpy(header, bytes.data(), sizeof(header));
  const size_t message_bytes = static_cast<size_t>(header[1]);
  const size_t ints = static_cast<size_t>(header[4] * header[5]);
  if (bytes.size() != sizeof(header) + message_bytes + 8 * ints) {
    return CommError("malformed reply from loader rank " + std::to_string(server));
  }
  Reply reply;
  reply.stop = header[kStopWord] != 0;
  const std::string message = bytes.substr(sizeof(header), message_bytes);
  if (header[0] != 0) {
    reply.status = Status(static_cast<StatusCode>(header[0]),
                          "loader rank " + std::to_string(server) + ": " + message);
    return reply;
  }
  reply.text = message;
  MicroBatch& b = reply.batch;
  b.step = header[2];
  b.micro_index = static_cast<int>(header[3]);
  b.rows = header[4];
  b.seq_len = header[5];
  b.inputs.resize(ints);
  b.targets.resize(ints);
  const char* data = bytes.data() + sizeof(header) + message_bytes;
  std::memcpy(b.inputs.data(), data, ints * 4);
  std::memcpy(b.targets.data(), data + ints * 4, ints * 4);
  return reply;
}

// Sends `request` to `server` and waits for its reply; a remote error becomes this Status.
Result<Reply> call(comm::Communicator& world, int server, const json& request) {
  MS_RETURN_IF_ERROR(comm::send_sized(world, request.dump(), server, kRequestTag));
  MS_ASSIGN_OR_RETURN(std::string bytes, comm::recv_sized(world, server, kReplyTag));
  MS_ASSIGN_OR_RETURN(Reply reply, decode_reply(bytes, server));
  if (!reply.status.ok()) return reply.status;
  return reply;
}

Status check_roles(const comm::Communicator& world, int loaders, bool want_loader) {
  const int trainers = world.size() - loaders;
  if (loaders < 1 || trainers < 1) {
    return InvalidArgument("disaggregated loading needs 1 <= loaders < world size (got " +
                           std::to_string(loaders) + " loaders in a world of " +
                           std::to_string(world.size()) + ")");
  }
  if ((world.rank() >= trainers) != want_loader) {
    return InvalidArgument("rank " + std::to_string(world.rank()) + " is a " +
                           (want_loader ? "trainer" : "loader") + " rank (the last " +
                           std::to_string(loaders) + " ranks load data)");
  }
  return Status::OK();
}

int next_channel_id() {
  static int next = 0;
  return next++;
}

// ---- server side ----

json options_to_json(const LoaderOptions& o) {
  return json{{"plan_path", o.plan_path}, {"split", std::string(split_name(o.split))},
              {"global_batch", o.global_batch}, {"micro_batch", o.micro_batch},
              {"dp_rank", o.dp_rank}, {"dp_size", o.dp_size}, {"prefetch", o.prefetch}};
}

Result<LoaderOptions> options_from_json(const json& j) {
  LoaderOptions o;
  o.plan_path = j.at("plan_path").get<std::string>();
  MS_ASSIGN_OR_RETURN(o.split, parse_split(j.at("split").get<std::string>()));
  o.global_batch = j.at("global_batch").get<int64_t>();
  o.micro_batch = j.at("micro_batch").get<int64_t>();
  o.dp_rank = j.at("dp_rank").get<int>();
  o.dp_size = j.at("dp_size").get<int>();
  o.prefetch = j.at("prefetch").get<int>();
  return o;
}

class LoaderServer {
 public:
  // Handles one request of `trainer`; returns the reply bytes. Sets `finished` on "finish".
  std::string handle(int trainer, const std::string& request, bool& finished) {
    const json j = json::parse(request, nullptr, false);
    if (j.is_discarded() || !j.contains("op")) {
      return encode_reply(InvalidArgument("malformed request"), "", nullptr);
    }
    try {
      return dispatch(trainer, j, finished);
    } catch (const json::exception& e) {
      return encode_reply(InvalidArgument(std::string("malformed request: ") + e.what()), "", nullptr);
    }
  }

 private:
  std::string dispatch(int trainer, const json& j, bool& finished) {
    const std::string op = j.at("op").get<std::string>();
    if (op == "finish") {
      finished = true;
      return encode_reply(Status::OK(), "", nullptr);
    }
    const auto key = std::make_pair(trainer, j.at("channel").get<int>());
    if (op == "open") return open(key, j.at("options"));
    auto it = channels_.find(key);
    if (it == channels_.end()) return encode_reply(FailedPrecondition("channel is not open"), "", nullptr);
    Loader& loader = *it->second;
    if (op == "next") {
      Result<MicroBatch> batch = loader.next();
      return batch.ok() ? encode_reply(Status::OK(), "", &*batch) : encode_reply(batch.status(), "", nullptr);
    }
    if (op == "restore") {
      const LoaderState state{j.at("plan_hash").get<std::string>(), j.at("consumed").get<int64_t>()};
      return encode_reply(loader.restore(state), "", nullptr);
    }
    if (op == "reset") {
      loader.reset();
      return encode_reply(Status::OK(), "", nullptr);
    }
    if (op == "close") {
      channels_.erase(it);
      return encode_reply(Status::OK(), "", nullptr);
    }
    return encode_reply(InvalidArgument("unknown op '" + op + "'"), "", nullptr);
  }

  std::string open(std::pair<int, int> key, const json& options) {
    Result<LoaderOptions> o = options_from_json(options);
    if (!o.ok()) return encode_reply(o.status(), "", nullptr);
    Result<std::unique_ptr<Loader>> loader = Loader::open(*o);
    if (!loader.ok()) return encode_reply(loader.status(), "", nullptr);
    const Loader& l = **loader;
    const json meta{{"seq_len", l.seq_len()},          {"vocab_size", l.vocab_size()},
                    {"tokenizer_path", l.tokenizer_path()}, {"micro_batches_per_step", l.micro_batches_per_step()},
                    {"samples", l.samples_in_split()}, {"plan_hash", l.plan_hash()}};
    channels_[key] = std::move(loader).value();
    return encode_reply(Status::OK(), meta.dump(), nullptr);
  }

  std::map<std::pair<int, int>, std::unique_ptr<Loader>> channels_;
};

// Between polls of an idle server: spin (yield) while requests came recently, so a trainer
// asking in a tight loop is answered at once; after 1 ms without one, sleep 100 us per poll, so
// a loader rank sharing cores with trainers leaves them the CPU while they compute (100 us is
// small against a micro-batch's forward and backward).
void wait_for_requests(std::chrono::steady_clock::time_point last_request) {
  const auto idle = std::chrono::steady_clock::now() - last_request;
  if (idle < std::chrono::milliseconds(1)) {
    std::this_thread::yield();
  } else {
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
}

}  // namespace

int loader_rank_for(int trainer_rank, int world_size, int loaders) {
  return world_size - loaders + trainer_rank % loaders;
}

// ---- client ----

DisaggregatedLoaderClient::DisaggregatedLoaderClient(comm::Communicator& world, int server, int channel)
    : world_(world), server_(server), channel_(channel) {}

Result<std::unique_ptr<DisaggregatedLoaderClient>> DisaggregatedLoaderClient::open(
    comm::Communicator& world, int loaders, const LoaderOptions& options) {
  MS_RETURN_IF_ERROR(check_roles(world, loaders, /*want_loader=*/false));
  const int server = loader_rank_for(world.rank(), world.size(), loaders);
  std::unique_ptr<DisaggregatedLoaderClient> client(
      new DisaggregatedLoaderClient(world, server, next_channel_id()));
  MS_ASSIGN_OR_RETURN(Reply reply, call(world, server,
                                        json{{"op", "open"}, {"channel", client->channel_},
                                             {"options", options_to_json(options)}}));
  const json meta = json::parse(reply.text, nullptr, false);
  if (meta.is_discarded()) return CommError("malformed open reply from loader rank " + std::to_string(server));
  client->opened_ = true;
  client->global_batch_ = options.global_batch;
  client->seq_len_ = meta.value("seq_len", int64_t{0});
  client->vocab_size_ = meta.value("vocab_size", 0);
  client->tokenizer_path_ = meta.value("tokenizer_path", std::string());
  client->micro_per_step_ = meta.value("micro_batches_per_step", 1);
  client->samples_ = meta.value("samples", int64_t{0});
  client->plan_hash_ = meta.value("plan_hash", std::string());
  return client;
}

DisaggregatedLoaderClient::~DisaggregatedLoaderClient() {
  if (!opened_) return;
  Result<Reply> r = call(world_, server_, json{{"op", "close"}, {"channel", channel_}});
  if (!r.ok()) MS_LOG(Error) << "closing loader channel: " << r.status().to_string();
}

Result<MicroBatch> DisaggregatedLoaderClient::next() {
  MS_RETURN_IF_ERROR(deferred_);
  MS_ASSIGN_OR_RETURN(Reply reply, call(world_, server_, json{{"op", "next"}, {"channel", channel_}}));
  ++returned_micro_batches_;
  loader_stop_ = loader_stop_ || reply.stop;
  return std::move(reply.batch);
}

LoaderState DisaggregatedLoaderClient::state() const {
  const int64_t steps = (base_micro_batches_ + returned_micro_batches_) / micro_per_step_;
  return LoaderState{plan_hash_, steps * global_batch_};
}

Status DisaggregatedLoaderClient::restore(const LoaderState& state) {
  MS_RETURN_IF_ERROR(call(world_, server_,
                          json{{"op", "restore"}, {"channel", channel_},
                               {"plan_hash", state.plan_hash}, {"consumed", state.consumed_samples}})
                         .status());
  base_micro_batches_ = state.consumed_samples / global_batch_ * micro_per_step_;
  returned_micro_batches_ = 0;
  deferred_ = Status::OK();
  return Status::OK();
}

void DisaggregatedLoaderClient::reset() {
  deferred_ = call(world_, server_, json{{"op", "reset"}, {"channel", channel_}}).status();
  base_micro_batches_ = 0;
  returned_micro_batches_ = 0;
}

Status finish_disaggregated_loading(comm::Communicator& world, int loaders) {
  MS_RETURN_IF_ERROR(check_roles(world, loaders, /*want_loader=*/false));
  return call(world, loader_rank_for(world.rank(), world.size(), loaders), json{{"op", "finish"}}).status();
}

Status run_loader_server(comm::Communicator& world, int loaders,
                         const std::function<bool()>& stop_requested) {
  MS_RETURN_IF_ERROR(check_roles(world, loaders, /*want_loader=*/true));
  std::vector<int> trainers;
  for (int t = 0; t < world.size() - loaders; ++t) {
    if (loader_rank_for(t, world.size(), loaders) == world.rank()) trainers.push_back(t);
  }
  LoaderServer server;
  std::vector<int64_t> lengths(trainers.size());
  std::vector<comm::Request> pending(trainers.size());
  std::vector<bool> active(trainers.size(), true);
  for (size_t i = 0; i < trainers.size(); ++i) {
    MS_ASSIGN_OR_RETURN(pending[i], world.irecv(&lengths[i], 1, DType::kI64, trainers[i], kRequestTag));
  }
  size_t remaining = trainers.size();
  auto last_request = std::chrono::steady_clock::now();
  while (remaining > 0) {
    bool served = false;
    for (size_t i = 0; i < trainers.size(); ++i) {
      if (!active[i]) continue;
      MS_ASSIGN_OR_RETURN(bool arrived, pending[i].test());
      if (!arrived) continue;
      served = true;
      MS_ASSIGN_OR_RETURN(std::string request, comm::recv_sized_payload(world, trainers[i], kRequestTag, lengths[i]));
      bool finished = false;
      std::string reply = server.handle(trainers[i], request, finished);
      mark_stop(reply, stop_requested && stop_requested());
      MS_RETURN_IF_ERROR(comm::send_sized(world, reply, trainers[i], kReplyTag));
      if (finished) {
        active[i] = false;
        --remaining;
        continue;
      }
      MS_ASSIGN_OR_RETURN(pending[i], world.irecv(&lengths[i], 1, DType::kI64, trainers[i], kRequestTag));
    }
    if (served) {
      last_request = std::chrono::steady_clock::now();
    } else {
      wait_for_requests(last_request);
    }
  }
  return Status::OK();
}

}  // namespace ms::data
