// The device side of the allocator: the context and its device, address
// ranges, the physical chunks behind them (new, or spares an earlier spill
// left), the device budget those chunks are held against, and the table that
// maps any device pointer to whoever owns its granule.
#pragma once

#include <cuda.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>

#include "allocator/block.h"
#include "budget.h"
#include "chunk_spares.h"
#include "granule_table.h"

namespace tierrt::alloc {

// Who asks for device memory, as the rescue needs to know: whether it may
// spill other blocks to make room, which blocks it holds pinned (a launch
// being made resident), which only it can unpin, whether it may pass the
// budget when nothing more can be freed (an allocation, a launch's fetch: the
// budget is a target, and the driver's own out-of-memory decides), and
// whether it holds a claim (BlockStates::Claim, a fetch) that the rescue must
// not wait for.
struct Claimant {
  bool may_spill = true;
  std::span<Block* const> pinned = {};
  bool may_exceed_budget = true;
  bool holds_claim = false;
};

// Gives device memory back when a reservation does not fit (the allocator's
// rescue: trim caches and spares, spill idle blocks).
class Reclaimer {
 public:
  // Returns once device memory was freed or something that may free some
  // changed (true), or at once when nothing can (false).
  virtual bool make_room(std::uint64_t bytes, const Claimant& who) noexcept = 0;
  // A claim passed the budget: `used` bytes are now held against `limit`.
  virtual void over_budget(std::uint64_t used, std::uint64_t limit) noexcept = 0;

 protected:
  ~Reclaimer() = default;
};

// A mapped VA range and the chunk behind it.
struct DeviceRange {
  CUdeviceptr va = 0;
  std::size_t bytes = 0;
  CUmemGenericAllocationHandle chunk = 0;
};

class DeviceArena {
 public:
  using Handle = CUmemGenericAllocationHandle;
  static constexpr std::size_t kMaxPeers = 64;  // device ordinals a peer mask holds

  DeviceArena() = default;
  DeviceArena(const DeviceArena&) = delete;
  DeviceArena& operator=(const DeviceArena&) = delete;
  ~DeviceArena();

  // Binds to the context current on the calling thread. budget: 0 for the
  // device's memory less a reserve.
  CUresult init(std::uint64_t budget) noexcept;
  void set_reclaimer(Reclaimer* r) noexcept { reclaimer_ = r; }

  CUcontext context() const noexcept { return ctx_; }
  CUdevice device() const noexcept { return dev_; }
  std::size_t granularity() const noexcept { return gran_; }
  std::size_t round_up(std::size_t bytes) const noexcept { return (bytes + gran_ - 1) / gran_ * gran_; }
  GranuleTable& table() noexcept { return *table_; }
  const GranuleTable& table() const noexcept { return *table_; }
  const Budget& budget() const noexcept { return budget_; }
  std::uint64_t spare_bytes() const noexcept { return spares_.bytes(); }
  // Chunks made now can be exported as POSIX fds.
  bool exportable() const noexcept { return exportable_.load(std::memory_order_relaxed); }

  // A new range of `bytes` (a multiple of the granularity) with its own
  // chunk, mapped read-write for the device and entered in the table as
  // `owner`. Nothing is left behind on failure.
  CUresult create_range(std::size_t bytes, std::uintptr_t owner, const Claimant& who,
                        DeviceRange* out) noexcept;
  // Unmaps, releases and forgets a range create_range made (chunk 0: a
  // range whose chunk is gone already).
  void destroy_range(const DeviceRange& r) noexcept;

  // A chunk of `bytes` held against the budget: a spare of that size, or a
  // new one (the reclaimer makes room when it does not fit). `created`, when
  // given, says which: true for a new one (a cuMemCreate call).
  CUresult obtain_chunk(std::size_t bytes, Handle* out, const Claimant& who, bool* created = nullptr) noexcept;
  // The same without a rescue or passing the budget: a spare, or a new
  // chunk where the budget and the driver have room now. False otherwise.
  bool obtain_chunk_at_once(std::size_t bytes, Handle* out, bool* created = nullptr) noexcept;
  // A chunk nobody maps any more: kept as a spare, or released.
  void give_chunk(Handle h, std::size_t bytes) noexcept;
  // Returns a chunk to the driver and its bytes to the budget.
  void release_chunk(Handle h, std::size_t bytes) noexcept;
  // Returns spares to the driver, largest first, until `bytes` (or all).
  std::uint64_t release_spares(std::uint64_t bytes) noexcept;

  // Maps `h` at `va`, read-write for the device and, when `host` is not
  // null, for that host location too. On failure nothing is left mapped at
  // `va`, unless the unmap that undoes a half-made mapping failed as well
  // (then `*stuck`, when given, is set: `h` is still mapped there).
  CUresult map(CUdeviceptr va, std::size_t bytes, Handle h, const CUmemLocation* host = nullptr,
               bool* stuck = nullptr) noexcept;
  // Unmaps [va, va + bytes), the call asked again when it fails: a mapping
  // left behind by one failed unmap is a VA no later fetch can map (and, in
  // an undo, a chunk that cannot be given back).
  static CUresult unmap(CUdeviceptr va, std::size_t bytes) noexcept;
  CUresult reserve_address(std::size_t bytes, CUdeviceptr* va) noexcept;

  // Device `peer` may reach this device's memory (the application enabled
  // peer access to it): every mapping made from now on is read-write for
  // it too, and those in place are granted now. Enabling peer access does
  // not extend to VMM mappings; each peer needs cuMemSetAccess. False when
  // `peer` is out of range or a mapping in place could not be granted.
  bool add_peer(CUdevice peer) noexcept;
  bool has_peers() const noexcept { return peers_.load(std::memory_order_acquire) != 0; }
  void free_address(CUdeviceptr va, std::size_t bytes) noexcept;

 private:
  bool reserve(std::uint64_t bytes, const Claimant& who) noexcept;
  // `rescue`: the driver's out-of-memory has the reclaimer make room, then
  // the chunk is asked for again.
  CUresult create_chunk(std::size_t bytes, Handle* out, const Claimant& who, bool rescue = true) noexcept;

  CUcontext ctx_ = nullptr;
  CUdevice dev_ = 0;
  std::size_t gran_ = 2u << 20;
  std::unique_ptr<GranuleTable> table_;
  Budget budget_;
  ChunkSpares spares_;  // unmapped chunks; their bytes stay held against the budget
  Reclaimer* reclaimer_ = nullptr;
  // New chunks are exportable as POSIX fds (the device supports them and
  // no cuMemCreate refused one yet).
  std::atomic<bool> exportable_{false};
  // Bit d: device d is granted access to every mapping (add_peer). Set
  // before the mappings in place are granted, read after each cuMemMap:
  // a mapping made meanwhile is granted by one side or the other.
  std::atomic<std::uint64_t> peers_{0};
};

}  // namespace tierrt::alloc
