#include "policies/eval/transformer_synth.hpp"

#include <algorithm>
#include <functional>
#include <initializer_list>
#include <random>
#include <vector>

namespace tierrt::policy {
namespace {

constexpr std::uint64_t kWorkspaceBytes = 32ull << 20;  // a cuBLAS-style workspace
constexpr double kMinKernelNs = 3000;                  // launch and tail cost of any kernel

struct Weights {
  BlockId attn = 0, mlp = 0, attn_grad = 0, mlp_grad = 0, optim = 0;
};

// Saved tensors of one layer's forward pass, consumed by its backward pass.
struct LayerSaved {
  BlockId x = 0, n1 = 0, rs1 = 0, q = 0, k = 0, v = 0, o = 0, lse = 0, mid = 0, n2 = 0, rs2 = 0;
  BlockId gate = 0, up = 0, act = 0, prod = 0, router = 0;
  struct Expert { BlockId in = 0, gate = 0, up = 0, act = 0, prod = 0; };
  std::vector<Expert> experts;  // local routed experts, then shared experts
};

class Synth {
 public:
  explicit Synth(const SynthOptions& o) : o_(o), m_(o.model), rng_(o.seed) {}

  Trace run() {
    prologue();
    std::uint32_t seq = o_.shape.seq;
    std::uint32_t step = 0;
    for (std::uint32_t s = 0; s < o_.steps; ++s) {
      if (o_.change_after && s == *o_.change_after) seq = o_.changed_seq;
      if (o_.eval_after && s == *o_.eval_after) eval_step(step++, seq);
      train_step(step++, seq);
    }
    return std::move(out_);
  }

 private:
  // ---- event helpers
  BlockId alloc(std::uint64_t bytes, Role role, std::uint32_t layer) {
    const BlockId id = next_block_++;
    out_.push_back(Event::alloc(id, std::max<std::uint64_t>(bytes, 512)));
    out_.push_back(Event::tag(id, role, layer));
    sizes_.resize(std::max<std::size_t>(sizes_.size(), id + 1));
    sizes_[id] = std::max<std::uint64_t>(bytes, 512);
    return id;
  }
  void free(BlockId b) {
    if (b != 0) out_.push_back(Event::free(b));
  }
  void free_all(std::initializer_list<BlockId> bs) {
    for (BlockId b : bs) free(b);
  }
  // A kernel: time from its FLOPs at the sustained rate, or from the bytes it moves.
  // Memory-bound time counts the step's tensors the kernel touches plus
  // `weight_bytes` of parameters: a GEMM reads its own slice of a layer's weights,
  // not the whole block, while the optimizer streams all of them.
  void launch(double flops, std::initializer_list<BlockId> uses, double weight_bytes = 0) {
    double bytes = weight_bytes;
    for (BlockId b : uses)
      if (b != 0 && b >= first_step_block_) bytes += static_cast<double>(sizes_[b]);
    double ns = std::max({flops / (o_.shape.tflops * 1e12) * 1e9, bytes / o_.shape.hbm_bytes_per_s * 1e9, kMinKernelNs});
    if (o_.duration_jitter > 0)
      ns *= 1 + std::uniform_real_distribution<double>(-o_.duration_jitter, o_.duration_jitter)(rng_);
    const LaunchSeq seq = next_seq_++;
    out_.push_back(Event::launch(seq, static_cast<std::uint64_t>(ns)));
    for (BlockId b : uses)
      if (b != 0) out_.push_back(Event::use(b, seq));
  }
  void noise(std::uint32_t layer) {
    for (std::uint32_t i = 0; i < o_.noise_transients; ++i) {
      const std::uint64_t bytes = std::uniform_int_distribution<std::uint64_t>(64 << 10, 8 << 20)(rng_);
      const BlockId t = alloc(bytes, Role::Temporary, layer);
      launch(0, {t});
      free(t);
    }
  }
  // Independent launches in program order, each adjacent pair swapped with the
  // reorder probability (a swap can carry a launch further along).
  template <class F>
  void maybe_shuffled(std::vector<F> fs) {
    if (o_.reorder_probability > 0)
      for (std::size_t i = 0; i + 1 < fs.size(); ++i)
        if (std::uniform_real_distribution<double>(0, 1)(rng_) < o_.reorder_probability) std::swap(fs[i], fs[i + 1]);
    for (auto& f : fs) f();
  }

