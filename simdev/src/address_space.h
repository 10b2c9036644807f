// The simulated device's memory: one address space shared with the host, as
// with UVA. Device virtual addresses live in one big PROT_NONE arena, so an
// address that is reserved-but-unmapped, freed, or never handed out is
// recognisably "device, not backed" and work touching it fails with
// CUDA_ERROR_ILLEGAL_ADDRESS instead of reading whatever is there.
//
// Physical allocations are ranges of one shared memfd, or memfds of their
// own where they may be exported (DEVICE ones count against SIMDEV_MEM,
// HOST/HOST_NUMA ones against host memory); cuMemMap maps the memory at the VA
// with no access, cuMemSetAccess opens it, cuMemUnmap returns the range to
// PROT_NONE (resident memory stays mapped there with no access: a ghost, see
// ghosts_). Pinned host memory (cuMemHostAlloc/Register) is tracked by range.
// That memory and cuMemHostAlloc's pages come from the resident pool
// (phys_pool.h).
#pragma once

#include <atomic>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <unordered_map>
#include <vector>

#include "common.h"
#include "config.h"

namespace simdev {

struct PhysAlloc {
  int fd = -1;  // -1: anonymous shared memory (cuMemAlloc)
  uint64_t fd_offset = 0;  // where its bytes start in fd
  bool carved = false;  // fd is the shared memfd (carved_memory.h), never closed here
  bool resident = false;  // its pages are allocated (phys_pool.h): recycled when released
  uint64_t size = 0;
  CUmemAllocationProp prop{};
  bool on_host = false;  // HOST / HOST_NUMA location
  std::atomic<uint64_t>* counter = nullptr;  // capacity it is charged to
  ~PhysAlloc();
};

struct Mapping {
  uint64_t va = 0, size = 0, offset = 0;
  std::shared_ptr<PhysAlloc> phys;
  CUmemAccess_flags device_access = CU_MEM_ACCESS_FLAGS_PROT_NONE;  // the most any device has
  CUmemAccess_flags host_access = CU_MEM_ACCESS_FLAGS_PROT_NONE;
  CUmemAccess_flags per_device[kMaxDevices] = {};  // what cuMemSetAccess gave each device
  int applied_prot = 0;  // the protection its pages have now (PROT_*)
  // Mapped again where a ghost moved off this VA waits (AddressSpace::Ghost):
  // the VA holds nothing until a protection other than PROT_NONE is applied,
  // which moves the ghost back, page tables and all (ghost_prot: the
  // protection it has). 0: none.
  uint64_t ghost_at = 0, ghost_area = 0, ghost_area_size = 0;
  int ghost_prot = 0;
  // Its page tables are filled (resident memory): by the first copy or
  // memset that touches it (begin_use), inside the copy's modeled time.
  struct FillFlag {
    mutable std::atomic<bool> v{false};
    FillFlag() = default;
    explicit FillFlag(bool b) : v(b) {}
    FillFlag(const FillFlag& o) : v(o.v.load()) {}
    FillFlag& operator=(const FillFlag& o) {
      v = o.v.load();
      return *this;
    }
  } filled;
};

enum class Origin { kReserve, kMemAlloc, kIpcOpen };  // kIpcOpen: cuIpcOpenMemHandle's

struct Reservation {
  uint64_t base = 0, size = 0;
  uint64_t user_size = 0;  // what cuMemAlloc was asked for
  Origin origin = Origin::kReserve;
  uint64_t buffer_id = 0;
  // cuMemAlloc memory: the device it is on, the context that allocated it,
  // and the devices whose kernels may access it (a bit each: its own, and
  // peers that enabled access to that context).
  int device = 0;
  const void* owner = nullptr;
  unsigned device_mask = 0;
  std::map<uint64_t, Mapping> maps;  // by VA
};

struct HostRange {
  uint64_t base = 0, size = 0;
  unsigned flags = 0;
  bool owned = false;  // cuMemHostAlloc (we munmap) vs cuMemHostRegister
  uint64_t buffer_id = 0;
  bool resident = false;  // cuMemHostAlloc from the resident pool (phys_pool.h)
};

// What a pointer is, for pointer attributes, copies and launch checks.
struct Resolved {
  enum Kind { kUnknown, kDeviceMapped, kDeviceUnbacked, kPinnedHost } kind = kUnknown;
  uint64_t range_base = 0, range_size = 0;
  bool host_backed = false;  // device VA backed by a HOST/HOST_NUMA handle
  uint64_t buffer_id = 0;
};

// One memory access that queued work is about to make.
struct Access {
  uint64_t ptr = 0, bytes = 0;
  bool write = false;
};

class AddressSpace {
 public:
  CUresult init(uint64_t va_bytes, uint64_t device_capacity, uint64_t host_capacity);
  bool in_arena(uint64_t p) const { return p >= arena_base_ && p < arena_base_ + arena_size_; }

  CUresult reserve(uint64_t size, uint64_t alignment, uint64_t hint, uint64_t* out);
  CUresult free_reservation(uint64_t base, uint64_t size);

