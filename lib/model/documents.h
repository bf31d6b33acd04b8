// Documents inside packed samples (train.document_mask, docs/model.md "Document masking"). A
// packed sample is documents back to back, each ending with the end-of-document token (the one
// ms-data build appends); the token belongs to the document it ends, and the next token starts
// a new one. From the tokens alone this gives every token a document id (the count of
// end-of-document tokens before it in its row) and its position inside its document, which the
// attention mask (ops/attention.h's AttentionMask) and per-document rotary positions read.
#pragma once

#include <cstdint>
#include <span>

namespace ms::model {

// Document masking as the model applies it. eod_id is the end-of-document token id.
struct DocumentMask {
  bool enabled = false;    // attention stays inside each document
  bool positions = false;  // rotary positions restart at 0 at each document (needs enabled)
  int32_t eod_id = -1;
};

// tokens: (B, T) -> doc: (B, T) document index within the row, pos: (B, T) position within the
// document (either output may be null).
void document_layout(const int32_t* tokens, int64_t B, int64_t T, int32_t eod_id, int32_t* doc,
                     int64_t* pos);

// The position at which the document of the token after `tokens` starts, given that these
// tokens sit at positions start.. and that the document of tokens[0] started at doc_start:
// just past the last end-of-document token among them, else doc_start. What a server keeps
// per sequence between cached passes (model/inference.h's CachedChunk::doc_start).
int64_t next_document_start(std::span<const int32_t> tokens, int64_t start, int64_t doc_start,
                            int32_t eod_id);

}  // namespace ms::model