  // ---- shapes (per rank: tensor, sequence and expert parallel over tp)
  double tp() const { return o_.shape.tp; }
  std::uint64_t el() const { return o_.shape.dtype_bytes; }
  std::uint32_t local_heads() const { return std::max(1u, m_.heads / o_.shape.tp); }
  std::uint32_t local_kv() const { return std::max(1u, m_.kv_heads / o_.shape.tp); }
  bool moe_layer(std::uint32_t l) const { return m_.experts > 0 && l >= m_.dense_layers; }
  std::uint32_t local_experts() const { return std::max(1u, m_.experts / std::max(1u, o_.shape.ep)); }
  // Tokens each local expert processes: this rank's sequence shard routed top-k,
  // gathered from every rank of the expert-parallel group, balanced over experts.
  double tokens_per_expert(double T) const { return T / tp() * m_.top_k * std::max(1u, o_.shape.ep) / m_.experts; }
  std::uint32_t tag(std::uint32_t micro, std::uint32_t layer) const { return micro * 65536 + layer; }

  std::uint64_t attn_params(std::uint32_t) const {
    const std::uint64_t h = m_.hidden;
    return (h * (std::uint64_t{m_.heads} * m_.qk_head_dim + std::uint64_t{m_.kv_heads} * (m_.qk_head_dim + m_.v_head_dim)) +
            std::uint64_t{m_.heads} * m_.v_head_dim * h) / o_.shape.tp;
  }
  std::uint64_t mlp_params(std::uint32_t l) const {
    const std::uint64_t h = m_.hidden;
    if (!moe_layer(l)) return 3 * h * m_.ffn / o_.shape.tp;
    return std::uint64_t{local_experts()} * 3 * h * m_.expert_ffn +
           3 * h * m_.expert_ffn * m_.shared_experts / o_.shape.tp + h * m_.experts;
  }

  void prologue() {
    workspace_ = alloc(kWorkspaceBytes, Role::Workspace, kNoLayer);
    const std::uint64_t emb = std::uint64_t{m_.vocab} * m_.hidden / o_.shape.tp;
    embed_ = alloc(emb * el(), Role::Weight, kNoLayer);
    head_ = alloc(emb * el(), Role::Weight, kNoLayer);
    embed_grad_ = alloc(emb * el(), Role::Gradient, kNoLayer);
    head_grad_ = alloc(emb * el(), Role::Gradient, kNoLayer);
    // Adam: fp32 master copy and two moments, sharded over data-parallel ranks (ZeRO-1).
    const auto opt = [&](std::uint64_t params) { return params * 12 / std::max(1u, o_.shape.dp); };
    head_optim_ = alloc(opt(2 * emb), Role::OptimizerState, kNoLayer);
    for (std::uint32_t l = 0; l < m_.layers; ++l) {
      Weights w;
      w.attn = alloc(attn_params(l) * el(), Role::Weight, l);
      w.mlp = alloc(mlp_params(l) * el(), Role::Weight, l);
      w.attn_grad = alloc(attn_params(l) * el(), Role::Gradient, l);
      w.mlp_grad = alloc(mlp_params(l) * el(), Role::Gradient, l);
      w.optim = alloc(opt(attn_params(l) + mlp_params(l)), Role::OptimizerState, l);
      weights_.push_back(w);
    }
    first_step_block_ = next_block_;
  }

  double bytes_of(std::initializer_list<BlockId> bs) const {
    double n = 0;
    for (BlockId b : bs) n += static_cast<double>(sizes_[b]);
    return n;
  }

