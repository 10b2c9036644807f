#include "faults.h"

#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <map>
#include <mutex>
#include <sstream>

#include "proc_table.h"

namespace simdev {

namespace {

struct Armed {
  unsigned long long nth = 0;     // fail the call with this count
  unsigned long long calls = 0;   // calls seen since armed
  int error = 0;                  // 0: the site's own resource error
  bool pause = false;             // instead of failing, the call waits for release_pauses()
};

struct FaultTable {
  std::mutex mu;
  std::map<std::string, Armed> armed;
  unsigned long long fired = 0;  // faults that made their call fail, ever
  // Calls held by a pause, and how many releases happened: a held call goes
  // on once the count passes the one it saw.
  std::condition_variable changed;
  unsigned long long paused = 0, releases = 0;
};

FaultTable& table() {
  static FaultTable* t = new FaultTable;  // never destroyed: used until exit
  return *t;
}

}  // namespace

std::atomic<bool>& FaultSite::armed_any() {
  static std::atomic<bool> any{false};
  return any;
}

FaultSite::FaultSite(const char* name, CUresult resource_error)
    : name_(name), resource_error_(resource_error) {}

CUresult FaultSite::hit_slow() {
  FaultTable& t = table();
  std::lock_guard lock(t.mu);
  auto it = t.armed.find(name_);
  if (it == t.armed.end()) return CUDA_SUCCESS;
  Armed& a = it->second;
  if (++a.calls != a.nth) return CUDA_SUCCESS;
  if (a.pause) {
    t.armed.erase(it);
    if (t.armed.empty()) armed_any().store(false);
    std::unique_lock held(t.mu, std::adopt_lock);
    const unsigned long long release = t.releases;
    ++t.paused;
    t.changed.notify_all();
    t.changed.wait(held, [&] { return t.releases != release; });
    --t.paused;
    held.release();  // the guard above unlocks
    return CUDA_SUCCESS;
  }
  CUresult e = a.error ? static_cast<CUresult>(a.error) : resource_error_;
  t.armed.erase(it);
  ++t.fired;
  if (t.armed.empty()) armed_any().store(false);
  return e;
}

bool arm_fault(const std::string& name, unsigned long long nth, int error, bool pause) {
  if (nth == 0 || !is_implemented_name(name)) return false;
  FaultTable& t = table();
  std::lock_guard lock(t.mu);
  t.armed[name] = Armed{nth, 0, error, pause};
  FaultSite::armed_any().store(true);
  return true;
}

unsigned long long faults_fired() {
  FaultTable& t = table();
  std::lock_guard lock(t.mu);
  return t.fired;
}

bool wait_paused(unsigned long long ms) {
  FaultTable& t = table();
  std::unique_lock lock(t.mu);
  return t.changed.wait_for(lock, std::chrono::milliseconds(ms), [&] { return t.paused != 0; });
}

void release_pauses() {
  FaultTable& t = table();
  std::lock_guard lock(t.mu);
  ++t.releases;
  t.changed.notify_all();
}

void clear_faults() {
  FaultTable& t = table();
  std::lock_guard lock(t.mu);
  t.armed.clear();
  FaultSite::armed_any().store(false);
}

std::string arm_faults_from_spec(const std::string& spec) {
  std::stringstream ss(spec);
  std::string item;
  while (std::getline(ss, item, ',')) {
    auto colon = item.find(':');
    std::string name = item.substr(0, colon);
    char* end = nullptr;
    unsigned long long nth = 0;
    if (colon != std::string::npos) nth = std::strtoull(item.c_str() + colon + 1, &end, 10);
    if (colon == std::string::npos || nth == 0 || *end != '\0')
      return "simdev: SIMDEV_FAIL=\"" + spec + "\": \"" + item +
             "\" is not name:N (N >= 1), e.g. cuMemCreate:3";
    if (!arm_fault(name, nth, 0, false))
      return "simdev: SIMDEV_FAIL=\"" + spec + "\": " + name +
             " is not a function simdev implements (use the exported name, e.g. cuMemcpyDtoHAsync_v2)";
  }
  return {};
}

}  // namespace simdev

// ---- simdev.h ----

extern "C" __attribute__((visibility("default"))) int simdev_inject_fault(const char* name, unsigned long long nth,
                                                                          int error) {
  return name && simdev::arm_fault(name, nth, error, false) ? 0 : -1;
}

extern "C" __attribute__((visibility("default"))) int simdev_inject_pause(const char* name, unsigned long long nth) {
  return name && simdev::arm_fault(name, nth, 0, true) ? 0 : -1;
}

extern "C" __attribute__((visibility("default"))) int simdev_wait_paused(unsigned long long ms) {
  return simdev::wait_paused(ms) ? 1 : 0;
}

extern "C" __attribute__((visibility("default"))) void simdev_release_pauses(void) { simdev::release_pauses(); }

extern "C" __attribute__((visibility("default"))) void simdev_clear_faults(void) { simdev::clear_faults(); }

extern "C" __attribute__((visibility("default"))) unsigned long long simdev_faults_fired(void) {
  return simdev::faults_fired();
}
