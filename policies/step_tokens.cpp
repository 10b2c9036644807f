#include "policies/step_tokens.hpp"

namespace tierrt::policy {
namespace {

std::uint64_t mix(std::uint64_t h, std::uint64_t v) {
  // splitmix64 finaliser over an FNV-style combine: cheap and well spread.
  h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
  h ^= h >> 30;
  h *= 0xbf58476d1ce4e5b9ull;
  h ^= h >> 27;
  h *= 0x94d049bb133111ebull;
  h ^= h >> 31;
  return h;
}

}  // namespace

void Tokenizer::flush_launch(std::vector<Token>& out) {
  if (!launch_open_) return;
  std::uint64_t h = mix(mix(mix(3, launch_stream_), launch_uses_), launch_use_bytes_);
  out.push_back(Token{h, launch_event_, live_, live_});
  launch_open_ = false;
}

void Tokenizer::feed(const Event& e, std::uint32_t index, std::vector<Token>& out) {
  if (e.kind == EventKind::Use) {
    if (launch_open_) {
      auto it = sizes_.find(e.a);
      ++launch_uses_;
      launch_use_bytes_ += it == sizes_.end() ? 0 : it->second;
    }
    return;
  }
  // Tags, phases and rates carry no structure of their own; they do not close a launch.
  if (e.kind == EventKind::Tag || e.kind == EventKind::CopyRate) return;
  flush_launch(out);
  switch (e.kind) {
    case EventKind::Alloc:
      sizes_[e.a] = e.b;
      live_ += static_cast<std::int64_t>(e.b);
      out.push_back(Token{mix(1, e.b), index, live_ - static_cast<std::int64_t>(e.b), live_});
      break;
    case EventKind::Free: {
      auto it = sizes_.find(e.a);
      const std::uint64_t bytes = it == sizes_.end() ? 0 : it->second;
      if (it != sizes_.end()) sizes_.erase(it);
      live_ -= static_cast<std::int64_t>(bytes);
      out.push_back(Token{mix(2, bytes), index, live_ + static_cast<std::int64_t>(bytes), live_});
      break;
    }
    case EventKind::Launch:
      launch_open_ = true;
      launch_event_ = index;
      launch_stream_ = e.stream;
      launch_uses_ = 0;
      launch_use_bytes_ = 0;
      break;
    default:
      break;
  }
}

void Tokenizer::finish(std::vector<Token>& out) { flush_launch(out); }

std::vector<Token> tokenize(const Trace& trace) {
  std::vector<Token> out;
  out.reserve(trace.size() / 2);
  Tokenizer t;
  for (std::size_t i = 0; i < trace.size(); ++i) t.feed(trace[i], static_cast<std::uint32_t>(i), out);
  t.finish(out);
  return out;
}

std::size_t common_prefix(const std::vector<std::uint64_t>& a, const std::vector<std::uint64_t>& b) {
  std::size_t n = 0;
  while (n < a.size() && n < b.size() && a[n] == b[n]) ++n;
  return n;
}

}  // namespace tierrt::policy
