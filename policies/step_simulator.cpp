#include "policies/step_simulator.hpp"

#include <algorithm>
#include <deque>
#include <optional>

#include "policies/step_alignment.hpp"

namespace tierrt::policy {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr std::uint32_t kNone = 0xffffffffu;

enum class State : std::uint8_t { Absent, Resident, Spilling, Spilled, Fetching, Freed };

struct BlockState {
  State state = State::Absent;
  bool queued_out = false;      // waiting in the D2H queue
  bool queued_in = false;       // waiting in the H2D queue
  bool copied = false;          // D2H done, waiting for release_after to complete
  bool free_pending = false;    // freed by the program while its spill was in flight
  bool prefetched = false;      // the current fetch was planned, not demanded
  bool waited = false;          // the compute stream is waiting for it
  bool activation_counted = false;
  std::uint32_t release_after = kNone;
  double last_use = 0;
  double wait_since = 0;
};

// One direction's copy engine: FIFO, urgent (demanded) jobs first, one copy at a time.
struct CopyEngine {
  std::deque<std::uint32_t> urgent, normal;
  bool busy = false;
  double end = 0;
  std::uint32_t block = kNone;
};

// A launch at or before release_after is a reader the spill was planned around.
bool planned_reader(const BlockState& s, std::uint32_t op) { return s.release_after != kNone && op <= s.release_after; }

class Model {
 public:
  Model(const StepTimeline& tl, std::span<const StepPlan> plans, VictimChooser& victims, const SimOptions& o)
      : tl_(tl), victims_(victims), o_(o), blocks_(tl.blocks.size()), allocs_at_(tl.ops.size() + 1),
        frees_at_(tl.ops.size() + 1), op_done_(tl.ops.size(), false) {
    choose_plan(plans);
    r_.late_ns.assign(tl.blocks.size(), 0);
    r_.demanded.assign(tl.blocks.size(), 0);
    r_.launch_start_ns.assign(tl.ops.size() + 1, 0);
    std::vector<std::uint32_t> lazy_before;  // lazy blocks from before the step
    for (std::uint32_t b = 0; b < tl.blocks.size(); ++b) {
      const BlockRecord& rec = tl.blocks[b];
      const std::uint32_t end = rec.free_op == kNever ? static_cast<std::uint32_t>(tl.ops.size()) : rec.free_op;
      if (rec.predates_step()) {
        if (end > 0 && rec.lazy) lazy_before.push_back(b);
        else if (end > 0) blocks_[b].state = State::Resident, dev_ += rec.bytes;
        frees_at_[end].push_back(b);
      } else if (rec.alloc_op < end) {
        allocs_at_[rec.alloc_op].push_back(b);
        frees_at_[end].push_back(b);
      }
    }
    // Granule-group members from before the step (a pool allocated once) are
    // where the steps before left them: the device holds those used first,
    // as far as the budget goes, and the rest are on the host.
    auto first_use = [&](std::uint32_t b) {
      const BlockRecord& rec = tl.blocks[b];
      return rec.use_count() > 0 ? tl.block_uses[rec.uses_begin] : kNone;
    };
    std::stable_sort(lazy_before.begin(), lazy_before.end(),
                     [&](std::uint32_t x, std::uint32_t y) { return first_use(x) < first_use(y); });
    for (std::uint32_t b : lazy_before) {
      if (dev_ + bytes(b) > o_.budget) {
        blocks_[b].state = State::Spilled;
        continue;
      }
      blocks_[b].state = State::Resident;
      dev_ += bytes(b);
    }
    note_device();
  }

