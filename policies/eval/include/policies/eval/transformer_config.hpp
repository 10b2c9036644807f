// Published shapes of the models tierrt-replay ships, and the per-run shape
// (sequence, micro-batch, parallelism, dtype, throughput) a synthesized step uses.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tierrt::policy {

struct ModelConfig {
  std::string name;
  std::uint32_t hidden = 0;
  std::uint32_t ffn = 0;           // dense MLP width
  std::uint32_t heads = 0;
  std::uint32_t kv_heads = 0;
  std::uint32_t qk_head_dim = 128;
  std::uint32_t v_head_dim = 128;
  std::uint32_t layers = 0;
  std::uint32_t vocab = 0;
  // Mixture of experts (0 experts: dense). The first `dense_layers` layers stay dense.
  std::uint32_t experts = 0;
  std::uint32_t top_k = 0;
  std::uint32_t shared_experts = 0;
  std::uint32_t expert_ffn = 0;
  std::uint32_t dense_layers = 0;
};

// llama3.1-8b, llama3.1-70b, llama3.1-405b, deepseek-v3 (DeepSeek-V3-like: MLA
// treated as full multi-head attention after up-projection).
std::optional<ModelConfig> find_model(std::string_view name);
std::vector<std::string> model_names();

struct RunShape {
  std::uint32_t seq = 8192;
  std::uint32_t micro_batch = 1;
  std::uint32_t tp = 1;           // tensor (and sequence, and expert) parallel degree
  std::uint32_t ep = 8;           // expert-parallel degree (MoE): experts per rank = experts / ep
  std::uint32_t dp = 8;           // data-parallel ranks the optimizer state is sharded over
  std::uint32_t grad_accum = 1;   // micro-batches per step
  std::uint32_t dtype_bytes = 2;
  double tflops = 600;            // sustained dense throughput per GPU
  double hbm_bytes_per_s = 4.3e12;
};

// The shape tierrt-replay uses for a shipped model unless told otherwise.
RunShape default_shape(const ModelConfig& model);

}  // namespace tierrt::policy
