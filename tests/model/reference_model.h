// A double-precision reference of the Transformer's loss, composed from the reference operators
// of tests/ops/reference_ops.h and reading the model's own parameter table by Hugging Face name.
// The whole-model gradient test differentiates it by central differences.
//
// MoE routing is discontinuous in the parameters, so the reference records each layer's expert
// choice at the unperturbed point and can replay it (frozen routing): the finite differences
// then measure the derivative of the piece the analytic gradient belongs to.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "config/run_config.h"
#include "model/transformer.h"
#include "tests/ops/reference_ops.h"

namespace ms::test {

class ReferenceModel {
 public:
  ReferenceModel(const config::ModelConfig& cfg, const std::vector<model::Parameter>& params)
      : c_(cfg) {
    for (const model::Parameter& p : params) {
      const float* v = p.value.data<float>();
      weights_[p.name] = ref::Vec(v, v + p.value.numel());
    }
  }

  ref::Vec& weight(const std::string& name) { return weights_.at(name); }

  // Document masking (docs/model.md): a document ends with (and includes) mask.eod_id; a token
  // attends only inside its document, and with mask.positions its rotary position counts from
  // its document's first token.
  void set_documents(const model::DocumentMask& mask) { docs_ = mask; }

  // Mean cross-entropy + aux_loss_coef * mean aux loss + z_loss_coef * mean router z-loss
  // over (B, T) tokens. With model.moe.capacity_factor each expert keeps at most
  // ceil(f * n * k / E) of its assignments, the earliest tokens first. When `freeze` is set,
  // routing (and the drops) recorded by the last unfrozen call is replayed.
  double loss(const std::vector<int32_t>& inputs, const std::vector<int32_t>& targets, int64_t B,
              int64_t T, bool freeze);

  // The (B*T, vocab) logits of the last loss() call.
  const ref::Vec& logits() const { return logits_; }
  double last_aux() const { return aux_; }

 private:
  ref::Vec attention(const std::string& p, const ref::Vec& x, int64_t B, int64_t T);
  ref::Vec mlp(const std::string& p, const char* gate, const char* up, const char* down,
               const ref::Vec& x, int64_t n, int64_t f);
  ref::Vec moe(const std::string& p, size_t layer, const ref::Vec& x, int64_t n, bool freeze);
  ref::Vec ffn(const std::string& p, size_t layer, const ref::Vec& x, int64_t n, bool freeze);

  config::ModelConfig c_;
  model::DocumentMask docs_;
  const std::vector<int32_t>* inputs_ = nullptr;  // of the loss() call in progress
  std::map<std::string, ref::Vec> weights_;
  std::vector<std::vector<int32_t>> routing_;
  std::vector<std::vector<bool>> kept_;  // per layer, per (token, slot)
  ref::Vec logits_;
  double aux_ = 0;
  double z_ = 0;
};

}  // namespace ms::test
