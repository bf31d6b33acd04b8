// Document ids and in-document positions from end-of-document tokens (model/documents.h).
#include "model/documents.h"

namespace ms::model {

void document_layout(const int32_t* tokens, int64_t B, int64_t T, int32_t eod_id, int32_t* doc,
                     int64_t* pos) {
  for (int64_t b = 0; b < B; ++b) {
    int32_t d = 0;
    int64_t start = 0;
    for (int64_t t = 0; t < T; ++t) {
      const int64_t n = b * T + t;
      if (doc != nullptr) doc[n] = d;
      if (pos != nullptr) pos[n] = t - start;
      if (tokens[n] == eod_id) {
        ++d;
        start = t + 1;
      }
    }
  }
}

int64_t next_document_start(std::span<const int32_t> tokens, int64_t start, int64_t doc_start,
                            int32_t eod_id) {
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i] == eod_id) doc_start = start + static_cast<int64_t>(i) + 1;
  }
  return doc_start;
}

}  // namespace ms::model
