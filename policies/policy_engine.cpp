#include "policies/policy_engine.hpp"

#include <algorithm>
#include <cassert>

#include "policies/lifetime_classifier.hpp"

namespace tierrt::policy {
namespace {

// The learned step's first tokens: seeing them again, after a step that went astray,
// marks where the next step began.
constexpr std::size_t kResyncTokens = 32;

}  // namespace

PolicyEngine::PolicyEngine(Options options) : options_(std::move(options)), planner_(options_.planner) {}

void PolicyEngine::record(const Event& e) {
  if (e.kind == EventKind::Step) {
    markers_seen_ = true;
    std::vector<Token> flushed;  // the last launch of the step that ends here
    tokenizer_.finish(flushed);
    for (const auto& t : flushed) on_token(t);
    if (step_open_) {
      close_step(events_.size());
    } else {  // everything before the first marker is set-up
      for (const Event& p : events_) track_live(live_at_step_begin_, p);
    }
    step_open_ = true;
    begin_step();
    return;
  }
  // At a launch's end (the next event that is not one of its uses), so that
  // what is let go holds whole launches.
  if (e.kind != EventKind::Use && events_.size() >= options_.max_step_events) let_go_of_overlong_step();
  const auto index = static_cast<std::uint32_t>(events_.size());
  append(e);
  scratch_.clear();  // reused: no allocation per event once warm
  tokenizer_.feed(e, index, scratch_);
  // One event can complete a token and open another (a launch's, then its
  // own): when the first ends a step, the step's events are re-based, and so
  // are the tokens after it and the launch the tokenizer holds open.
  const std::size_t rebased_before = rebased_;
  for (Token t : scratch_) {
    t.event -= static_cast<std::uint32_t>(rebased_ - rebased_before);
    on_token(t);
  }
  if (rebased_ != rebased_before) tokenizer_.rebase(static_cast<std::uint32_t>(rebased_ - rebased_before));
  // Look for a period only when no launch token is pending, so that the detector's
  // tokens are exactly the ones seen so far; doubling the wait keeps it amortised O(n).
  // Also when the learned step stopped coming back (a changed shape): learn anew.
  if (!markers_seen_ && (!learned_ || !on_reference_) && events_.size() >= next_detect_ &&
      (e.kind == EventKind::Alloc || e.kind == EventKind::Free))
    try_detect_steps();
}

// What the buffer held stays known only by the blocks it left live, as the
// set-up before a first marker does. With markers the next one opens a step
// (this one is not learned); without, the period is looked for afresh.
void PolicyEngine::let_go_of_overlong_step() {
  tokenizer_.finish(scratch_);  // the launch it held open goes with the rest
  scratch_.clear();
  for (const Event& e : events_) track_live(live_at_step_begin_, e);
  rebased_ += events_.size();
  ++overlong_steps_;
  step_open_ = false;
  next_detect_ = 0;
  begin_step(/*plan=*/false);
}

void PolicyEngine::append(const Event& e) {
  // A launch's uses may pass the limit; a step is let go of before anything else would.
  assert(e.kind == EventKind::Use || events_.size() < options_.max_step_events);
  events_.push_back(e);
  if (e.kind == EventKind::Alloc) {
    ordinal_by_block_[e.a] = static_cast<std::uint32_t>(by_ordinal_.size());
    by_ordinal_.push_back(e.a);
  }
  if (e.kind == EventKind::Launch) {
    // triggers_ahead(0) handed this launch everything up to its position.
    if (followed_ != kNotFollowing) handed_ = std::max(handed_, position() + 1);
    ++launches_;
  }
}

std::uint32_t PolicyEngine::token_ordinal(const Token& t) const {
  if (t.event >= events_.size()) return kNoOrdinal;
  const Event& e = events_[t.event];
  if (e.kind == EventKind::Launch) return kLaunchToken;
  auto it = ordinal_by_block_.find(e.a);
  if (e.kind == EventKind::Alloc) return it == ordinal_by_block_.end() ? kNoOrdinal : it->second;
  return it == ordinal_by_block_.end() ? kNoOrdinal : (it->second | kFreeToken);
}

// The running launches whose tokens are not complete yet stand, as far as is
// known, for the learned launches after the furthest one matched.
std::uint32_t PolicyEngine::position() const {
  const std::uint32_t pending = launches_ > launch_tokens_ ? launches_ - launch_tokens_ : 0;
  return followers_[followed_].reached + pending;
}

void PolicyEngine::align(const Token& t) {
  const std::uint32_t ord = token_ordinal(t);
  if (ord == kLaunchToken) ++launch_tokens_;
  if (reference_aligner_ && on_reference_) {
    const std::uint32_t m = reference_aligner_->feed(t.hash, ord);
    // Its last token, in a step that stood for most of it (not a changed shape
    // whose few like tokens happened to match).
    reference_done_ |= m != kNoMatch && m + 1 == reference_.size() &&
                       4 * std::size_t{reference_aligner_->matched()} >= 3 * reference_.size();
    on_reference_ = !reference_aligner_->lost();
  }
  if (candidates_.empty()) return;
  for (std::size_t c : candidates_) {
    Follower& f = followers_[c];
    const std::uint32_t m = f.aligner.feed(t.hash, ord);
    if (m != kNoMatch && ord == kLaunchToken) f.reached = std::max(f.reached, f.aligner.learned_op(m) + 1);
  }
  std::erase_if(candidates_, [&](std::size_t c) { return followers_[c].aligner.lost(); });
  const std::size_t first = candidates_.empty() ? kNotFollowing : candidates_.front();
  if (first == followed_) return;
  followed_ = first;
  // Another alternative's launches: its triggers from where it has got to.
  if (followed_ != kNotFollowing) handed_ = position();
}

void PolicyEngine::on_token(const Token& t) {
  tokens_.push_back(t);
  if (markers_seen_ || !learned_) {
    align(t);
    return;
  }
  // Without markers: a step whose alignment reached the learned step's last token
  // ends at the first token that stands for nothing left in it (whatever comes
  // next: an eval step or a changed shape begins there too); one that went
  // astray ends where the learned step's first tokens are seen again.
  if (on_reference_ && reference_done_ && !reference_aligner_->would_match(t.hash, token_ordinal(t))) {
    restart_from(t.event, tokens_.size() - 1);
    return;
  }
  align(t);
  if (on_reference_) return;
  const std::size_t probe = std::min(kResyncTokens, reference_.size());
  if (tokens_.size() <= probe) return;
  const std::size_t from = tokens_.size() - probe;
  for (std::size_t i = 0; i < probe; ++i)
    if (tokens_[from + i].hash != reference_[i]) return;
  restart_from(tokens_[from].event, from);
}

void PolicyEngine::restart_from(std::size_t split_event, std::size_t split_token) {
  split_event = std::min(split_event, events_.size());
  split_token = std::min(split_token, tokens_.size());
  rebased_ += split_event;
  Trace tail(events_.begin() + static_cast<std::ptrdiff_t>(split_event), events_.end());
  std::vector<Token> tail_tokens(tokens_.begin() + static_cast<std::ptrdiff_t>(split_token), tokens_.end());
  events_.resize(split_event);
  tokens_.resize(split_token);
  close_step(events_.size());
  begin_step();
  for (const Event& ev : tail) append(ev);
  for (Token tt : tail_tokens) {
    tt.event -= static_cast<std::uint32_t>(split_event);
    tokens_.push_back(tt);
    align(tt);
  }
}

void PolicyEngine::try_detect_steps() {
  next_detect_ = events_.size() * 2;
  // The engine's own tokens: it knows the sizes of blocks from before the buffer.
  const auto d = detect_steps(events_, tokens_);
  if (d.period_tokens == 0 || d.step_count() < 3) return;  // two complete steps and the current one
  reference_aligner_.reset();  // it points into reference_, which is learned anew
  // Learn every complete step; the last span may be unfinished and stays current.
  const StepSpan& current = d.spans.back();
  LiveBlocks live = live_at_step_begin_;
  std::size_t pos = 0;
  for (const auto& s : d.spans) {
    if (&s == &current) break;
    for (; pos < s.begin_event; ++pos) track_live(live, events_[pos]);
    if (s.prologue) continue;
    StepTimeline tl = span_timeline(events_, d, s, live);
    pos = s.end_event;
    classify(tl);
    SimResult nothing;  // learned after the fact: no plan was followed, nothing measured
    nothing.late_ns.assign(tl.blocks.size(), 0);
    nothing.demanded.assign(tl.blocks.size(), 0);
    planner_.observe(tl, nothing);
    ++steps_completed_;
    if (s.shape == d.dominant_shape)
      reference_ = tl.tokens, reference_ordinals_ = tl.token_ordinals, step_events_ = s.end_event - s.begin_event;
  }
  for (; pos < current.begin_event; ++pos) track_live(live, events_[pos]);
  live_at_step_begin_ = std::move(live);
  learned_ = !reference_.empty();
  // The current step continues from the last span's first event.
  rebased_ += current.begin_event;
  Trace tail(events_.begin() + static_cast<std::ptrdiff_t>(current.begin_event), events_.end());
  begin_step();
  for (const Event& ev : tail) append(ev);
  for (std::size_t t = current.begin_token; t < current.end_token; ++t) {
    Token tt = d.tokens[t];
    tt.event -= static_cast<std::uint32_t>(current.begin_event);
    tokens_.push_back(tt);
    align(tt);
  }
}

void PolicyEngine::close_step(std::size_t end_event) {
  const std::span<const Event> ev(events_.data(), std::min(end_event, events_.size()));
  if (on_reference_) step_events_ = ev.size();
  // In place: what the step left live is where the next one begins (a copy
  // of the map per step was most of a step's end with 1e5 live blocks).
  StepTimeline tl = build_timeline(ev, live_at_step_begin_);
  if (tl.ops.empty()) return;  // nothing ran: not a step
  std::vector<std::uint32_t> at;
  for (const auto& t : tokens_)
    if (t.event < ev.size()) tl.tokens.push_back(t.hash), at.push_back(t.event);
  tl.token_op = launches_before(ev, at);
  tl.token_ordinals = token_ordinals(ev, at);
  tl.signature = step_signature(tl.tokens);
  classify(tl);
  // What the mover reported, per block of the observed step.
  SimResult outcome;
  outcome.late_ns.assign(tl.blocks.size(), 0);
  outcome.demanded.assign(tl.blocks.size(), 0);
  for (auto [ord, ns] : late_)
    if (ord < tl.by_ordinal.size()) outcome.late_ns[tl.by_ordinal[ord]] += ns, ++outcome.late_prefetches;
  // A demand fetch stalls its launch for the whole fetch, as the simulator counts it.
  LinkModel link = options_.link;
  if (tl.measured_h2d_bps > 0) link.h2d_bytes_per_s = tl.measured_h2d_bps;
  for (auto ord : demanded_)
    if (ord < tl.by_ordinal.size()) {
      const std::uint32_t b = tl.by_ordinal[ord];
      outcome.demanded[b] = 1, ++outcome.demand_fetches;
      outcome.late_ns[b] += link.h2d_ns(static_cast<double>(tl.blocks[b].bytes));
    }
  for (double ns : outcome.late_ns) outcome.stall_ns += ns;
  if (followed_ != kNotFollowing) {
    outcome.plan_alternative = static_cast<int>(followed_);
    outcome.plan_ops = static_cast<std::uint32_t>(tl.ops.size());
  }
  planner_.observe(tl, outcome);
  ++steps_completed_;
}

void PolicyEngine::begin_step(bool plan) {
  events_.clear();
  tokens_.clear();
  by_ordinal_.clear();
  ordinal_by_block_.clear();
  late_.clear();
  demanded_.clear();
  launches_ = 0;
  launch_tokens_ = 0;
  handed_ = 0;
  on_reference_ = true;
  reference_done_ = false;
  reference_aligner_.reset();
  if (learned_ && reference_ordinals_.size() == reference_.size() && !reference_.empty())
    reference_aligner_.emplace(reference_, reference_ordinals_);
  // Without markers, a step that has run three learned steps long without the
  // learned step reappearing is worth a fresh look for a period.
  next_detect_ = learned_ ? 3 * std::max<std::size_t>(step_events_, 64) : std::max<std::size_t>(next_detect_, 1024);
  followers_.clear();  // before plans_: they point into them
  plans_.clear();
  candidates_.clear();
  followed_ = kNotFollowing;
  if (steps_completed_ == 0 || !plan) return;
  plans_ = planner_.plan_step(options_.budget, options_.link);
  // A plan is followed only through alignment, which needs what each of its tokens is about.
  followers_.reserve(plans_.size());
  for (std::size_t i = 0; i < plans_.size(); ++i) {
    const StepPlan& p = plans_[i];
    followers_.push_back(Follower{StepAligner(p.expected_tokens, p.expected_ordinals), 0});
    if (!p.expected_tokens.empty() && p.expected_ordinals.size() == p.expected_tokens.size()) candidates_.push_back(i);
  }
  if (!candidates_.empty()) followed_ = candidates_.front();
}

bool PolicyEngine::moves_ahead() const {
  if (followed_ == kNotFollowing) return false;
  // A table is sorted by op; another candidate's position is not known here,
  // so any trigger of it counts.
  for (const std::size_t i : candidates_) {
    const std::vector<Trigger>& all = plans_[i].triggers.all();
    if (!all.empty() && all.back().op >= (i == followed_ ? handed_ : 0)) return true;
  }
  return false;
}

std::span<const Trigger> PolicyEngine::triggers_ahead(std::uint32_t ahead) const {
  std::vector<Trigger>& out = ahead == 0 ? now_ : next_;
  out.clear();
  if (followed_ == kNotFollowing) return {};
  const TriggerTable& table = plans_[followed_].triggers;
  const std::uint32_t at = position() + ahead;
  for (const Trigger& t : ahead == 0 ? table.between(handed_, at) : table.at(at))
    add_running(t, launches_ + ahead, out);
  return out;
}

std::span<const Trigger> PolicyEngine::triggers_ahead(std::uint32_t first, std::uint32_t last) const {
  assert(first >= 1);
  next_.clear();
  if (followed_ == kNotFollowing || last < first) return {};
  const TriggerTable& table = plans_[followed_].triggers;
  const std::uint32_t from = position() + first;
  // The table holds them by learned launch, in order: launch `from` is `first` ahead.
  for (const Trigger& t : table.between(from, from + (last - first)))
    add_running(t, launches_ + first + (t.op - from), next_);
  return next_;
}

void PolicyEngine::add_running(const Trigger& t, std::uint32_t op, std::vector<Trigger>& out) const {
  // A block from before the step is the same block now: named by its id.
  const std::uint32_t block = t.block != 0 ? kNoOrdinal : followers_[followed_].aligner.running_ordinal(t.ordinal);
  if (t.block == 0 && block >= by_ordinal_.size()) return;  // the block it names has not turned up
  // A spill's device copy is kept as many launches past this one as the plan said.
  const std::uint32_t release_after =
      t.action == Action::Spill ? op + (t.release_after > t.op ? t.release_after - t.op : 0) : t.release_after;
  out.push_back({op, t.action, block, release_after, t.block});
}

std::optional<std::uint32_t> PolicyEngine::ordinal_of(BlockId block) const {
  auto it = ordinal_by_block_.find(block);
  if (it == ordinal_by_block_.end()) return std::nullopt;
  return it->second;
}

std::optional<BlockId> PolicyEngine::block_of(std::uint32_t ordinal) const {
  if (ordinal >= by_ordinal_.size()) return std::nullopt;
  return by_ordinal_[ordinal];
}

std::size_t PolicyEngine::set_launch_durations(LaunchSeq from, LaunchSeq to, std::uint64_t ns) {
  // Launches arrive in sequence order (nearly: threads race to post), and
  // the host may be a whole step ahead of the device's clock: the first
  // launch at or past `from` is searched for, not walked back to.
  std::size_t lo = 0, hi = events_.size();
  while (lo < hi) {
    const std::size_t mid = lo + (hi - lo) / 2;
    std::size_t j = mid;
    while (j < hi && events_[j].kind != EventKind::Launch) ++j;
    if (j == hi) hi = mid;
    else if (events_[j].a < from) lo = j + 1;
    else hi = mid;
  }
  std::size_t n = 0;
  for (std::size_t i = lo; i < events_.size(); ++i) {
    Event& e = events_[i];
    if (e.kind != EventKind::Launch) continue;
    if (e.a >= to) break;
    if (e.a >= from) e.b = ns, ++n;
  }
  return n;
}

void PolicyEngine::report_late(std::uint32_t ordinal, double late_ns) { late_.emplace_back(ordinal, late_ns); }

void PolicyEngine::report_demand_fetch(std::uint32_t ordinal) { demanded_.push_back(ordinal); }

}  // namespace tierrt::policy