  CUresult create(uint64_t size, const CUmemAllocationProp& prop, CUmemGenericAllocationHandle* out);
  CUresult release(CUmemGenericAllocationHandle h);
  CUresult retain(uint64_t addr, CUmemGenericAllocationHandle* out);
  CUresult properties(CUmemGenericAllocationHandle h, CUmemAllocationProp* out);
  CUresult map(uint64_t va, uint64_t size, uint64_t offset, CUmemGenericAllocationHandle h);
  CUresult unmap(uint64_t va, uint64_t size);
  CUresult set_access(uint64_t va, uint64_t size, const CUmemAccessDesc* desc, size_t count);
  CUresult get_access(unsigned long long* flags, const CUmemLocation& loc, uint64_t va);

  // `device_mask`: the devices whose kernels may access it (see Reservation).
  CUresult mem_alloc(uint64_t size, int device, const void* owner, unsigned device_mask, uint64_t* out);
  // Peer access to `owner`'s cuMemAlloc memory changed.
  void set_memalloc_access(const void* owner, unsigned device_mask);
  CUresult mem_free(uint64_t base);

  // Sharing physical memory with other processes (address_space_ipc.cpp).
  // A new fd for the memory of a handle created with POSIX_FD requested.
  CUresult export_fd(CUmemGenericAllocationHandle h, int* fd);
  // A handle for the memory behind `fd` (an exported fd of this process or
  // another one); the caller keeps `fd`.
  CUresult import_fd(int fd, CUmemGenericAllocationHandle* out);
  // Legacy IPC of the cuMemAlloc allocation at `base`: the fd (of this
  // process) that holds its memory, its size and buffer id.
  CUresult ipc_export(uint64_t base, int* fd, uint64_t* bytes, uint64_t* buffer_id);
  // Maps the memory of `fd` (this process's copy of the exporter's fd) for
  // the exporter's allocation `key`, as cuMemAlloc memory of `owner` on
  // `device` (see mem_alloc); one opened already is counted again and keeps
  // its address. Takes ownership of `fd`.
  CUresult ipc_open(int fd, uint64_t bytes, uint64_t key, int device, const void* owner, unsigned device_mask,
                    uint64_t* out);
  CUresult ipc_close(uint64_t base);

  CUresult host_alloc(uint64_t size, unsigned flags, void** out);
  CUresult host_free(void* p);
  CUresult host_register(void* p, uint64_t size, unsigned flags);
  CUresult host_unregister(void* p);

  Resolved resolve(uint64_t p) const;

  // Whether device memory an access names is mapped, with the access it
  // needs, now. Copies and memsets are checked so when they are called:
  // NVIDIA's driver (580) refuses one naming unmapped memory at the call.
  bool mapped(const Access& a) const;

  // Queued work calls begin_use() right before it touches memory and
  // end_use() right after. begin_use() fails with ILLEGAL_ADDRESS when an
  // access names device VA that is not mapped with the access it needs. A
  // concurrent unmap of a range in use waits for the work, then poisons the
  // context: the real device would have faulted.
  // `fill`, if not null, gets the ranges of resident memory the accesses
  // touch whose mappings' page tables are not all filled yet: the caller
  // fills them (fill_page_tables) while the use is active, before touching
  // them.
  CUresult begin_use(const Access* accesses, size_t n, uint64_t* token,
                     std::vector<std::pair<uint64_t, uint64_t>>* fill = nullptr);
  // Fills the host's page tables for [begin, end) of resident memory, so
  // that the copy that follows takes no fault per page (a GPU's page tables
  // are written once, at map, with 2 MiB pages).
  static void fill_page_tables(uint64_t begin, uint64_t end);
  void end_use(uint64_t token);

  // Kernels of several devices (SIMDEV_DEVICES) take turns: while one
  // device's kernels run, memory that device may not access (cuMemSetAccess,
  // peer access) has its pages protected so that touching it faults, as on
  // that device; copies, which any device's copy engine may make, wait for
  // the turn to end when they need such memory. One process has one set of
  // page tables, so the view cannot be per thread.
  void enter_device_view(int device);
  void leave_device_view();

  uint64_t device_used(int device) const { return device_used_[device].load(); }
  uint64_t device_used_total() const;
  uint64_t host_used() const { return host_used_.load(); }
  uint64_t device_capacity() const { return device_capacity_; }

 private:
  struct ActiveUse {
    uint64_t token;
    std::vector<std::pair<uint64_t, uint64_t>> ranges;  // [begin, end)
  };