  SimResult run() {
    std::uint32_t next_op = 0;
    bool running = false, force = false;
    std::uint32_t running_op = 0;
    double run_end = 0;
    std::vector<bool> issued(tl_.ops.size(), false);
    for (;;) {
      for (bool changed = true; changed;) {
        changed = false;
        if (running && run_end <= now_) {
          finish_op(running_op);
          running = false;
          changed = true;
        }
        if (d2h_.busy && d2h_.end <= now_) complete_spill(), changed = true;
        if (h2d_.busy && h2d_.end <= now_) complete_fetch(), changed = true;
        if (!d2h_.busy && start_spill()) changed = true;
        if (!h2d_.busy && start_fetch(force)) changed = true;
        if (!running && next_op < tl_.ops.size()) {
          if (!issued[next_op]) issue_prefetches(next_op), issued[next_op] = true;
          pending_op_ = next_op;
          if (try_start_op(next_op, force)) {
            pending_op_ = kNone;
            running = true;
            running_op = next_op++;
            run_end = now_ + static_cast<double>(tl_.ops[running_op].duration_ns);
            force = false;
            changed = true;
          }
        }
      }
      if (!running && next_op >= tl_.ops.size()) break;
      double next = kInf;
      if (running) next = std::min(next, run_end);
      if (d2h_.busy) next = std::min(next, d2h_.end);
      if (h2d_.busy) next = std::min(next, h2d_.end);
      if (next == kInf) {
        if (!d2h_.busy && start_spill()) continue;  // victims were just queued: start them
        // Nothing in flight can free memory: rather than deadlock, let the waiting
        // work exceed the budget and report it.
        force = true;
        continue;
      }
      now_ = next;
    }
    r_.step_ns = now_;
    r_.launch_start_ns.back() = now_;
    r_.compute_ns = static_cast<double>(tl_.compute_ns());
    r_.stall_ns = std::max(0.0, r_.step_ns - r_.compute_ns);
    return std::move(r_);
  }

 private:
  // The alternative followed furthest (then with the most tokens matched). A plan
  // with ordinals per token is aligned to this step; one without is followed as
  // far as the tokens agree; one without tokens is the step's own.
  void choose_plan(std::span<const StepPlan> plans) {
    std::uint32_t best = 0, best_matched = 0;
    for (std::size_t i = 0; i < plans.size(); ++i) {
      std::optional<AlignedPlan> aligned = align_plan(plans[i], tl_);
      std::uint32_t ops = 0, matched = 0;
      if (aligned) {
        ops = aligned->plan_ops, matched = aligned->matched_tokens;
      } else {
        ops = plans[i].expected_tokens.empty() ? static_cast<std::uint32_t>(tl_.ops.size())
                                               : tl_.ops_matching(plans[i].expected_tokens);
        matched = plans[i].expected_tokens.empty() ? 0 : static_cast<std::uint32_t>(common_prefix(plans[i].expected_tokens, tl_.tokens));
      }
      if (r_.plan_alternative >= 0 && (ops < best || (ops == best && matched <= best_matched))) continue;
      best = ops, best_matched = matched, r_.plan_alternative = static_cast<int>(i);
      if (aligned) {
        aligned_ = std::move(aligned->triggers);
        table_ = &aligned_;
      } else {
        table_ = &plans[i].triggers;
      }
    }
    r_.plan_ops = best;
  }

  std::span<const Trigger> triggers(std::uint32_t op) const {
    if (!table_ || op >= r_.plan_ops) return {};
    return table_->at(op);
  }

  std::uint32_t block_of(const Trigger& t) const {
    const std::uint32_t b = tl_.block_named(t.ordinal);
    return b == kNever ? kNone : b;
  }

  void note_device() {
    r_.peak_bytes = std::max(r_.peak_bytes, dev_);
    if (dev_ > o_.budget) r_.over_budget_bytes = std::max(r_.over_budget_bytes, dev_ - o_.budget);
    if (!o_.record_residency) return;
    if (!r_.residency.empty() && r_.residency.back().first == now_)
      r_.residency.back().second = dev_;
    else
      r_.residency.emplace_back(now_, dev_);
  }

  std::uint64_t bytes(std::uint32_t b) const { return tl_.blocks[b].bytes; }

  void audit(SimAudit::Kind kind, std::uint32_t b) const {
    if (o_.audit) o_.audit(SimAudit{kind, b, now_, dev_});
  }

  void release(std::uint32_t b) {
    dev_ -= bytes(b);
    note_device();
  }

  void enqueue_spill(std::uint32_t b, std::uint32_t release_after, bool urgent) {
    BlockState& s = blocks_[b];
    if (s.state != State::Resident || s.queued_out) return;
    s.queued_out = true;
    s.release_after = release_after;
    (urgent ? d2h_.urgent : d2h_.normal).push_back(b);
    if (urgent) ++r_.pressure_spills;
  }

