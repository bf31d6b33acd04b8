// Disaggregated loading (MegaScale-Data's core idea): dedicated loader ranks, the last K ranks
// of the world (the Mesh order's `loaders`), own the plans, the per-source dataset readers and
// the prefetch threads, and build ready micro-batches; trainer ranks receive them over MPI and
// hold no dataset state or file handles. Trainer t (world rank t < world - K) is served by
// loader rank (world - K) + t % K.
//
// Protocol (one request, one reply, on the trainer's MPI thread): a request is an int64 length
// then that many bytes (op, channel, LoaderOptions or LoaderState as JSON); a reply is an int64
// length then bytes: status code, message, and for a micro-batch its header and the int32
// inputs and targets. A trainer may open several channels (train and validation); each is a
// Loader on the server, so the batches are exactly those of a local Loader with the same options.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "comm/communicator.h"
#include "core/status.h"
#include "data/loader.h"

namespace ms::data {

// World rank of the loader rank that serves trainer `trainer_rank`.
int loader_rank_for(int trainer_rank, int world_size, int loaders);

class DisaggregatedLoaderClient : public BatchSource {
 public:
  // Asks this trainer's loader rank to open a Loader with `options` and returns a client for it.
  // `world` must outlive the client and is used only from the calling thread. The server's open
  // error (missing plan, changed dataset, bad batch sizes) comes back as this call's error.
  static Result<std::unique_ptr<DisaggregatedLoaderClient>> open(comm::Communicator& world,
                                                                 int loaders,
                                                                 const LoaderOptions& options);
  // Closes the channel on the server (errors are logged); nothing when the open failed.
  ~DisaggregatedLoaderClient() override;

  Result<MicroBatch> next() override;
  LoaderState state() const override;
  Status restore(const LoaderState& state) override;
  void reset() override;

  int64_t seq_len() const override { return seq_len_; }
  int32_t vocab_size() const override { return vocab_size_; }
  const std::string& tokenizer_path() const override { return tokenizer_path_; }
  int micro_batches_per_step() const override { return micro_per_step_; }
  int64_t samples_in_split() const override { return samples_; }
  int server_rank() const { return server_; }
  // The loader rank reported a stop request (its stop_requested() in run_loader_server) in a
  // reply to next(); stays true once seen.
  bool loader_stop_requested() const { return loader_stop_; }

 private:
  DisaggregatedLoaderClient(comm::Communicator& world, int server, int channel);

  comm::Communicator& world_;
  int server_;
  int channel_;
  int64_t global_batch_ = 0;
  int64_t seq_len_ = 0;
  int32_t vocab_size_ = 0;
  std::string tokenizer_path_;
  int micro_per_step_ = 1;
  int64_t samples_ = 0;
  std::string plan_hash_;
  int64_t returned_micro_batches_ = 0;  // since the last restore/reset, in micro-batch units
  int64_t base_micro_batches_ = 0;
  Status deferred_;  // a failed reset(), reported by the next next()
  bool opened_ = false;
  bool loader_stop_ = false;  // the server opened the channel (so the destructor closes it)
};

// Tells this trainer's loader rank that it will send no more requests. Every trainer calls it
// once at the end, after destroying its clients.
Status finish_disaggregated_loading(comm::Communicator& world, int loaders);

// The loop of a loader rank: serves its trainers' requests until every one of them called
// finish_disaggregated_loading. Must be called on a loader rank (world.rank() >= world - K).
// When `stop_requested` returns true (a signal reached the loader rank) every later reply
// says so, and the trainers' clients report it (loader_stop_requested) so they can stop; the
// server still serves until they finish.
Status run_loader_server(comm::Communicator& world, int loaders,
                         const std::function<bool()>& stop_requested = {});

}  // namespace ms::data
