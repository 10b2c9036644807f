#include "policies/eval/transformer_config.hpp"

namespace tierrt::policy {
namespace {

std::vector<ModelConfig> shipped() {
  std::vector<ModelConfig> m;
  // Llama 3.1 model cards: hidden, FFN, heads, KV heads, layers, vocabulary.
  m.push_back({"llama3.1-8b", 4096, 14336, 32, 8, 128, 128, 32, 128256, 0, 0, 0, 0, 0});
  m.push_back({"llama3.1-70b", 8192, 28672, 64, 8, 128, 128, 80, 128256, 0, 0, 0, 0, 0});
  m.push_back({"llama3.1-405b", 16384, 53248, 128, 8, 128, 128, 126, 128256, 0, 0, 0, 0, 0});
  // DeepSeek-V3: 61 layers (3 dense, FFN 18432), 128 heads (q/k 192 = 128 + 64 rope,
  // v 128), 256 routed experts top-8 plus 1 shared, expert FFN 2048.
  m.push_back({"deepseek-v3", 7168, 18432, 128, 128, 192, 128, 61, 129280, 256, 8, 1, 2048, 3});
  return m;
}

}  // namespace

std::optional<ModelConfig> find_model(std::string_view name) {
  for (auto& m : shipped())
    if (m.name == name) return m;
  return std::nullopt;
}

std::vector<std::string> model_names() {
  std::vector<std::string> out;
  for (auto& m : shipped()) out.push_back(m.name);
  return out;
}

RunShape default_shape(const ModelConfig& model) {
  RunShape s;
  if (model.name == "llama3.1-8b") {
    s.tp = 1;
  } else if (model.name == "deepseek-v3") {
    // As trained: experts spread over 64 ranks (4 routed experts per rank per layer).
    s.seq = 4096;
    s.tp = 8;
    s.ep = 64;
  } else {
    s.tp = 8;
  }
  return s;
}

}  // namespace tierrt::policy