  void enqueue_fetch(std::uint32_t b, bool urgent, bool planned) {
    BlockState& s = blocks_[b];
    if (s.state != State::Spilled) return;
    if (s.queued_in) {
      if (urgent) h2d_.urgent.push_back(b);  // promoted; the stale normal entry is skipped later
      return;
    }
    s.queued_in = true;
    s.prefetched = planned;
    (urgent ? h2d_.urgent : h2d_.normal).push_back(b);
  }

  static std::uint32_t pop_valid(std::deque<std::uint32_t>& q, auto valid) {
    while (!q.empty()) {
      const std::uint32_t b = q.front();
      q.pop_front();
      if (valid(b)) return b;
    }
    return kNone;
  }

  bool start_spill() {
    auto valid = [&](std::uint32_t b) { return blocks_[b].queued_out && blocks_[b].state == State::Resident; };
    std::uint32_t b = pop_valid(d2h_.urgent, valid);
    if (b == kNone) b = pop_valid(d2h_.normal, valid);
    if (b == kNone) return false;
    blocks_[b].queued_out = false;
    blocks_[b].state = State::Spilling;
    blocks_[b].copied = false;
    audit(SimAudit::Kind::SpillStart, b);
    d2h_.busy = true;
    d2h_.block = b;
    d2h_.end = now_ + o_.link.d2h_ns(static_cast<double>(bytes(b)));
    return true;
  }

  void complete_spill() {
    const std::uint32_t b = d2h_.block;
    d2h_.busy = false;
    BlockState& s = blocks_[b];
    r_.bytes_d2h += bytes(b);
    if (tl_.blocks[b].cls == LifetimeClass::Activation && !s.activation_counted) {
      s.activation_counted = true;
      r_.spilled_activation_bytes += bytes(b);
    }
    if (s.free_pending) {
      s.state = State::Freed;
      release(b);
      audit(SimAudit::Kind::Freed, b);
    } else if (s.state != State::Spilling) {
      // Taken back while copying (an unplanned use, or a prefetch that came first),
      // and possibly freed since: its device memory is accounted for already.
      ++r_.aborted_spills;
    } else if (s.release_after == kNone || s.release_after >= tl_.ops.size() || op_done_[s.release_after]) {
      s.state = State::Spilled;
      release(b);
      audit(SimAudit::Kind::Released, b);
    } else {
      s.copied = true;  // the host copy is ready; the device copy goes when its last reader ends
    }
  }

  bool start_fetch(bool force) {
    auto valid = [&](std::uint32_t b) { return blocks_[b].state == State::Spilled && blocks_[b].queued_in; };
    bool urgent = true;
    while (!h2d_.urgent.empty() && !valid(h2d_.urgent.front())) h2d_.urgent.pop_front();
    if (h2d_.urgent.empty()) {
      urgent = false;
      while (!h2d_.normal.empty() && !valid(h2d_.normal.front())) h2d_.normal.pop_front();
      if (h2d_.normal.empty()) return false;
    }
    auto& q = urgent ? h2d_.urgent : h2d_.normal;
    const std::uint32_t b = q.front();
    if (dev_ + bytes(b) > o_.budget && !force) {
      // A planned prefetch waits for memory; a demanded one makes room.
      if (urgent) make_room(dev_ + bytes(b) - o_.budget, pending_op_);
      return false;
    }
    q.pop_front();
    BlockState& s = blocks_[b];
    s.queued_in = false;
    s.state = State::Fetching;
    dev_ += bytes(b);
    note_device();
    audit(SimAudit::Kind::FetchStart, b);
    h2d_.busy = true;
    h2d_.block = b;
    h2d_.end = now_ + o_.link.h2d_ns(static_cast<double>(bytes(b)));
    return true;
  }

  void complete_fetch() {
    h2d_.busy = false;
    blocks_[h2d_.block].state = State::Resident;
    r_.bytes_h2d += bytes(h2d_.block);
    audit(SimAudit::Kind::FetchDone, h2d_.block);
  }

  std::uint64_t leaving_bytes() const {
    std::uint64_t n = 0;
    for (std::uint32_t b : d2h_.urgent) n += blocks_[b].queued_out ? bytes(b) : 0;
    for (std::uint32_t b : d2h_.normal) n += blocks_[b].queued_out ? bytes(b) : 0;
    if (d2h_.busy) n += bytes(d2h_.block);
    return n;
  }

