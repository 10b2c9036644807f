// Host implementations of kernels.cu for simdev: same names, same parameter
// sizes. Each call does the whole grid's work.
#include <simdev/simdev.h>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <thread>

#include "contract.h"

namespace contract {
namespace {

template <class T>
T param(const simdev_launch* l, unsigned int i) {
  T v;
  std::memcpy(&v, l->params[i], sizeof(T));
  return v;
}

void fill_u32_host(const simdev_launch* l) {
  auto* p = param<uint32_t*>(l, 0);
  const auto value = param<uint32_t>(l, 1);
  const auto n = param<uint64_t>(l, 2);
  for (uint64_t i = 0; i < n; ++i) p[i] = value;
}

void add_one_u32_host(const simdev_launch* l) {
  auto* p = param<uint32_t*>(l, 0);
  const auto n = param<uint64_t>(l, 1);
  for (uint64_t i = 0; i < n; ++i) p[i] += 1u;
}

void add_one_u32x8_host(const simdev_launch* l) {
  for (unsigned int k = 0; k < 8; ++k) {
    auto* p = param<uint32_t*>(l, k);
    for (uint64_t i = 0; i < kAddOneX8Words; ++i) __atomic_fetch_add(&p[i], 1u, __ATOMIC_RELAXED);
  }
}

void copy_bytes_host(const simdev_launch* l) {
  auto* dst = param<unsigned char*>(l, 0);
  const auto* src = param<const unsigned char*>(l, 1);
  const auto n = param<uint64_t>(l, 2);
  std::memmove(dst, src, n);
}

void sum_u32_host(const simdev_launch* l) {
  const auto* p = param<const uint32_t*>(l, 0);
  const auto n = param<uint64_t>(l, 1);
  auto* acc = param<unsigned long long*>(l, 2);
  unsigned long long s = 0;
  for (uint64_t i = 0; i < n; ++i) s += p[i];
  __atomic_fetch_add(acc, s, __ATOMIC_RELAXED);
}

void fill_table_u32_host(const simdev_launch* l) {
  auto* const* table = param<uint32_t* const*>(l, 0);
  const auto count = param<uint64_t>(l, 1);
  const auto value = param<uint32_t>(l, 2);
  const auto n = param<uint64_t>(l, 3);
  for (uint64_t b = 0; b < count; ++b)
    for (uint64_t i = 0; i < n; ++i) table[b][i] = value;
}

void wait_then_fill_u32_host(const simdev_launch* l) {
  auto* flags = param<uint32_t*>(l, 0);
  auto* p = param<uint32_t*>(l, 1);
  const auto value = param<uint32_t>(l, 2);
  const auto n = param<uint64_t>(l, 3);
  __atomic_store_n(&flags[1], 1u, __ATOMIC_RELEASE);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (__atomic_load_n(&flags[0], __ATOMIC_ACQUIRE) == 0 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  if (__atomic_load_n(&flags[0], __ATOMIC_ACQUIRE) == 0) __atomic_store_n(&flags[2], 1u, __ATOMIC_RELEASE);
  for (uint64_t i = 0; i < n; ++i) p[i] = value;
}

constexpr size_t kPtrU32U64[] = {8, 4, 8};
constexpr size_t kPtrU64U32U64[] = {8, 8, 4, 8};
constexpr size_t kPtrPtrU32U64[] = {8, 8, 4, 8};
constexpr size_t kPtrU64[] = {8, 8};
constexpr size_t kPtrX8[] = {8, 8, 8, 8, 8, 8, 8, 8};
constexpr size_t kPtrPtrU64[] = {8, 8, 8};
constexpr size_t kPtrU64Ptr[] = {8, 8, 8};

}  // namespace

void register_contract_host_kernels() {
  static std::once_flag once;
  std::call_once(once, [] {
    const simdev_kernel_desc descs[] = {
        {kFillU32, fill_u32_host, 3, kPtrU32U64, nullptr, 0},
        {kAddOneU32, add_one_u32_host, 2, kPtrU64, nullptr, 0},
        {kAddOneU32x8, add_one_u32x8_host, 8, kPtrX8, nullptr, 0},
        {kCopyBytes, copy_bytes_host, 3, kPtrPtrU64, nullptr, 0},
        {kSumU32, sum_u32_host, 3, kPtrU64Ptr, nullptr, 0},
        {kFillTableU32, fill_table_u32_host, 4, kPtrU64U32U64, nullptr, 0},
        {kWaitThenFillU32, wait_then_fill_u32_host, 4, kPtrPtrU32U64, nullptr, 0},
    };
    for (const auto& d : descs) simdev_try_register_kernel(&d);
  });
}

}  // namespace contract
