// Sharing memory between processes, as tierrt's IPC relies on it: VMM
// handles created with POSIX_FD requested export as an fd that imports in
// this process and in another one; a handle created without it does not
// export; legacy IPC shares cuMemAlloc memory with another process, refuses
// VMM memory, and refuses the process that made the handle.
//
// The second process is this binary again, running one test
// (IpcTest.SecondProcess) with the handle in the environment.
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "contract.h"

using contract::DeviceBuffer;

namespace {

constexpr size_t kBytes = 2u << 20;
constexpr const char* kHandleVar = "IPC_CONTRACT_HANDLE";  // "legacy:HEX" or "fd:PID:FD"

CUmemAllocationProp device_prop(CUdevice dev, bool exportable) {
  CUmemAllocationProp p;
  std::memset(&p, 0, sizeof p);
  p.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  p.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  p.location.id = dev;
  if (exportable) p.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  return p;
}

std::string to_hex(const CUipcMemHandle& h) {
  std::string s;
  char b[3];
  for (unsigned char c : h.reserved) {
    std::snprintf(b, sizeof b, "%02x", c);
    s += b;
  }
  return s;
}

CUipcMemHandle from_hex(const std::string& s) {
  CUipcMemHandle h;
  std::memset(&h, 0, sizeof h);
  for (size_t i = 0; i < sizeof h.reserved && 2 * i + 1 < s.size(); ++i)
    h.reserved[i] = static_cast<char>(std::stoul(s.substr(2 * i, 2), nullptr, 16));
  return h;
}

// Runs IpcTest.SecondProcess in a fresh process with `handle` in the
// environment; returns its exit status.
int second_process(const std::string& handle) {
  const pid_t pid = fork();
  if (pid == 0) {
    setenv(kHandleVar, handle.c_str(), 1);
    execl("/proc/self/exe", "/proc/self/exe", "--gtest_filter=IpcTest.SecondProcess", static_cast<char*>(nullptr));
    _exit(127);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128;
}

bool all_bytes(CUdeviceptr p, size_t n, unsigned char v) {
  std::vector<unsigned char> host(n);
  if (cuMemcpyDtoH(host.data(), p, n) != CUDA_SUCCESS) return false;
  for (unsigned char b : host)
    if (b != v) return false;
  return true;
}

}  // namespace

class IpcTest : public DriverTest {
 protected:
  CUmemAccessDesc device_rw() const {
    CUmemAccessDesc d;
    std::memset(&d, 0, sizeof d);
    d.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    d.location.id = device();
    d.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    return d;
  }
  // Maps `h` (kBytes) at a new reservation.
  CUdeviceptr map(CUmemGenericAllocationHandle h) {
    CUdeviceptr va = 0;
    const CUmemAccessDesc acc = device_rw();
    EXPECT_CU(cuMemAddressReserve(&va, kBytes, 0, 0, 0));
    EXPECT_CU(cuMemMap(va, kBytes, 0, h, 0));
    EXPECT_CU(cuMemSetAccess(va, kBytes, &acc, 1));
    return va;
  }
  static void unmap(CUdeviceptr va) {
    EXPECT_CU(cuMemUnmap(va, kBytes));
    EXPECT_CU(cuMemAddressFree(va, kBytes));
  }
};

// The other side of the cross-process cases: skipped unless started by one.
// Opens what the environment names, expects 0x5a everywhere, writes 0xa5.
TEST_F(IpcTest, SecondProcess) {
  const char* v = std::getenv(kHandleVar);
  if (v == nullptr) GTEST_SKIP() << "run by the cross-process cases";
  const std::string what = v;
  if (what.rfind("legacy:", 0) == 0) {
    CUdeviceptr p = 0;
    ASSERT_CU(cuIpcOpenMemHandle(&p, from_hex(what.substr(7)), CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS));
    EXPECT_TRUE(all_bytes(p, kBytes, 0x5a));
    EXPECT_CU(cuMemsetD8(p, 0xa5, kBytes));
    EXPECT_CU(cuCtxSynchronize());
    EXPECT_CU(cuIpcCloseMemHandle(p));
  } else {
    // "fd:PID:FD": the exporter's fd, taken as PyTorch takes it.
    int pid = 0, fd = -1;
    ASSERT_EQ(2, std::sscanf(what.c_str(), "fd:%d:%d", &pid, &fd));
    const int pidfd = static_cast<int>(syscall(SYS_pidfd_open, pid, 0));
    ASSERT_GE(pidfd, 0);
    const int own = static_cast<int>(syscall(SYS_pidfd_getfd, pidfd, fd, 0));
    ASSERT_GE(own, 0);
    CUmemGenericAllocationHandle h = 0;
    ASSERT_CU(cuMemImportFromShareableHandle(&h, reinterpret_cast<void*>(static_cast<intptr_t>(own)),
                                             CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR));
    close(own);
    close(pidfd);
    const CUdeviceptr va = map(h);
    EXPECT_TRUE(all_bytes(va, kBytes, 0x5a));
    EXPECT_CU(cuMemsetD8(va, 0xa5, kBytes));
    EXPECT_CU(cuCtxSynchronize());
    unmap(va);
    EXPECT_CU(cuMemRelease(h));
  }
}

TEST_F(IpcTest, TheDeviceSaysItExportsPosixFds) {
  EXPECT_EQ(1, attribute(CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED));
}

TEST_F(IpcTest, AHandleCreatedExportableImportsInThisProcess) {
  const CUmemAllocationProp prop = device_prop(device(), true);
  CUmemGenericAllocationHandle h = 0, imported = 0;
  ASSERT_CU(cuMemCreate(&h, kBytes, &prop, 0));
  const CUdeviceptr va = map(h);
  ASSERT_CU(cuMemsetD8(va, 0x3c, kBytes));
  int fd = -1;
  ASSERT_CU(cuMemExportToShareableHandle(&fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
  ASSERT_GE(fd, 0);
  ASSERT_CU(cuMemImportFromShareableHandle(&imported, reinterpret_cast<void*>(static_cast<intptr_t>(fd)),
                                           CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR));
  close(fd);  // the imported handle holds the memory
  CUmemAllocationProp got;
  std::memset(&got, 0, sizeof got);
  EXPECT_CU(cuMemGetAllocationPropertiesFromHandle(&got, imported));
  EXPECT_EQ(CU_MEM_LOCATION_TYPE_DEVICE, got.location.type);
  const CUdeviceptr va2 = map(imported);
  EXPECT_TRUE(all_bytes(va2, kBytes, 0x3c));
  EXPECT_CU(cuMemsetD8(va2, 0x7e, kBytes));
  EXPECT_CU(cuCtxSynchronize());
  EXPECT_TRUE(all_bytes(va, kBytes, 0x7e));  // the same memory
  unmap(va2);
  unmap(va);
  EXPECT_CU(cuMemRelease(imported));
  EXPECT_CU(cuMemRelease(h));
}

// Exporting a handle shares its memory, whatever its mappings did before:
// here it was mapped at three addresses; one was unmapped before the export
// and mapped anew after it, another unmapped and mapped again before it,
// given access only after; and another handle sits beside it. Every address
// of the handle then reaches the one memory the importer writes, and the
// other handle keeps its own bytes.
TEST_F(IpcTest, AnExportedHandleIsOneMemoryAtEveryAddressItWasMappedAt) {
  const CUmemAllocationProp prop = device_prop(device(), true);
  CUmemGenericAllocationHandle h = 0, other = 0, imported = 0;
  ASSERT_CU(cuMemCreate(&h, kBytes, &prop, 0));
  ASSERT_CU(cuMemCreate(&other, kBytes, &prop, 0));
  const CUdeviceptr va = map(h), va_other = map(other), after = map(h), before = map(h);
  ASSERT_CU(cuMemsetD8(va, 0x11, kBytes));
  ASSERT_CU(cuMemsetD8(va_other, 0x22, kBytes));
  ASSERT_CU(cuCtxSynchronize());
  EXPECT_CU(cuMemUnmap(after, kBytes));
  EXPECT_CU(cuMemUnmap(before, kBytes));
  ASSERT_CU(cuMemMap(before, kBytes, 0, h, 0));
  int fd = -1;
  ASSERT_CU(cuMemExportToShareableHandle(&fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
  ASSERT_CU(cuMemImportFromShareableHandle(&imported, reinterpret_cast<void*>(static_cast<intptr_t>(fd)),
                                           CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR));
  close(fd);
  const CUdeviceptr va_imported = map(imported);
  EXPECT_TRUE(all_bytes(va_imported, kBytes, 0x11));
  ASSERT_CU(cuMemsetD8(va_imported, 0x33, kBytes));
  ASSERT_CU(cuCtxSynchronize());
  EXPECT_TRUE(all_bytes(va, kBytes, 0x33));
  const CUmemAccessDesc acc = device_rw();
  ASSERT_CU(cuMemSetAccess(before, kBytes, &acc, 1));
  EXPECT_TRUE(all_bytes(before, kBytes, 0x33)) << "mapped again before the export: not the shared memory";
  ASSERT_CU(cuMemMap(after, kBytes, 0, h, 0));
  ASSERT_CU(cuMemSetAccess(after, kBytes, &acc, 1));
  EXPECT_TRUE(all_bytes(after, kBytes, 0x33)) << "mapped again after the export: not the shared memory";
  EXPECT_TRUE(all_bytes(va_other, kBytes, 0x22));
  unmap(after);
  unmap(before);
  unmap(va_imported);
  unmap(va_other);
  unmap(va);
  EXPECT_CU(cuMemRelease(imported));
  EXPECT_CU(cuMemRelease(other));
  EXPECT_CU(cuMemRelease(h));
}

TEST_F(IpcTest, AHandleCreatedWithoutTheTypeDoesNotExport) {
  const CUmemAllocationProp prop = device_prop(device(), false);
  CUmemGenericAllocationHandle h = 0;
  ASSERT_CU(cuMemCreate(&h, kBytes, &prop, 0));
  int fd = -1;
  // INVALID_VALUE or NOT_PERMITTED: which one is UNCONFIRMED; never success.
  const CUresult r = cuMemExportToShareableHandle(&fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
  EXPECT_TRUE(r == CUDA_ERROR_INVALID_VALUE || r == CUDA_ERROR_NOT_PERMITTED) << r;
  EXPECT_CU(cuMemRelease(h));
}

TEST_F(IpcTest, AnExportedFdImportsInAnotherProcess) {
  const CUmemAllocationProp prop = device_prop(device(), true);
  CUmemGenericAllocationHandle h = 0;
  ASSERT_CU(cuMemCreate(&h, kBytes, &prop, 0));
  const CUdeviceptr va = map(h);
  ASSERT_CU(cuMemsetD8(va, 0x5a, kBytes));
  ASSERT_CU(cuCtxSynchronize());
  int fd = -1;
  ASSERT_CU(cuMemExportToShareableHandle(&fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
  EXPECT_EQ(0, second_process("fd:" + std::to_string(getpid()) + ":" + std::to_string(fd)));
  EXPECT_TRUE(all_bytes(va, kBytes, 0xa5));
  close(fd);
  unmap(va);
  EXPECT_CU(cuMemRelease(h));
}

TEST_F(IpcTest, LegacyIpcSharesMemAllocMemoryWithAnotherProcess) {
  DeviceBuffer buf(kBytes);
  ASSERT_CU(buf.status());
  ASSERT_CU(cuMemsetD8(buf.ptr(), 0x5a, kBytes));
  ASSERT_CU(cuCtxSynchronize());
  CUipcMemHandle h;
  ASSERT_CU(cuIpcGetMemHandle(&h, buf.ptr()));
  EXPECT_EQ(0, second_process("legacy:" + to_hex(h)));
  EXPECT_TRUE(all_bytes(buf.ptr(), kBytes, 0xa5));
}

TEST_F(IpcTest, TheProcessThatMadeAHandleCannotOpenIt) {
  DeviceBuffer buf(kBytes);
  ASSERT_CU(buf.status());
  CUipcMemHandle h;
  ASSERT_CU(cuIpcGetMemHandle(&h, buf.ptr()));
  CUdeviceptr p = 0;
  // The documented errors include INVALID_CONTEXT; which one the driver
  // gives here is UNCONFIRMED: never success.
  EXPECT_NE(CUDA_SUCCESS, cuIpcOpenMemHandle(&p, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS));
}

TEST_F(IpcTest, LegacyIpcRefusesVmmMemory) {
  const CUmemAllocationProp prop = device_prop(device(), true);
  CUmemGenericAllocationHandle h = 0;
  ASSERT_CU(cuMemCreate(&h, kBytes, &prop, 0));
  const CUdeviceptr va = map(h);
  CUipcMemHandle ih;
  // UNCONFIRMED which error: INVALID_VALUE is what cudarc#521 saw for pool
  // memory. Never success.
  EXPECT_NE(CUDA_SUCCESS, cuIpcGetMemHandle(&ih, va));
  unmap(va);
  EXPECT_CU(cuMemRelease(h));
}
