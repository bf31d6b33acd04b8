// Plan file writing and validated reading. See plan.h and docs/formats/plan.md for the layout.
#include "data/plan.h"

#include <algorithm>
#include <cassert>
#include <cstring>
#include <map>
#include <nlohmann/json.hpp>
#include <tuple>

#include "core/buffer.h"
#include "core/crc32c.h"
#include "io/atomic_file.h"
#include "io/bulk_writer.h"
#include "io/mapping_guard.h"

namespace ms::data {

namespace {

using nlohmann::json;
using nlohmann::ordered_json;

constexpr uint32_t kNoSource = 0xFFFFFFFFu;

uint32_t element_bytes(PlanSection kind) {
  switch (kind) {
    case PlanSection::kBlendSource: return 2;
    case PlanSection::kSequenceOrder: return 4;
    case PlanSection::kBlendIndex:
    case PlanSection::kStreamEnd: return 8;
  }
  return 0;
}

// Header field offsets (docs/formats/plan.md).
constexpr size_t kVersionAt = 8, kHeaderBytesAt = 12, kFileSizeAt = 16, kMetaOffsetAt = 24,
                 kMetaLengthAt = 32, kTableOffsetAt = 40, kSectionCountAt = 48,
                 kPayloadCrcAt = 52, kHeaderCrcAt = 56;

template <typename T>
void put(std::string& out, size_t at, T value) {
  std::memcpy(out.data() + at, &value, sizeof(T));
}
template <typename T>
T get(std::span<const uint8_t> bytes, size_t at) {
  T value;
  std::memcpy(&value, bytes.data() + at, sizeof(T));
  return value;
}

uint64_t align8(uint64_t n) { return (n + 7) & ~uint64_t{7}; }

std::string hex32(uint32_t v) {
  char text[9];
  std::snprintf(text, sizeof(text), "%08x", v);
  return text;
}

// The plan's hash as Plan::hash() gives it, from the header's two crcs.
std::string plan_hash(std::span<const uint8_t> header) {
  return hex32(get<uint32_t>(header, kPayloadCrcAt)) + hex32(get<uint32_t>(header, kHeaderCrcAt));
}

ordered_json counts_to_json(const PlanSplitCounts& c) {
  return ordered_json{{"documents", c.documents}, {"sequences", c.sequences},
                      {"tokens", c.tokens},       {"samples", c.samples},
                      {"epochs", c.epochs}};
}

std::string info_to_json(const PlanInfo& info) {
  ordered_json j;
  j["format"] = "ms-data plan";
  j["version"] = kPlanFormatVersion;
  j["toolkit_version"] = info.toolkit_version;
  j["git_revision"] = info.git_revision;
  j["seq_len"] = info.seq_len;
  j["seed"] = info.seed;
  j["validation_fraction"] = info.validation_fraction;
  j["samples"] = {{"train", info.samples[0]}, {"validation", info.samples[1]}};
  j["sources"] = ordered_json::array();
  for (const PlanSource& s : info.sources) {
    j["sources"].push_back({{"name", s.name},
                            {"prefix", s.prefix},
                            {"content_hash", s.content_hash},
                            {"dataset_sequences", s.dataset_sequences},
                            {"weight", s.weight},
                            {"vocab_size", s.vocab_size},
                            {"tokenizer_path", s.tokenizer_path},
                            {"tokenizer_hash", s.tokenizer_hash},
                            {"train", counts_to_json(s.splits[0])},
                            {"validation", counts_to_json(s.splits[1])}});
  }
  j["schedule"] = ordered_json::array();
  for (const PlanPhase& p : info.schedule) {
    j["schedule"].push_back({{"at_sample", p.at_sample}, {"weights", p.weights}});
  }
  return j.dump();
}

std::string encode_table(const std::vector<PlanSectionEntry>& sections) {
  std::string table(sections.size() * kPlanSectionEntryBytes, '\0');
  for (size_t i = 0; i < sections.size(); ++i) {
    const PlanSectionEntry& e = sections[i];
    const size_t at = i * kPlanSectionEntryBytes;
    put(table, at, e.kind);
    put(table, at + 4, e.split);
    put(table, at + 8, e.source);
    put(table, at + 12, e.elem_bytes);
    put(table, at + 16, e.offset);
    put(table, at + 24, e.count);
  }
  return table;
}

std::string encode_header(uint64_t file_size, uint64_t meta_offset, uint64_t meta_length,
                          uint64_t table_offset, uint32_t section_count, uint32_t payload_crc) {
  std::string header(kPlanHeaderBytes, '\0');
  std::memcpy(header.data(), kPlanMagic.data(), kPlanMagic.size());
  put(header, kVersionAt, kPlanFormatVersion);
  put(header, kHeaderBytesAt, static_cast<uint32_t>(kPlanHeaderBytes));
  put(header, kFileSizeAt, file_size);
  put(header, kMetaOffsetAt, meta_offset);
  put(header, kMetaLengthAt, meta_length);
  put(header, kTableOffsetAt, table_offset);
  put(header, kSectionCountAt, section_count);
  put(header, kPayloadCrcAt, payload_crc);
  put(header, kHeaderCrcAt, crc32c(header.data(), kHeaderCrcAt));
  return header;
}

}  // namespace

// ---- writing ----

// The first section starts at the second block, so the header's block can be written again on
// its own, through a direct writer too, once the crcs are known.
constexpr uint64_t kFirstSectionOffset = io::kDirectIoAlignment;

PlanFileWriter::PlanFileWriter(std::unique_ptr<io::AtomicFileWriter> file,
                               std::unique_ptr<io::BulkWriter> out)
    : file_(std::move(file)), out_(std::move(out)) {}

PlanFileWriter::~PlanFileWriter() = default;

Result<std::unique_ptr<PlanFileWriter>> PlanFileWriter::create(const std::string& path) {
  return create(io::default_env(), path);
}

Result<std::unique_ptr<PlanFileWriter>> PlanFileWriter::create(io::Env& env,
                                                               const std::string& path) {
  MS_ASSIGN_OR_RETURN(std::unique_ptr<io::AtomicFileWriter> file,
                      io::AtomicFileWriter::create(env, path));
  io::BulkWriter::Options options;
  options.direct = true;
  // Flushed to the disk in stages while the plan is built, so the commit's fsync waits only for
  // the tail (docs/bench/data-plan.md).
  options.sync_every_bytes = 4 * options.piece_bytes;
  MS_ASSIGN_OR_RETURN(std::unique_ptr<io::BulkWriter> out,
                      io::BulkWriter::start(file->file(), std::move(options)));
  std::unique_ptr<PlanFileWriter> writer(new PlanFileWriter(std::move(file), std::move(out)));
  // The header's block: zeros until finish(); the payload crc starts after the header.
  const std::string zeros(kFirstSectionOffset, '\0');
  writer->crc_ = crc32c(zeros.data() + kPlanHeaderBytes, zeros.size() - kPlanHeaderBytes);
  MS_RETURN_IF_ERROR(writer->out_->append_copy(zeros));
  return writer;
}

void PlanFileWriter::close_section() {
  if (open_ < 0) return;
  PlanSectionEntry& e = sections_[static_cast<size_t>(open_)];
  e.count = (out_->offset() - e.offset) / e.elem_bytes;
  open_ = -1;
}

Status PlanFileWriter::pad_to_8() {
  const uint64_t offset = out_->offset();
  return append_copy(std::string(static_cast<size_t>(align8(offset) - offset), '\0'));
}

Status PlanFileWriter::append_copy(std::string_view data) {
  crc_ = crc32c(data.data(), data.size(), crc_);
  return out_->append_copy(data);
}

Status PlanFileWriter::begin_section(PlanSection kind, int split, uint32_t source) {
  close_section();
  MS_RETURN_IF_ERROR(pad_to_8());
  const bool blend = kind == PlanSection::kBlendSource || kind == PlanSection::kBlendIndex;
  sections_.push_back({static_cast<uint32_t>(kind), static_cast<uint32_t>(split),
                       blend ? kNoSource : source, element_bytes(kind), out_->offset(), 0});
  open_ = static_cast<int>(sections_.size()) - 1;
  return Status::OK();
}

Status PlanFileWriter::append_bytes(std::span<const std::byte> bytes) {
  assert(open_ >= 0 && bytes.size() % sections_[static_cast<size_t>(open_)].elem_bytes == 0);
  return append_copy({reinterpret_cast<const char*>(bytes.data()), bytes.size()});
}

Result<PlanFileSummary> PlanFileWriter::finish(const PlanInfo& info) {
  close_section();
  if (sections_.size() != 4 + 4 * info.sources.size()) {
    return FailedPrecondition("plan '" + file_->path() + "': " + std::to_string(sections_.size()) +
                              " sections written for " + std::to_string(info.sources.size()) +
                              " sources");
  }
  const std::string meta = info_to_json(info);
  MS_RETURN_IF_ERROR(pad_to_8());
  const uint64_t meta_offset = out_->offset();
  MS_RETURN_IF_ERROR(append_copy(meta));
  MS_RETURN_IF_ERROR(pad_to_8());
  const uint64_t table_offset = out_->offset();
  MS_RETURN_IF_ERROR(append_copy(encode_table(sections_)));
  MS_RETURN_IF_ERROR(out_->finish());
  const uint64_t file_size = out_->offset();
  const std::string header =
      encode_header(file_size, meta_offset, meta.size(), table_offset,
                    static_cast<uint32_t>(sections_.size()), crc_);
  // The header's whole block from aligned memory, as a direct writer needs.
  MS_ASSIGN_OR_RETURN(Buffer block, Buffer::allocate(kFirstSectionOffset, io::kDirectIoAlignment));
  std::memset(block.data(), 0, block.size());
  std::memcpy(block.data(), header.data(), header.size());
  MS_RETURN_IF_ERROR(file_->file().write_at(0, block.bytes()));
  MS_RETURN_IF_ERROR(file_->commit());
  return PlanFileSummary{
      plan_hash({reinterpret_cast<const uint8_t*>(header.data()), header.size()}), file_size};
}

Result<PlanFileSummary> write_plan_file(const std::string& path, const PlanInfo& info,
                                        const std::array<PlanSplitArrays, 2>& splits) {
  return write_plan_file(io::default_env(), path, info, splits);
}

Result<PlanFileSummary> write_plan_file(io::Env& env, const std::string& path, const PlanInfo& info,
                                        const std::array<PlanSplitArrays, 2>& splits) {
  MS_ASSIGN_OR_RETURN(std::unique_ptr<PlanFileWriter> out, PlanFileWriter::create(env, path));
  for (int split = 0; split < 2; ++split) {
    const PlanSplitArrays& a = splits[split];
    MS_RETURN_IF_ERROR(out->begin_section(PlanSection::kBlendIndex, split));
    MS_RETURN_IF_ERROR(out->append(std::span<const uint64_t>(a.blend_index)));
    MS_RETURN_IF_ERROR(out->begin_section(PlanSection::kBlendSource, split));
    MS_RETURN_IF_ERROR(out->append(std::span<const uint16_t>(a.blend_source)));
  }
  for (int split = 0; split < 2; ++split) {
    const PlanSplitArrays& a = splits[split];
    for (uint32_t s = 0; s < a.sequence_order.size(); ++s) {
      MS_RETURN_IF_ERROR(out->begin_section(PlanSection::kSequenceOrder, split, s));
      MS_RETURN_IF_ERROR(out->append(std::span<const uint32_t>(a.sequence_order[s])));
      MS_RETURN_IF_ERROR(out->begin_section(PlanSection::kStreamEnd, split, s));
      MS_RETURN_IF_ERROR(out->append(std::span<const uint64_t>(a.stream_end[s])));
    }
  }
  return out->finish(info);
}

// ---- reading ----

struct Plan::Arrays {
  std::array<std::span<const uint16_t>, 2> blend_source;
  std::array<std::span<const uint64_t>, 2> blend_index;
  std::array<std::vector<std::span<const uint32_t>>, 2> sequence_order;
  std::array<std::vector<std::span<const uint64_t>>, 2> stream_end;
};

namespace {

Status corrupt(const std::string& name, const std::string& what) {
  return Corruption("plan '" + name + "': " + what);
}

Status check_header(std::span<const uint8_t> bytes, const std::string& name) {
  if (bytes.size() < kPlanHeaderBytes) {
    return corrupt(name, "truncated: " + std::to_string(bytes.size()) +
                             " bytes, shorter than the 64-byte header");
  }
  if (std::memcmp(bytes.data(), kPlanMagic.data(), kPlanMagic.size()) != 0) {
    return corrupt(name, "bad magic at byte 0 (not a plan written by 'ms-data plan')");
  }
  const uint32_t version = get<uint32_t>(bytes, kVersionAt);
  if (version > kPlanFormatVersion || version == 0) {
    return FailedPrecondition("plan '" + name + "': format version " + std::to_string(version) +
                              " is not supported by this build (reads up to " +
                              std::to_string(kPlanFormatVersion) + "); re-plan or upgrade");
  }
  if (get<uint32_t>(bytes, kHeaderCrcAt) != crc32c(bytes.data(), kHeaderCrcAt)) {
    return corrupt(name, "header crc32c mismatch (bytes 0..55 are damaged)");
  }
  if (get<uint32_t>(bytes, kHeaderBytesAt) != kPlanHeaderBytes) {
    return corrupt(name, "header size field is not 64");
  }
  const uint64_t file_size = get<uint64_t>(bytes, kFileSizeAt);
  if (file_size != bytes.size()) {
    return corrupt(name, (bytes.size() < file_size ? "truncated: " : "trailing bytes: ") +
                             std::string("header says ") + std::to_string(file_size) +
                             " bytes, file has " + std::to_string(bytes.size()));
  }
  const uint32_t crc = crc32c(bytes.data() + kPlanHeaderBytes, bytes.size() - kPlanHeaderBytes);
  if (crc != get<uint32_t>(bytes, kPayloadCrcAt)) {
    return corrupt(name, "payload crc32c mismatch (the file is damaged after byte 64)");
  }
  return Status::OK();
}

// A byte range [offset, offset + length) that must lie inside the file.
bool in_file(uint64_t offset, uint64_t length, uint64_t size) {
  return offset <= size && length <= size - offset;
}

PlanSplitCounts counts_from_json(const json& j) {
  return PlanSplitCounts{j.at("documents").get<uint64_t>(), j.at("sequences").get<uint64_t>(),
                         j.at("tokens").get<uint64_t>(), j.at("samples").get<uint64_t>(),
                         j.at("epochs").get<uint64_t>()};
}

PlanSource source_from_json(const json& j) {
  PlanSource s;
  s.name = j.at("name").get<std::string>();
  s.prefix = j.at("prefix").get<std::string>();
  s.content_hash = j.at("content_hash").get<std::string>();
  s.dataset_sequences = j.at("dataset_sequences").get<uint64_t>();
  s.weight = j.at("weight").get<double>();
  s.vocab_size = j.at("vocab_size").get<int64_t>();
  s.tokenizer_path = j.at("tokenizer_path").get<std::string>();
  s.tokenizer_hash = j.at("tokenizer_hash").get<std::string>();
  s.splits[0] = counts_from_json(j.at("train"));
  s.splits[1] = counts_from_json(j.at("validation"));
  return s;
}

Result<PlanInfo> info_from_json(std::string_view text, const std::string& name) {
  const json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return corrupt(name, "description block is not JSON");
  try {
    PlanInfo info;
    info.toolkit_version = j.at("toolkit_version").get<std::string>();
    info.git_revision = j.at("git_revision").get<std::string>();
    info.seq_len = j.at("seq_len").get<int64_t>();
    info.seed = j.at("seed").get<int64_t>();
    info.validation_fraction = j.at("validation_fraction").get<double>();
    info.samples[0] = j.at("samples").at("train").get<int64_t>();
    info.samples[1] = j.at("samples").at("validation").get<int64_t>();
    for (const json& s : j.at("sources")) info.sources.push_back(source_from_json(s));
    for (const json& p : j.at("schedule")) {
      info.schedule.push_back(
          {p.at("at_sample").get<int64_t>(), p.at("weights").get<std::vector<double>>()});
    }
    return info;
  } catch (const json::exception& e) {
    return corrupt(name, std::string("description block: ") + e.what());
  }
}

Status check_info(const PlanInfo& info, const std::string& name) {
  if (info.seq_len < 1 || info.seq_len > kMaxPlanSeqLen) {
    return corrupt(name, "seq_len " + std::to_string(info.seq_len) + " is outside [1, " +
                             std::to_string(kMaxPlanSeqLen) + "]");
  }
  if (info.sources.empty() || info.sources.size() > 65535) {
    return corrupt(name, "source count " + std::to_string(info.sources.size()) +
                             " outside [1, 65535]");
  }
  if (info.samples[0] < 0 || info.samples[1] < 0) return corrupt(name, "negative sample count");
  if (info.schedule.empty() || info.schedule[0].at_sample != 0) {
    return corrupt(name, "schedule does not start at sample 0");
  }
  for (size_t i = 0; i < info.schedule.size(); ++i) {
    if (info.schedule[i].weights.size() != info.sources.size()) {
      return corrupt(name, "schedule phase " + std::to_string(i) + " has " +
                               std::to_string(info.schedule[i].weights.size()) +
                               " weights for " + std::to_string(info.sources.size()) + " sources");
    }
    if (i > 0 && info.schedule[i].at_sample <= info.schedule[i - 1].at_sample) {
      return corrupt(name, "schedule phases are not increasing");
    }
  }
  return Status::OK();
}

}  // namespace

Plan::~Plan() = default;

Result<std::shared_ptr<const Plan>> Plan::open(const std::string& path) {
  // Watched, so a plan rewritten in place while mapped is an error naming it, not SIGBUS.
  Result<std::unique_ptr<io::MappedFile>> file = io::MappedFile::open(path, "plan");
  if (file.status().code() == StatusCode::kNotFound) {
    return NotFound("plan '" + path + "' does not exist; create it with 'ms-data plan'");
  }
  MS_RETURN_IF_ERROR(file.status());
  std::shared_ptr<Plan> plan(new Plan());
  plan->bytes_ = {(*file)->data(), static_cast<size_t>((*file)->size())};
  plan->storage_ = std::shared_ptr<const io::MappedFile>(std::move(*file));
  plan->path_ = path;
  MS_RETURN_IF_ERROR(plan->parse(path));
  return std::shared_ptr<const Plan>(std::move(plan));
}

Result<std::shared_ptr<const Plan>> Plan::from_bytes(std::string bytes, const std::string& name) {
  std::shared_ptr<Plan> plan(new Plan());
  auto owned = std::make_shared<std::string>(std::move(bytes));
  plan->bytes_ = {reinterpret_cast<const uint8_t*>(owned->data()), owned->size()};
  plan->storage_ = owned;
  plan->path_ = name;
  MS_RETURN_IF_ERROR(plan->parse(name));
  return std::shared_ptr<const Plan>(std::move(plan));
}

namespace {

// Reads the section table and checks every entry's bounds, alignment, kind and element size,
// and that each (kind, split, source) appears exactly once.
Result<std::map<std::tuple<uint32_t, uint32_t, uint32_t>, PlanSectionEntry>> read_table(
    std::span<const uint8_t> bytes, size_t num_sources, const std::string& name) {
  const uint64_t table_offset = get<uint64_t>(bytes, kTableOffsetAt);
  const uint64_t count = get<uint32_t>(bytes, kSectionCountAt);
  if (count != 4 + 4 * num_sources) {
    return corrupt(name, "section table has " + std::to_string(count) + " entries, expected " +
                             std::to_string(4 + 4 * num_sources));
  }
  if (!in_file(table_offset, count * kPlanSectionEntryBytes, bytes.size())) {
    return corrupt(name, "section table at byte " + std::to_string(table_offset) +
                             " runs past the end of the file");
  }
  std::map<std::tuple<uint32_t, uint32_t, uint32_t>, PlanSectionEntry> table;
  for (uint64_t i = 0; i < count; ++i) {
    const size_t at = table_offset + i * kPlanSectionEntryBytes;
    const PlanSectionEntry e{get<uint32_t>(bytes, at), get<uint32_t>(bytes, at + 4),
                         get<uint32_t>(bytes, at + 8), get<uint32_t>(bytes, at + 12),
                         get<uint64_t>(bytes, at + 16), get<uint64_t>(bytes, at + 24)};
    const std::string where = "section " + std::to_string(i) + " (table byte " + std::to_string(at) + ")";
    const bool blend = e.kind == 1 || e.kind == 2;
    if (e.kind < 1 || e.kind > 4 || e.split > 1 || (blend != (e.source == kNoSource)) ||
        (!blend && e.source >= num_sources)) {
      return corrupt(name, where + ": unknown kind/split/source");
    }
    if (e.elem_bytes != element_bytes(static_cast<PlanSection>(e.kind)) || e.offset % 8 != 0 ||
        e.count > bytes.size() || !in_file(e.offset, e.count * e.elem_bytes, bytes.size())) {
      return corrupt(name, where + ": misaligned or out of the file's bounds");
    }
    if (!table.emplace(std::make_tuple(e.kind, e.split, e.source), e).second) {
      return corrupt(name, where + ": duplicate section");
    }
  }
  return table;
}

template <typename T>
std::span<const T> section_span(std::span<const uint8_t> bytes, const PlanSectionEntry& e) {
  return {reinterpret_cast<const T*>(bytes.data() + e.offset), static_cast<size_t>(e.count)};
}

// The blend of `split` must assign each source the consecutive indices 0, 1, 2, ... and use
// exactly the number of samples the description records for it.
Status check_blend(const PlanInfo& info, int split, std::span<const uint16_t> sources,
                   std::span<const uint64_t> indices, const std::string& name) {
  const std::string split_text(split_name(static_cast<Split>(split)));
  if (sources.size() != static_cast<size_t>(info.samples[split]) || indices.size() != sources.size()) {
    return corrupt(name, split_text + " blend arrays do not hold " +
                             std::to_string(info.samples[split]) + " samples");
  }
  std::vector<uint64_t> next(info.sources.size(), 0);
  for (size_t i = 0; i < sources.size(); ++i) {
    if (sources[i] >= info.sources.size() || indices[i] != next[sources[i]]) {
      return corrupt(name, split_text + " sample " + std::to_string(i) +
                               " refers to a source or source sample out of order");
    }
    ++next[sources[i]];
  }
  for (size_t s = 0; s < next.size(); ++s) {
    if (next[s] != info.sources[s].splits[split].samples) {
      return corrupt(name, "source '" + info.sources[s].name + "' is used " +
                               std::to_string(next[s]) + " times in the " + split_text +
                               " blend, the description says " +
                               std::to_string(info.sources[s].splits[split].samples));
    }
  }
  return Status::OK();
}

// A source's stream: one entry per (epoch, sequence), sequences inside the dataset, ends
// non-decreasing and long enough for the samples the blend takes from it.
Status check_stream(const PlanInfo& info, int split, size_t source,
                    std::span<const uint32_t> order, std::span<const uint64_t> ends,
                    const std::string& name) {
  const PlanSource& s = info.sources[source];
  const PlanSplitCounts& c = s.splits[split];
  const std::string what = "source '" + s.name + "' " + std::string(split_name(static_cast<Split>(split)));
  if (c.epochs > 0 && c.sequences > (UINT64_MAX / c.epochs)) return corrupt(name, what + ": epoch count overflows");
  if (order.size() != c.epochs * c.sequences || ends.size() != order.size()) {
    return corrupt(name, what + " stream holds " + std::to_string(order.size()) +
                             " entries, expected epochs x sequences = " +
                             std::to_string(c.epochs * c.sequences));
  }
  uint64_t previous = 0;
  for (size_t i = 0; i < order.size(); ++i) {
    if (order[i] >= s.dataset_sequences || ends[i] < previous) {
      return corrupt(name, what + " stream entry " + std::to_string(i) + " is out of range");
    }
    previous = ends[i];
  }
  // Each epoch concatenates the split's sequences once, so the stream holds epochs x tokens.
  if ((c.epochs > 0 && c.tokens > UINT64_MAX / c.epochs) || previous != c.epochs * c.tokens) {
    return corrupt(name, what + " stream ends at token " + std::to_string(previous) +
                             ", not at epochs x tokens = " + std::to_string(c.epochs) + " x " +
                             std::to_string(c.tokens));
  }
  const uint64_t needed = c.samples == 0 ? 0 : c.samples * static_cast<uint64_t>(info.seq_len) + 1;
  if (c.samples > UINT64_MAX / static_cast<uint64_t>(info.seq_len) || previous < needed) {
    return corrupt(name, what + " stream has " + std::to_string(previous) +
                             " tokens, fewer than its samples need");
  }
  return Status::OK();
}

}  // namespace

Status Plan::parse(const std::string& name) {
  MS_RETURN_IF_ERROR(check_header(bytes_, name));
  const uint64_t meta_offset = get<uint64_t>(bytes_, kMetaOffsetAt);
  const uint64_t meta_length = get<uint64_t>(bytes_, kMetaLengthAt);
  if (!in_file(meta_offset, meta_length, bytes_.size())) {
    return corrupt(name, "description block runs past the end of the file");
  }
  const std::string_view meta(reinterpret_cast<const char*>(bytes_.data() + meta_offset), meta_length);
  MS_ASSIGN_OR_RETURN(info_, info_from_json(meta, name));
  MS_RETURN_IF_ERROR(check_info(info_, name));
  MS_ASSIGN_OR_RETURN(auto table, read_table(bytes_, info_.sources.size(), name));
  arrays_ = std::make_unique<Arrays>();
  for (uint32_t split = 0; split < 2; ++split) {
    arrays_->blend_source[split] = section_span<uint16_t>(bytes_, table.at({1, split, kNoSource}));
    arrays_->blend_index[split] = section_span<uint64_t>(bytes_, table.at({2, split, kNoSource}));
    MS_RETURN_IF_ERROR(check_blend(info_, static_cast<int>(split), arrays_->blend_source[split],
                                   arrays_->blend_index[split], name));
    for (uint32_t s = 0; s < info_.sources.size(); ++s) {
      arrays_->sequence_order[split].push_back(section_span<uint32_t>(bytes_, table.at({3, split, s})));
      arrays_->stream_end[split].push_back(section_span<uint64_t>(bytes_, table.at({4, split, s})));
      MS_RETURN_IF_ERROR(check_stream(info_, static_cast<int>(split), s,
                                      arrays_->sequence_order[split].back(),
                                      arrays_->stream_end[split].back(), name));
    }
  }
  hash_ = plan_hash(bytes_);
  return Status::OK();
}

SampleRef Plan::sample(Split split, int64_t global) const {
  const int s = static_cast<int>(split);
  assert(global >= 0 && global < info_.samples[s]);
  return {arrays_->blend_source[s][global], arrays_->blend_index[s][global]};
}

void Plan::sample_ranges(Split split, SampleRef ref, std::vector<TokenRange>& out) const {
  const std::span<const uint32_t> order = sequence_order(split, ref.source);
  const std::span<const uint64_t> ends = stream_end(split, ref.source);
  const uint64_t seq_len = static_cast<uint64_t>(info_.seq_len);
  uint64_t position = ref.index * seq_len;
  uint64_t remaining = seq_len + 1;
  size_t entry = std::upper_bound(ends.begin(), ends.end(), position) - ends.begin();
  while (remaining > 0) {
    assert(entry < ends.size());
    const uint64_t begin = entry == 0 ? 0 : ends[entry - 1];
    const uint64_t take = std::min(remaining, ends[entry] - position);
    if (take > 0) out.push_back({order[entry], position - begin, take});
    position += take;
    remaining -= take;
    ++entry;
  }
}

std::span<const uint32_t> Plan::sequence_order(Split split, uint32_t source) const {
  return arrays_->sequence_order[static_cast<int>(split)][source];
}

std::span<const uint64_t> Plan::stream_end(Split split, uint32_t source) const {
  return arrays_->stream_end[static_cast<int>(split)][source];
}

}  // namespace ms::data