  // Ask the chooser for victims worth `shortfall` bytes beyond what is already leaving.
  void make_room(std::uint64_t shortfall, std::uint32_t op) {
    const std::uint64_t leaving = leaving_bytes();
    if (leaving >= shortfall) return;
    candidates_.clear();
    for (std::uint32_t b = 0; b < tl_.blocks.size(); ++b) {
      const BlockState& s = blocks_[b];
      if (s.state != State::Resident || s.queued_out || in_use_by(op, b)) continue;
      candidates_.push_back({b, s.last_use});
    }
    chosen_.clear();
    victims_.choose(VictimQuery{tl_, candidates_, shortfall - leaving, op}, chosen_);
    std::uint64_t got = leaving;
    for (std::uint32_t b : chosen_) {
      if (got >= shortfall) break;
      if (b >= blocks_.size() || blocks_[b].state != State::Resident || blocks_[b].queued_out || in_use_by(op, b))
        continue;
      enqueue_spill(b, kNone, true);
      got += bytes(b);
    }
  }

  bool in_use_by(std::uint32_t op, std::uint32_t b) const {
    if (op == kNone || op >= tl_.ops.size()) return false;
    auto used = tl_.blocks_of(op);
    return std::find(used.begin(), used.end(), b) != used.end();
  }

  void issue_prefetches(std::uint32_t op) {
    for (const Trigger& t : triggers(op)) {
      if (t.action != Action::Prefetch && t.action != Action::Refetch) continue;
      const std::uint32_t b = block_of(t);
      if (b == kNone) continue;
      BlockState& s = blocks_[b];
      if (t.action == Action::Refetch && s.state != State::Spilled) continue;  // only what starts on the host
      if (s.state == State::Resident && s.queued_out) s.queued_out = false;  // never left: cancel
      if (s.state == State::Spilling) s.state = State::Resident;  // still copying out: keep it instead
      enqueue_fetch(b, false, true);
    }
  }

  bool try_start_op(std::uint32_t op, bool force) {
    for (const Trigger& t : triggers(op)) {
      if (t.action != Action::AwaitSpill) continue;
      const std::uint32_t b = block_of(t);
      if (b != kNone && (blocks_[b].state == State::Spilling || blocks_[b].queued_out)) return false;
    }
    bool ready = true;
    for (std::uint32_t b : tl_.blocks_of(op)) {
      BlockState& s = blocks_[b];
      switch (s.state) {
        case State::Resident:
          if (s.queued_out && !planned_reader(s, op)) s.queued_out = false;  // needed again: keep it
          break;
        case State::Spilling:
          if (!planned_reader(s, op)) s.state = State::Resident;  // unplanned use: the spill is abandoned
          break;
        case State::Spilled:
          if (!s.waited) s.waited = true, s.wait_since = now_;
          if (!s.queued_in) r_.demanded[b] = 1, ++r_.demand_fetches;
          enqueue_fetch(b, true, false);
          ready = false;
          break;
        case State::Fetching:
          if (!s.waited) s.waited = true, s.wait_since = now_;
          ready = false;
          break;
        case State::Absent:
        case State::Freed:
          break;  // a use outside the block's lifetime: the trace says so, nothing to fetch
      }
    }
    if (!ready) return false;
    // A lazy block (a granule-group member) this launch does not name takes
    // the device only where it has room then, else starts on the host.
    auto named_here = [&](std::uint32_t b) {
      const auto named = tl_.blocks_of(op);
      return std::find(named.begin(), named.end(), b) != named.end();
    };
    auto placed_later = [&](std::uint32_t b) { return tl_.blocks[b].lazy && !named_here(b); };
    std::uint64_t need = 0;
    for (std::uint32_t b : allocs_at_[op])
      if (!placed_later(b)) need += bytes(b);
    if (dev_ + need > o_.budget && !force) {
      make_room(dev_ + need - o_.budget, op);
      // Wait while something is leaving, or a fetch in flight may become a victim.
      if (leaving_bytes() > 0 || h2d_.busy) return false;
      // Nothing can leave: proceed over budget (reported) rather than deadlock.
    }
    for (std::uint32_t b : allocs_at_[op]) {
      if (placed_later(b)) {
        if (dev_ + need + bytes(b) > o_.budget) {
          blocks_[b].state = State::Spilled;  // its bytes are undefined: nothing to copy
          continue;
        }
        need += bytes(b);
      }
      blocks_[b].state = State::Resident, blocks_[b].last_use = now_;
    }
    dev_ += need;
    note_device();
    r_.launch_start_ns[op] = now_;
    audit(SimAudit::Kind::OpStart, op);
    for (std::uint32_t b : tl_.blocks_of(op)) {
      BlockState& s = blocks_[b];
      if (s.waited) {
        r_.late_ns[b] += now_ - s.wait_since;
        if (s.prefetched) ++r_.late_prefetches;
        s.waited = false;
        s.prefetched = false;
      } else if (s.prefetched) {
        ++r_.prefetch_hits;
        s.prefetched = false;
      }
      s.last_use = now_;
    }
    return true;
  }

