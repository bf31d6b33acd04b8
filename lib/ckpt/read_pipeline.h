// Private to lib/ckpt: the engine behind read_region and load_tensors. It reads every shard
// that overlaps any of the requested regions exactly once, in file and offset order, on a
// reader thread that stays a few chunks ahead of the caller's thread, which checks the crc32c
// and copies each chunk's overlap into the caller's buffers while the next chunk is read.
//
// Why chunks through a few reused buffers rather than one buffer per shard: a cold load is
// bound by the disk, and everything the caller's thread does between two reads (checksum,
// copy, a fresh buffer's page faults) otherwise adds to it. Reading ahead overlaps that work
// with the disk, and a handful of reused buffers is faulted in once per load instead of once
// per shard (on a VM that hands freed memory back to its host, a first touch costs as much as
// reading the page from disk). Direct reads skip the page cache's copy and its allocations.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "ckpt/manifest.h"
#include "ckpt/regions.h"
#include "core/status.h"
#include "io/env.h"

namespace ms::ckpt {

// One requested region of a tensor, in global coordinates, and where its elements go
// (row-major over `box`, box.numel() elements of the tensor's dtype).
struct ReadTarget {
  const TensorRecord* tensor = nullptr;
  Box box;
  std::span<std::byte> dest;
};

struct ReadPipelineOptions {
  // Read the data files with O_DIRECT where the filesystem allows it (the page cache where not).
  bool direct_io = true;
  // Bytes a raw shard is read in at a time (whole rows of its outermost dimension, so at least
  // one row); a compressed shard is read whole.
  uint64_t chunk_bytes = 16ull << 20;
  // Chunks in memory at once: one the caller works on, the others being read.
  int buffers = 3;
};

// "<path>: tensor "<name>" shard at byte offset <offset> (<length> bytes)": how errors name a
// shard.
std::string describe_shard(const std::string& path, const TensorRecord& t, const ShardRecord& s);

// Corruption, naming the shard, unless its byte range lies inside a file of `file_size` bytes.
Status check_shard_in_file(const std::string& path, const TensorRecord& t, const ShardRecord& s,
                           uint64_t file_size);

// Fills every target's `dest`. The targets' shards must tile them (a manifest that passed
// validation guarantees it; Corruption otherwise). Errors name the file, tensor and shard:
// NotFound / IoError from the files, Corruption for a short file or a checksum or codec
// mismatch. On error the destinations hold an unspecified mix of old and loaded bytes.
Status read_targets(const std::string& step_dir, std::span<const ReadTarget> targets,
                    io::Env& env, const ReadPipelineOptions& options = {});

}  // namespace ms::ckpt