  void train_step(std::uint32_t index, std::uint32_t seq) {
    if (o_.step_markers) out_.push_back(Event::step(index));
    for (std::uint32_t micro = 0; micro < o_.shape.grad_accum; ++micro) {
      if (o_.phase_markers) out_.push_back(Event::phase(Phase::Forward));
      std::vector<LayerSaved> saved;
      BlockId x = forward(micro, seq, true, saved);
      if (o_.phase_markers) out_.push_back(Event::phase(Phase::Backward));
      backward(micro, seq, x, saved);
    }
    if (o_.phase_markers) out_.push_back(Event::phase(Phase::Optimizer));
    for (std::uint32_t l = 0; l < m_.layers; ++l) {
      const Weights& w = weights_[l];
      launch(0, {w.attn, w.mlp, w.attn_grad, w.mlp_grad, w.optim}, bytes_of({w.attn, w.mlp, w.attn_grad, w.mlp_grad, w.optim}));
    }
    launch(0, {head_, head_grad_, embed_, embed_grad_, head_optim_},
           bytes_of({head_, head_grad_, embed_, embed_grad_, head_optim_}));
  }

  void eval_step(std::uint32_t index, std::uint32_t seq) {
    if (o_.step_markers) out_.push_back(Event::step(index));
    if (o_.phase_markers) out_.push_back(Event::phase(Phase::Eval));
    std::vector<LayerSaved> unused;
    BlockId logits = forward(0, seq, false, unused);
    free(logits);
  }

  // Returns the logits; in training, `saved` gets what backward needs.
  BlockId forward(std::uint32_t micro, std::uint32_t seq, bool training, std::vector<LayerSaved>& saved) {
    const double T = static_cast<double>(seq) * o_.shape.micro_batch;
    const std::uint64_t t = static_cast<std::uint64_t>(T);
    const std::uint64_t h = m_.hidden;
    const auto role = [&](Role r) { return training ? r : Role::Temporary; };
    BlockId x = alloc(t * h / o_.shape.tp * el(), role(Role::LayerInput), tag(micro, 0));
    launch(0, {embed_, x});
    for (std::uint32_t l = 0; l < m_.layers; ++l) {
      const Weights& w = weights_[l];
      const std::uint32_t g = tag(micro, l);
      LayerSaved s;
      s.x = x;
      s.n1 = alloc(t * h / o_.shape.tp * el(), role(Role::NormOutput), g);
      s.rs1 = alloc(t / o_.shape.tp * 4, role(Role::NormStats), g);
      launch(0, {s.x, s.n1, s.rs1});
      const std::uint64_t qd = std::uint64_t{local_heads()} * m_.qk_head_dim;
      const std::uint64_t kd = std::uint64_t{local_kv()} * m_.qk_head_dim;
      const std::uint64_t vd = std::uint64_t{local_kv()} * m_.v_head_dim;
      const std::uint64_t od = std::uint64_t{local_heads()} * m_.v_head_dim;
      maybe_shuffled<std::function<void()>>({
          [&] { s.q = alloc(t * qd * el(), role(Role::Query), g); launch(2 * T * h * qd, {s.n1, w.attn, s.q, workspace_}); },
          [&] { s.k = alloc(t * kd * el(), role(Role::Key), g); launch(2 * T * h * kd, {s.n1, w.attn, s.k, workspace_}); },
          [&] { s.v = alloc(t * vd * el(), role(Role::Value), g); launch(2 * T * h * vd, {s.n1, w.attn, s.v, workspace_}); },
      });
      s.o = alloc(t * od * el(), role(Role::AttentionOutput), g);
      s.lse = alloc(t * local_heads() * 4, role(Role::SoftmaxStats), g);
      // Causal attention: QK^T and PV over half the score matrix.
      launch(2.0 * T * T * local_heads() * (m_.qk_head_dim + m_.v_head_dim) / 2, {s.q, s.k, s.v, s.o, s.lse});
      if (!training) free_all({s.q, s.k, s.v, s.lse});
      noise(g);
      BlockId proj = alloc(t * h / o_.shape.tp * el(), Role::Temporary, g);
      launch(2 * T * od * h, {s.o, w.attn, proj, workspace_});
      if (!training) free(s.o);
      s.mid = alloc(t * h / o_.shape.tp * el(), role(Role::LayerInput), g);
      launch(0, {s.x, proj, s.mid});
      free(proj);
      if (!training) free_all({s.x, s.n1, s.rs1});
      s.n2 = alloc(t * h / o_.shape.tp * el(), role(Role::NormOutput), g);
      s.rs2 = alloc(t / o_.shape.tp * 4, role(Role::NormStats), g);
      launch(0, {s.mid, s.n2, s.rs2});
      BlockId down = moe_layer(l) ? moe_forward(s, w, T, g, training) : mlp_forward(s, w, T, g, training);
      BlockId next = alloc(t * h / o_.shape.tp * el(), role(l + 1 < m_.layers ? Role::LayerInput : Role::NormOutput),
                           l + 1 < m_.layers ? tag(micro, l + 1) : tag(micro, m_.layers));
      launch(0, {s.mid, down, next});
      free(down);
      if (!training) free_all({s.mid, s.n2, s.rs2});
      noise(g);
      if (training) saved.push_back(std::move(s));
      x = next;
    }
    // Final norm folded into the head: logits over this rank's vocabulary shard.
    const std::uint64_t vocab = m_.vocab / o_.shape.tp;
    BlockId logits = alloc(t * vocab * el(), role(Role::Logits), tag(micro, m_.layers));
    launch(2 * T * h * vocab, {x, head_, logits, workspace_});
    launch(0, {logits});  // loss
    if (!training) free(x);
    else final_x_ = x;
    return logits;
  }