  CUresult alloc_va(uint64_t size, uint64_t alignment, uint64_t hint, uint64_t* out);
  void free_va(uint64_t base, uint64_t size);
  Reservation* reservation_of(uint64_t p);
  const Reservation* reservation_of(uint64_t p) const;
  const HostRange* host_range_of(uint64_t p) const;
  // `hidden`, if not null, is set when the access needs memory the current
  // device view protects (then nothing is added to `ranges` or `fill`).
  CUresult check_access_locked(const Access& a, std::vector<std::pair<uint64_t, uint64_t>>& ranges,
                               std::vector<std::pair<uint64_t, uint64_t>>* fill = nullptr,
                               bool* hidden = nullptr) const;
  // Caller holds mu_ exclusively. `poison`: memory is being taken away from
  // the work (a GPU would fault); otherwise only its protection changes.
  void wait_until_unused(uint64_t begin, uint64_t end, bool poison = true);
  // The protection `m` has in device view `view` (-1: no device's, as
  // copies see memory) and applying it (caller holds mu_ exclusively;
  // `wait`: work still using memory that loses access finishes first).
  int prot_in_view(const Reservation& r, const Mapping& m, int view) const;
  bool reprotect_locked(const Reservation& r, Mapping& m, bool wait);
  // Enters `r` at `base` (its buffer id given here) with one read-write
  // mapping of `phys` over its first `bytes`, as cuMemAlloc's and an IPC
  // open's memory is: mapped whole, for its device.
  void place_whole_locked(uint64_t base, uint64_t bytes, Reservation r, std::shared_ptr<PhysAlloc> phys);
  void apply_view(int view);  // caller holds turn_mu_ with no kernel running
  void restore_copy_view();
  std::shared_ptr<PhysAlloc> new_phys(uint64_t size, const CUmemAllocationProp& prop, bool anonymous, CUresult* err);
  // Ghosts (caller holds mu_ exclusively): those overlapping [begin, end)
  // are unmapped for good; those of released memory too.
  void drop_ghosts(uint64_t begin, uint64_t end);
  void drop_dead_ghosts();
  // A carved handle's bytes move to a memfd of its own, at every address
  // that maps it, once work using them finished (address_space_ipc.cpp).
  CUresult move_to_own_memfd_locked(const std::shared_ptr<PhysAlloc>& phys);

  uint64_t arena_base_ = 0, arena_size_ = 0, bump_ = 0;
  std::map<uint64_t, uint64_t> free_va_;  // base -> size, below bump_
  uint64_t device_capacity_ = 0, host_capacity_ = 0;  // device capacity is each device's
  std::atomic<uint64_t> device_used_[kMaxDevices] = {}, host_used_{0};

  mutable std::shared_mutex mu_;
  std::map<uint64_t, Reservation> reservations_;  // by base
  std::map<uint64_t, HostRange> host_ranges_;     // by base
  struct HandleEntry {
    std::shared_ptr<PhysAlloc> phys;
    int user_refs = 0;
  };
  std::unordered_map<CUmemGenericAllocationHandle, HandleEntry> handles_;
  // A mapping of resident memory that cuMemUnmap left in place with no
  // access (PROT_NONE: still unbacked to every access), so that its page
  // tables survive: mapping the same memory at the same VA again, as a
  // tiering allocator does with its chunks, then refills nothing. Only
  // simdev's bookkeeping (reservations_) says what is mapped; a ghost goes
  // once its VA is mapped otherwise or freed, or its memory released.
  // A ghost is moved off its VA where Linux allows (`at`: mremap took its
  // page tables to a private region [area, area + area_size), and the VA
  // holds nothing): cuMemUnmap then costs microseconds instead of a walk of
  // every page-table entry, and the ghost's teardown, when it goes, is left to
  // another thread (unmap_reaper.h). `at` 0: the ghost is in place, PROT_NONE.
  struct Ghost {
    uint64_t size = 0, offset = 0;
    std::weak_ptr<PhysAlloc> phys;
    bool filled = false;
    uint64_t at = 0, area = 0, area_size = 0;
    int prot = 0;  // a moved ghost's protection
  };
  // Moves the mapping at [va, va + size) off the VA into a ghost (false:
  // Linux would not, nothing changed).
  bool move_to_ghost(uint64_t va, uint64_t size, Ghost* g);
  // Tears a ghost down: in place, the VA goes back to PROT_NONE anonymous
  // memory; moved, its private region goes (later, on another thread).
  static void bury(uint64_t va, const Ghost& g);
  // A mapping whose ghost waits (Mapping::ghost_at) takes it back at its VA
  // (false: it could not, and the VA maps its memory afresh).
  static bool take_ghost_back(Mapping& m);
  std::map<uint64_t, Ghost> ghosts_;  // by VA
  uint64_t next_handle_ = 1, next_buffer_id_ = 1;
  // Allocations of other processes opened with cuIpcOpenMemHandle: by the
  // exporter's key, their base here and how often they were opened.
  struct IpcOpened {
    uint64_t base = 0;
    int refs = 0;
  };
  std::map<uint64_t, IpcOpened> ipc_opened_;

  // Device turns (enter_device_view). Lock order: turn_mu_, mu_, use_mu_.
  std::mutex turn_mu_;
  std::condition_variable turn_cv_;
  int view_ = -1;  // whose view the pages show (-1: copies'); changed under turn_mu_ and mu_
  int running_ = 0;  // kernels running in view_
  int waiting_ = 0;  // kernels and copies waiting for another view

  std::mutex use_mu_;
  std::condition_variable use_cv_;
  std::vector<ActiveUse> active_;
  uint64_t next_token_ = 1;
};

}  // namespace simdev
