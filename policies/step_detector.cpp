#include "policies/step_detector.hpp"

#include <algorithm>
#include <map>
#include <optional>
#include <unordered_map>

namespace tierrt::policy {
namespace {

constexpr std::uint64_t kBase = 0x100000001b3ull;

// Polynomial prefix hashes over token hashes (mod 2^64): any window's hash in O(1).
class WindowHash {
 public:
  explicit WindowHash(const std::vector<Token>& t) : prefix_(t.size() + 1), pow_(t.size() + 1) {
    pow_[0] = 1;
    for (std::size_t i = 0; i < t.size(); ++i) {
      prefix_[i + 1] = prefix_[i] * kBase + t[i].hash;
      pow_[i + 1] = pow_[i] * kBase;
    }
  }
  std::uint64_t of(std::size_t begin, std::size_t len) const {
    return prefix_[begin + len] - prefix_[begin] * pow_[len];
  }

 private:
  std::vector<std::uint64_t> prefix_, pow_;
};

struct Period {
  std::size_t length = 0;
  std::size_t anchor = 0;  // a token index where a step starts
  std::size_t cover = 0;   // tokens in a run at this distance, or its partner in the next step
};

// Whether f[i] recurs `d` tokens later, within `slack` tokens either way.
bool recurs(const std::vector<Token>& f, std::size_t i, std::size_t d, std::size_t slack) {
  const std::size_t at = i + d;
  for (std::size_t s = 0; s <= slack; ++s) {
    if (at + s < f.size() && f[at + s].hash == f[i].hash) return true;
    if (s > 0 && at - s > i && f[at - s].hash == f[i].hash) return true;
  }
  return false;
}

// Whether memory after the window of `d` tokens from `begin` is back where it
// started (within `slack` tokens of the window's end).
bool returns(const std::vector<Token>& f, std::size_t begin, std::size_t d, std::size_t slack) {
  const std::size_t end = begin + d - 1;
  for (std::size_t s = 0; s <= slack; ++s) {
    if (end + s < f.size() && f[end + s].live_after == f[begin].live_before) return true;
    if (s > 0 && end - s > begin && f[end - s].live_after == f[begin].live_before) return true;
  }
  return false;
}

// The period of the token sequence `f`: the repeat distance whose runs of
// recurring tokens, each at least one period long and leaving live bytes
// unchanged, cover the most tokens, counting both a run and its partner one
// period later (so that the step that contains K equal micro-steps and the
// optimizer between them wins over the micro-step: the optimizer's tokens
// recur only at the step's distance). Exact when `slack` is 0; otherwise a
// token may recur up to `slack` tokens off, and a run may skip up to `slack`
// tokens that do not recur (another order, an extra).
std::optional<Period> find_period(const std::vector<Token>& f, const StepDetectorOptions& o, std::size_t slack) {
  const std::size_t k = o.kgram, n = f.size();
  if (n < 2 * std::max(o.min_period, k)) return std::nullopt;
  const WindowHash wh(f);
  std::unordered_map<std::uint64_t, std::size_t> last_seen;
  std::unordered_map<std::size_t, std::size_t> distance_count;
  for (std::size_t i = 0; i + k <= n; ++i) {
    const std::uint64_t h = wh.of(i, k);
    auto [it, fresh] = last_seen.try_emplace(h, i);
    if (!fresh) {
      const std::size_t d = i - it->second;
      if (d >= o.min_period) ++distance_count[d];
      it->second = i;
    }
  }
  std::vector<std::pair<std::size_t, std::size_t>> candidates(distance_count.begin(), distance_count.end());
  std::sort(candidates.begin(), candidates.end(),
            [](auto& x, auto& y) { return x.second != y.second ? x.second > y.second : x.first < y.first; });
  if (candidates.size() > o.max_candidates) candidates.resize(o.max_candidates);

  std::optional<Period> best;
  std::vector<std::int32_t> covered;
  for (const auto& candidate : candidates) {
    const std::size_t d = candidate.first;  // a lambda below captures it: no structured binding (clang)
    covered.assign(n + 1, 0);
    std::size_t first_run = n;
    std::size_t run_start = 0, run_end = 0, misses = 0;
    bool in_run = false;
    auto close_run = [&]() {
      if (in_run && run_end - run_start >= d && returns(f, run_start, d, slack)) {
        ++covered[run_start], --covered[run_end];
        ++covered[std::min(n, run_start + d)], --covered[std::min(n, run_end + d)];
        if (first_run == n) first_run = run_start;
      }
      in_run = false;
    };
    for (std::size_t i = 0; i + d < n; ++i) {
      if (recurs(f, i, d, slack)) {
        if (!in_run) in_run = true, run_start = i;
        run_end = i + 1;
        misses = 0;
      } else if (in_run && ++misses > slack) {
        close_run();
      }
    }
    close_run();
    std::size_t cover = 0;
    for (std::size_t i = 0, depth = 0; i < n; ++i) {
      depth += static_cast<std::size_t>(covered[i]);
      cover += depth > 0;
    }
    if (cover > 0 && (!best || cover > best->cover || (cover == best->cover && d < best->length))) {
      // A step boundary is where memory is lowest: every activation is gone. Memory
      // stays at that level through the optimizer; the step starts where it rises.
      std::size_t anchor = first_run;
      for (std::size_t i = first_run; i < first_run + d && i < n; ++i)
        if (f[i].live_after <= f[anchor].live_after) anchor = i;
      best = Period{d, anchor + 1, cover};
    }
  }
  if (!best) return std::nullopt;
  // Walk back over earlier copies of the step (the first step often repeats too).
  auto repeats = [&](std::size_t from) {
    if (slack == 0) return wh.of(from, best->length) == wh.of(from + best->length, best->length);
    std::size_t hits = 0;
    for (std::size_t i = from; i < from + best->length; ++i) hits += recurs(f, i, best->length, slack);
    return hits * 10 >= best->length * 9;
  };
  while (best->anchor >= best->length && repeats(best->anchor - best->length)) best->anchor -= best->length;
  return best;
}

std::optional<Period> find_period(const std::vector<Token>& t, std::size_t lo, std::size_t hi,
                                  const StepDetectorOptions& o) {
  std::vector<Token> f(t.begin() + static_cast<std::ptrdiff_t>(lo), t.begin() + static_cast<std::ptrdiff_t>(hi));
  auto p = find_period(f, o, 0);
  if (p) p->anchor += lo;
  return p;
}

std::uint64_t signature_of(const std::vector<Token>& t, std::size_t begin, std::size_t len) {
  std::vector<std::uint64_t> h(len);
  for (std::size_t i = 0; i < len; ++i) h[i] = t[begin + i].hash;
  return step_signature(h);
}

void assign_shapes(StepDetection& d) {
  std::unordered_map<std::uint64_t, std::uint32_t> ids;
  std::map<std::uint32_t, std::size_t> counts;
  for (auto& s : d.spans) {
    auto [it, fresh] = ids.try_emplace(s.signature, static_cast<std::uint32_t>(ids.size()));
    (void)fresh;
    s.shape = it->second;
    if (!s.prologue) ++counts[s.shape];
  }
  std::size_t best = 0;
  for (auto [shape, n] : counts)
    if (n > best) best = n, d.dominant_shape = shape;
}

std::size_t event_of(const StepDetection& d, std::size_t token, std::size_t trace_size) {
  return token < d.tokens.size() ? d.tokens[token].event : trace_size;
}

void segment_by_markers(std::span<const Event> trace, StepDetection& d) {
  std::vector<std::size_t> marks;
  for (std::size_t i = 0; i < trace.size(); ++i)
    if (trace[i].kind == EventKind::Step) marks.push_back(i);
  // Token index of the first token at or after each event boundary.
  auto token_at = [&](std::size_t event) {
    return static_cast<std::size_t>(std::lower_bound(d.tokens.begin(), d.tokens.end(), event,
                                                     [](const Token& t, std::size_t e) { return t.event < e; }) -
                                    d.tokens.begin());
  };
  auto add = [&](std::size_t b, std::size_t e, bool prologue) {
    const std::size_t tb = token_at(b), te = token_at(e);
    if (tb == te) return;  // nothing happened (a marker at the very end, or two in a row)
    // A span without a launch (the frees of a program's exit after its last
    // marker) is no step: nothing in it runs on the device.
    const bool launches = std::any_of(d.tokens.begin() + static_cast<std::ptrdiff_t>(tb),
                                      d.tokens.begin() + static_cast<std::ptrdiff_t>(te),
                                      [&](const Token& t) { return trace[t.event].kind == EventKind::Launch; });
    d.spans.push_back(StepSpan{b, e, tb, te, signature_of(d.tokens, tb, te - tb), 0, prologue || !launches});
  };
  if (marks.front() > 0) add(0, marks.front(), true);
  for (std::size_t m = 0; m < marks.size(); ++m)
    add(marks[m], m + 1 < marks.size() ? marks[m + 1] : trace.size(), false);
}

// Steps that repeat only up to noise (extra short-lived allocations with sizes
// of their own, independent launches in another order): the period of the
// tokens that recur at all (a token seen once in the whole stream belongs to
// no step), found with slack, then cut one period apart, each cut moved by up
// to the slack to where the first step began (same token, same live bytes).
// Every step found is taken for the same step: noise makes each signature
// differ. False when no period covers most of the stream.
bool segment_noisy(std::span<const Event> trace, StepDetection& d, const StepDetectorOptions& o) {
  const std::size_t n = d.tokens.size();
  std::unordered_map<std::uint64_t, std::uint32_t> seen;
  for (const Token& t : d.tokens) ++seen[t.hash];
  std::vector<std::size_t> idx;  // positions in d.tokens of the tokens that recur
  std::vector<Token> f;
  for (std::size_t i = 0; i < n; ++i)
    if (seen[d.tokens[i].hash] > 1) idx.push_back(i), f.push_back(d.tokens[i]);
  const auto p = find_period(f, o, o.slack);
  if (!p || 2 * p->cover < f.size() || p->anchor >= f.size()) return false;
  std::vector<std::size_t> cuts{p->anchor};
  const Token& first = f[p->anchor];
  for (;;) {
    const std::size_t guess = cuts.back() + p->length;
    if (guess >= f.size()) break;
    std::size_t cut = guess;
    bool exact = false;
    for (std::size_t s = 0; s <= o.slack && !exact; ++s)
      for (std::size_t at : {guess - std::min(s, guess), guess + s})
        if (!exact && at < f.size() && at > cuts.back() && f[at].hash == first.hash &&
            f[at].live_before == first.live_before)
          cut = at, exact = true;
    cuts.push_back(cut);
  }
  auto add = [&](std::size_t tb, std::size_t te, bool prologue) {
    if (tb >= te) return;
    d.spans.push_back(StepSpan{tb == 0 ? 0 : event_of(d, tb, trace.size()), event_of(d, te, trace.size()), tb, te,
                               signature_of(d.tokens, tb, te - tb), prologue ? 1u : 0u, prologue});
  };
  add(0, idx[cuts.front()], true);
  for (std::size_t j = 0; j < cuts.size(); ++j) add(idx[cuts[j]], j + 1 < cuts.size() ? idx[cuts[j + 1]] : n, false);
  d.period_tokens = cuts.size() > 1 ? idx[cuts[1]] - idx[cuts[0]] : n - idx[cuts[0]];
  d.noisy = true;
  d.dominant_shape = 0;
  return true;
}

void segment_by_period(std::span<const Event> trace, StepDetection& d, const WindowHash& wh,
                       const StepDetectorOptions& o) {
  const std::size_t n = d.tokens.size();
  auto add = [&](std::size_t tb, std::size_t te, bool prologue) {
    if (tb >= te) return;
    d.spans.push_back(StepSpan{tb == 0 ? 0 : event_of(d, tb, trace.size()), event_of(d, te, trace.size()), tb, te,
                               signature_of(d.tokens, tb, te - tb), 0, prologue});
  };
  auto period = find_period(d.tokens, 0, n, o);
  // Exact repeats that cover little of the stream: noise may hide the step.
  if ((!period || 2 * period->cover < n) && o.slack > 0 && segment_noisy(trace, d, o)) return;
  if (!period) {  // nothing repeats: the whole stream is one step
    add(0, n, false);
    return;
  }
  d.period_tokens = period->length;
  add(0, period->anchor, true);
  std::size_t b = period->anchor;
  std::size_t len = period->length;
  std::uint64_t ref = wh.of(b, len);
  while (b < n) {
    if (b + len <= n && wh.of(b, len) == ref) {
      add(b, b + len, false);
      b += len;
      continue;
    }
    // A step that differs: it runs until the learned step shows up again.
    std::size_t c = b + 1;
    while (c + len <= n && wh.of(c, len) != ref) ++c;
    if (c + len <= n) {
      add(b, c, false);
      b = c;
      continue;
    }
    // The learned step never comes back: the shape changed; learn the new period.
    auto next = find_period(d.tokens, b, n, o);
    if (!next || next->anchor + next->length > n) {
      add(b, n, false);
      break;
    }
    add(b, next->anchor, false);
    b = next->anchor;
    len = next->length;
    ref = wh.of(b, len);
  }
}

}  // namespace

std::uint64_t step_signature(std::span<const std::uint64_t> tokens) {
  std::uint64_t h = tokens.size() * 0x9e3779b97f4a7c15ull;
  for (std::uint64_t t : tokens) h = (h ^ t) * 0x100000001b3ull + (h >> 29);
  return h;
}

std::vector<std::uint64_t> StepDetection::token_hashes(const StepSpan& s) const {
  std::vector<std::uint64_t> out;
  out.reserve(s.end_token - s.begin_token);
  for (std::size_t i = s.begin_token; i < s.end_token; ++i) out.push_back(tokens[i].hash);
  return out;
}

std::size_t StepDetection::step_count() const {
  return static_cast<std::size_t>(std::count_if(spans.begin(), spans.end(), [](auto& s) { return !s.prologue; }));
}

StepDetection detect_steps(const Trace& trace, const StepDetectorOptions& options) {
  return detect_steps(trace, tokenize(trace), options);
}

StepDetection detect_steps(std::span<const Event> trace, std::vector<Token> tokens, const StepDetectorOptions& options) {
  StepDetection d;
  d.tokens = std::move(tokens);
  const WindowHash wh(d.tokens);
  d.used_markers = std::any_of(trace.begin(), trace.end(), [](const Event& e) { return e.kind == EventKind::Step; });
  if (d.used_markers)
    segment_by_markers(trace, d);
  else
    segment_by_period(trace, d, wh, options);
  if (!d.noisy) assign_shapes(d);
  return d;
}

}  // namespace tierrt::policy