  BlockId mlp_forward(LayerSaved& s, const Weights& w, double T, std::uint32_t g, bool training) {
    const std::uint64_t t = static_cast<std::uint64_t>(T), h = m_.hidden, f = m_.ffn / o_.shape.tp;
    const Role r_gate = training ? Role::MlpGate : Role::Temporary, r_up = training ? Role::MlpUp : Role::Temporary;
    maybe_shuffled<std::function<void()>>({
        [&] { s.gate = alloc(t * f * el(), r_gate, g); launch(2 * T * h * f, {s.n2, w.mlp, s.gate, workspace_}); },
        [&] { s.up = alloc(t * f * el(), r_up, g); launch(2 * T * h * f, {s.n2, w.mlp, s.up, workspace_}); },
    });
    s.act = alloc(t * f * el(), training ? Role::MlpActivation : Role::Temporary, g);
    s.prod = alloc(t * f * el(), training ? Role::MlpProduct : Role::Temporary, g);
    launch(0, {s.gate, s.up, s.act, s.prod});
    BlockId down = alloc(t * h / o_.shape.tp * el(), Role::Temporary, g);
    launch(2 * T * f * h, {s.prod, w.mlp, down, workspace_});
    if (!training) free_all({s.gate, s.up, s.act, s.prod});
    return down;
  }

  BlockId moe_forward(LayerSaved& s, const Weights& w, double T, std::uint32_t g, bool training) {
    const std::uint64_t t = static_cast<std::uint64_t>(T), h = m_.hidden, f = m_.expert_ffn;
    const auto role = [&](Role r) { return training ? r : Role::Temporary; };
    s.router = alloc(t / o_.shape.tp * m_.experts * 4, role(Role::RouterOutput), g);
    launch(2 * T / tp() * h * m_.experts, {s.n2, w.mlp, s.router});
    // Balanced routing: each routed expert sees T * top_k / experts tokens; shared
    // experts see this rank's share of all tokens.
    const double routed = tokens_per_expert(T);
    const double shared = T / tp();
    BlockId down = alloc(t * h / o_.shape.tp * el(), Role::Temporary, g);
    const double expert_weight = static_cast<double>(h * f * el());  // one of the expert's three matrices
    auto expert = [&](double tokens) {
      const std::uint64_t n = static_cast<std::uint64_t>(tokens);
      LayerSaved::Expert e;
      e.in = alloc(n * h * el(), role(Role::ExpertInput), g);
      launch(0, {s.n2, s.router, e.in});  // dispatch
      e.gate = alloc(n * f * el(), role(Role::ExpertActivation), g);
      launch(2 * tokens * h * f, {e.in, w.mlp, e.gate, workspace_}, expert_weight);
      e.up = alloc(n * f * el(), role(Role::ExpertActivation), g);
      launch(2 * tokens * h * f, {e.in, w.mlp, e.up, workspace_}, expert_weight);
      e.act = alloc(n * f * el(), role(Role::ExpertActivation), g);
      e.prod = alloc(n * f * el(), role(Role::ExpertActivation), g);
      launch(0, {e.gate, e.up, e.act, e.prod});
      launch(2 * tokens * f * h, {e.prod, w.mlp, down, workspace_}, expert_weight);  // down projection, combined
      if (!training) free_all({e.in, e.gate, e.up, e.act, e.prod});
      else s.experts.push_back(e);
    };
    for (std::uint32_t e = 0; e < local_experts(); ++e) expert(routed);
    for (std::uint32_t e = 0; e < m_.shared_experts; ++e) expert(shared);
    if (!training) free(s.router);
    return down;
  }