  void finish_op(std::uint32_t op) {
    op_done_[op] = true;
    audit(SimAudit::Kind::OpEnd, op);
    for (std::uint32_t b : frees_at_[op + 1]) {
      BlockState& s = blocks_[b];
      s.queued_out = s.queued_in = false;
      switch (s.state) {
        case State::Resident:
        case State::Fetching:  // the copy lands in memory that is released with it
          s.state = State::Freed;
          release(b);
          audit(SimAudit::Kind::Freed, b);
          break;
        case State::Spilling:
          if (s.copied) {
            s.state = State::Freed;
            release(b);
            audit(SimAudit::Kind::Freed, b);
          } else {
            s.free_pending = true;
          }
          break;
        default:
          s.state = State::Freed;
          audit(SimAudit::Kind::Freed, b);
          break;
      }
    }
    // Spills whose copy finished early release once their last planned reader is done.
    for (std::uint32_t b : tl_.blocks_of(op)) {
      BlockState& s = blocks_[b];
      if (s.state == State::Spilling && s.copied && s.release_after == op) {
        s.state = State::Spilled;
        s.copied = false;
        release(b);
        audit(SimAudit::Kind::Released, b);
      }
    }
    for (const Trigger& t : triggers(op)) {
      if (t.action != Action::Spill) continue;
      const std::uint32_t b = block_of(t);
      if (b != kNone) enqueue_spill(b, std::max(t.release_after, op), false);
    }
  }

  const StepTimeline& tl_;
  VictimChooser& victims_;
  const SimOptions& o_;
  TriggerTable aligned_;                   // the plan followed, moved onto this step, when it was aligned
  const TriggerTable* table_ = nullptr;   // the triggers followed, keyed by this step's launches
  std::vector<BlockState> blocks_;
  std::vector<std::vector<std::uint32_t>> allocs_at_, frees_at_;
  std::vector<bool> op_done_;
  std::vector<VictimCandidate> candidates_;
  std::vector<std::uint32_t> chosen_;
  CopyEngine d2h_, h2d_;
  std::uint64_t dev_ = 0;
  std::uint32_t pending_op_ = kNone;  // the launch the compute stream is waiting to start
  double now_ = 0;
  SimResult r_;
};

}  // namespace

void SafeReactive::choose(const VictimQuery& q, std::vector<std::uint32_t>& out) {
  std::vector<VictimCandidate> c(q.candidates.begin(), q.candidates.end());
  std::sort(c.begin(), c.end(), [&](const VictimCandidate& a, const VictimCandidate& b) {
    const bool la = !q.timeline.blocks[a.block].predates_step(), lb = !q.timeline.blocks[b.block].predates_step();
    return la != lb ? la : a.last_use_ns < b.last_use_ns;
  });
  for (const auto& v : c) out.push_back(v.block);
}

double SimResult::prefetch_hit_rate() const {
  const double total = prefetch_hits + late_prefetches + demand_fetches;
  return total == 0 ? -1 : prefetch_hits / total;
}

SimResult simulate_step(const StepTimeline& tl, std::span<const StepPlan> plans, VictimChooser& victims,
                        const SimOptions& options) {
  return Model(tl, plans, victims, options).run();
}

}  // namespace tierrt::policy
