#include "granule_table.h"

#include <sys/mman.h>

namespace tierrt::alloc {

GranuleTable::GranuleTable(unsigned granule_shift) noexcept {
  view_.shift = granule_shift > kLeafShift ? kLeafShift : granule_shift;
  leaf_entries_ = std::size_t{1} << (kLeafShift - view_.shift);
  view_.leaf_mask = leaf_entries_ - 1;
  // 2 MiB of zero pages that the kernel backs only where touched.
  void* p = mmap(nullptr, kTopEntries * sizeof(std::atomic<Entry*>),
                 PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) return;  // valid() is false: every insert fails, every find misses
  top_ = static_cast<std::atomic<Entry*>*>(p);
  view_.top = top_;
  view_.top_entries = kTopEntries;
}

std::size_t GranuleTable::leaf_bytes() const noexcept {
  return leaf_entries_ * sizeof(Entry);
}

GranuleTable::~GranuleTable() {
  if (top_ == nullptr) return;
  for (std::size_t i = 0; i < kTopEntries; ++i) {
    Entry* l = top_[i].load(std::memory_order_relaxed);
    if (l != nullptr) munmap(l, leaf_bytes());
  }
  munmap(top_, kTopEntries * sizeof(std::atomic<Entry*>));
}

GranuleTable::Entry* GranuleTable::leaf_for(std::uintptr_t addr) {
  const std::uintptr_t top = addr >> kLeafShift;
  if (top >= view_.top_entries) return nullptr;
  Entry* l = top_[top].load(std::memory_order_acquire);
  if (l != nullptr) return l;
  std::lock_guard<RankedMutex> g(grow_mu_);
  l = top_[top].load(std::memory_order_acquire);
  if (l == nullptr) {
    // Leaves live in mmap'd memory like the top level, so the only pointers
    // to them are in memory leak checkers do not scan either way; zero pages
    // are the empty entries.
    void* p = mmap(nullptr, leaf_bytes(), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return nullptr;
    l = static_cast<Entry*>(p);
    top_[top].store(l, std::memory_order_release);
  }
  return l;
}

bool GranuleTable::insert(std::uintptr_t base, std::size_t len, std::uintptr_t value) {
  const std::uintptr_t g = std::uintptr_t{1} << view_.shift;
  if (len == 0 || (base & (g - 1)) != 0 || (len & (g - 1)) != 0) return false;
  if (((base + len - 1) >> kLeafShift) >= view_.top_entries) return false;
  for (std::uintptr_t a = base; a < base + len; a += g)
    if (leaf_for(a) == nullptr) return false;
  for (std::uintptr_t a = base; a < base + len; a += g)
    top_[a >> kLeafShift].load(std::memory_order_relaxed)[(a >> view_.shift) & view_.leaf_mask].store(
        value, std::memory_order_release);
  return true;
}

void GranuleTable::erase(std::uintptr_t base, std::size_t len) noexcept {
  const std::uintptr_t g = std::uintptr_t{1} << view_.shift;
  for (std::uintptr_t a = base; a < base + len; a += g) {
    if ((a >> kLeafShift) >= view_.top_entries) return;
    Entry* l = top_[a >> kLeafShift].load(std::memory_order_acquire);
    if (l != nullptr) l[(a >> view_.shift) & view_.leaf_mask].store(0, std::memory_order_release);
  }
}

}  // namespace tierrt::alloc