  void backward(std::uint32_t micro, std::uint32_t seq, BlockId logits, std::vector<LayerSaved>& saved) {
    const double T = static_cast<double>(seq) * o_.shape.micro_batch;
    const std::uint64_t t = static_cast<std::uint64_t>(T), h = m_.hidden;
    const std::uint64_t resid = t * h / o_.shape.tp * el();
    const std::uint64_t vocab = m_.vocab / o_.shape.tp;
    BlockId dlogits = alloc(t * vocab * el(), Role::Temporary, tag(micro, m_.layers));
    launch(0, {logits, dlogits});
    free(logits);
    BlockId dx = alloc(resid, Role::Temporary, tag(micro, m_.layers));
    launch(2 * T * h * vocab, {dlogits, head_, dx, workspace_});
    launch(2 * T * h * vocab, {dlogits, final_x_, head_grad_, workspace_});
    free_all({dlogits, final_x_});
    for (std::uint32_t l = m_.layers; l-- > 0;) {
      LayerSaved& s = saved[l];
      const Weights& w = weights_[l];
      const std::uint32_t g = tag(micro, l);
      // MLP (or MoE) backward, then the second norm.
      BlockId dn2 = moe_layer(l) ? moe_backward(s, w, T, dx, g) : mlp_backward(s, w, T, dx, g);
      BlockId dmid = alloc(resid, Role::Temporary, g);
      launch(0, {dn2, s.mid, s.rs2, dx, dmid});
      free_all({dn2, s.n2, s.rs2, s.mid, dx});
      dx = dmid;
      // Attention backward.
      const std::uint64_t qd = std::uint64_t{local_heads()} * m_.qk_head_dim;
      const std::uint64_t kd = std::uint64_t{local_kv()} * m_.qk_head_dim;
      const std::uint64_t vd = std::uint64_t{local_kv()} * m_.v_head_dim;
      const std::uint64_t od = std::uint64_t{local_heads()} * m_.v_head_dim;
      BlockId dout = alloc(t * od * el(), Role::Temporary, g);
      launch(2 * T * od * h, {dx, w.attn, dout, workspace_});
      launch(2 * T * od * h, {dx, s.o, w.attn_grad, workspace_});
      BlockId dq = alloc(t * qd * el(), Role::Temporary, g);
      BlockId dk = alloc(t * kd * el(), Role::Temporary, g);
      BlockId dv = alloc(t * vd * el(), Role::Temporary, g);
      launch(2.5 * 2.0 * T * T * local_heads() * (m_.qk_head_dim + m_.v_head_dim) / 2,
             {dout, s.q, s.k, s.v, s.o, s.lse, dq, dk, dv});
      free_all({dout, s.o, s.lse});
      BlockId dn1 = alloc(resid, Role::Temporary, g);
      launch(2 * T * h * (qd + kd + vd), {dq, dk, dv, w.attn, dn1, workspace_});
      launch(2 * T * h * (qd + kd + vd), {dq, dk, dv, s.n1, w.attn_grad, workspace_});
      free_all({dq, dk, dv, s.q, s.k, s.v});
      BlockId dxin = alloc(resid, Role::Temporary, g);
      launch(0, {dn1, s.x, s.rs1, dx, dxin});
      free_all({dn1, s.n1, s.rs1, s.x, dx});
      dx = dxin;
      noise(g);
    }
    launch(0, {dx, embed_grad_});
    free(dx);
  }

