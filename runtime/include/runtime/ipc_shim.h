// IPC of memory tierrt hands out. tierrt's allocations are VMM chunks, which
// legacy IPC (cuIpcGetMemHandle) does not share; so for them the handle is
// tierrt's own record of the chunk, exported as a POSIX file descriptor, and
// a process running tierrt opens it by taking that fd from the exporter
// (pidfd_getfd) and mapping the chunk itself. An exported block is pinned
// resident: its chunk is what the other process maps, so it must never move.
//
// Handles without tierrt's tag, and pointers tierrt did not hand out, are the
// driver's (the hooks forward them). Not on any hot path: each call makes
// several driver calls and may take the registries' lock.
#pragma once

#include <cuda.h>

#include <cstdint>

namespace tierrt {

class Engine;

namespace ipc {

// What tierrt writes into a CUipcMemHandle's 64 bytes.
struct Record {
  static constexpr std::uint32_t kMagic = 0x74497043;  // "CpIt"
  static constexpr std::uint16_t kVersion = 1;
  std::uint32_t magic = kMagic;
  std::uint16_t version = kVersion;
  std::uint16_t reserved = 0;
  std::int32_t pid = 0;           // the exporter
  std::int32_t fd = -1;           // the chunk's fd, in the exporter
  std::uint64_t offset = 0;       // of the allocation in its chunk
  std::uint64_t bytes = 0;        // the allocation's size
  std::uint64_t chunk_bytes = 0;  // the chunk's size
  std::uint64_t buffer_id = 0;    // the exporter's allocation
};
static_assert(sizeof(Record) <= sizeof(CUipcMemHandle));

// True when `h` carries tierrt's tag.
bool is_tierrt_handle(const CUipcMemHandle& h) noexcept;

// cuIpcGetMemHandle of `p` when it is memory `e` handed out: pins the
// block for good, exports its chunk and writes the record. False (and
// *result untouched) when `p` is not tierrt's: the driver's to answer.
bool get_handle(Engine& e, CUipcMemHandle* out, CUdeviceptr p, CUresult* result) noexcept;

// cuIpcOpenMemHandle of a tierrt handle (is_tierrt_handle): maps the
// exporter's chunk here and returns the allocation's address in it; a
// handle this process opened already is counted again, same address.
CUresult open_handle(const CUipcMemHandle& h, CUdeviceptr* out) noexcept;

// cuIpcCloseMemHandle: false when `p` is not an address open_handle
// returned (the driver's then); else unmaps at the last close.
bool close_handle(CUdeviceptr p, CUresult* result) noexcept;

// cuMemRetainAllocationHandle of memory `e` handed out: the block is pinned
// for good before the handle goes out (the application may export it).
// False when `p` is not tierrt's.
bool before_retain(Engine& e, CUdeviceptr p, CUresult* result) noexcept;

// CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE of tierrt's memory: its
// chunks can be exported as POSIX fds (the device supports them).
bool exportable_memory() noexcept;

}  // namespace ipc
}  // namespace tierrt