  BlockId mlp_backward(LayerSaved& s, const Weights& w, double T, BlockId dx, std::uint32_t g) {
    const std::uint64_t t = static_cast<std::uint64_t>(T), h = m_.hidden, f = m_.ffn / o_.shape.tp;
    BlockId dprod = alloc(t * f * el(), Role::Temporary, g);
    launch(2 * T * f * h, {dx, w.mlp, dprod, workspace_});
    launch(2 * T * f * h, {dx, s.prod, w.mlp_grad, workspace_});
    free(s.prod);
    BlockId dgate = alloc(t * f * el(), Role::Temporary, g);
    BlockId dup = alloc(t * f * el(), Role::Temporary, g);
    launch(0, {dprod, s.gate, s.up, s.act, dgate, dup});
    free_all({dprod, s.act});
    BlockId dn2 = alloc(t * h / o_.shape.tp * el(), Role::Temporary, g);
    launch(4 * T * h * f, {dgate, dup, w.mlp, dn2, workspace_});
    launch(4 * T * h * f, {dgate, dup, s.n2, w.mlp_grad, workspace_});
    free_all({dgate, dup, s.gate, s.up});
    return dn2;
  }

  BlockId moe_backward(LayerSaved& s, const Weights& w, double T, BlockId dx, std::uint32_t g) {
    const std::uint64_t t = static_cast<std::uint64_t>(T), h = m_.hidden, f = m_.expert_ffn;
    BlockId dn2 = alloc(t * h / o_.shape.tp * el(), Role::Temporary, g);
    const double routed = tokens_per_expert(T), shared = T / tp();
    for (std::size_t i = s.experts.size(); i-- > 0;) {
      const auto& e = s.experts[i];
      const double tokens = i < local_experts() ? routed : shared;
      const std::uint64_t n = static_cast<std::uint64_t>(tokens);
      BlockId dprod = alloc(n * f * el(), Role::Temporary, g);
      launch(2 * tokens * f * h, {dx, w.mlp, dprod, workspace_});
      launch(2 * tokens * f * h, {dx, e.prod, w.mlp_grad, workspace_});
      BlockId dgate = alloc(n * f * el(), Role::Temporary, g);
      BlockId dup = alloc(n * f * el(), Role::Temporary, g);
      launch(0, {dprod, e.gate, e.up, e.act, dgate, dup});
      free_all({dprod, e.prod, e.act});
      BlockId din = alloc(n * h * el(), Role::Temporary, g);
      launch(4 * tokens * h * f, {dgate, dup, w.mlp, din, workspace_});
      launch(4 * tokens * h * f, {dgate, dup, e.in, w.mlp_grad, workspace_});
      free_all({dgate, dup, e.gate, e.up});
      launch(0, {din, s.router, dn2});  // un-dispatch into the norm gradient
      free_all({din, e.in});
    }
    launch(2 * T / tp() * h * m_.experts, {dn2, s.n2, s.router, w.mlp_grad});
    free(s.router);
    return dn2;
  }

  const SynthOptions& o_;
  const ModelConfig& m_;
  std::mt19937_64 rng_;
  Trace out_;
  std::vector<std::uint64_t> sizes_;
  BlockId next_block_ = 1;  // 0 means "none" in the helpers
  BlockId first_step_block_ = 0;  // blocks before it are the prologue's parameters and state
  LaunchSeq next_seq_ = 0;
  BlockId workspace_ = 0, embed_ = 0, head_ = 0, embed_grad_ = 0, head_grad_ = 0, head_optim_ = 0, final_x_ = 0;
  std::vector<Weights> weights_;
};

}  // namespace

Trace synthesize(const SynthOptions& options) { return Synth(options).run(); }

}  // namespace tierrt::policy
