// Copies (H2D, D2H, D2D, sync and async) and memsets (D8, D32, sync and async).
#include <cstring>
#include <numeric>
#include <vector>

#include "contract.h"

using contract::DeviceBuffer;
using contract::PinnedBuffer;
using contract::Stream;

namespace {

std::vector<unsigned char> pattern(size_t n, unsigned seed) {
  std::vector<unsigned char> v(n);
  uint32_t x = seed * 2654435761u + 1;
  for (auto& b : v) {
    x = x * 1664525u + 1013904223u;
    b = static_cast<unsigned char>(x >> 24);
  }
  return v;
}

std::vector<unsigned char> read_back(CUdeviceptr p, size_t n) {
  std::vector<unsigned char> out(n);
  EXPECT_CU(cuMemcpyDtoH(out.data(), p, n));
  return out;
}

}  // namespace

TEST_F(DriverTest, CopyHostToDeviceToHostRoundTrip) {
  const size_t n = (3 << 20) + 17;  // not a multiple of anything
  DeviceBuffer d(n);
  ASSERT_CU(d.status());
  auto in = pattern(n, 1);
  ASSERT_CU(cuMemcpyHtoD(d.ptr(), in.data(), n));
  EXPECT_EQ(in, read_back(d.ptr(), n));
}

TEST_F(DriverTest, CopyAtUnalignedOffsetsAndSizes) {
  const size_t n = 8192;
  DeviceBuffer d(n);
  ASSERT_CU(d.status());
  ASSERT_CU(cuMemsetD8(d.ptr(), 0, n));
  auto in = pattern(1001, 2);
  ASSERT_CU(cuMemcpyHtoD(d.ptr() + 3, in.data(), in.size()));
  auto out = read_back(d.ptr(), n);
  for (size_t i = 0; i < n; ++i) {
    unsigned char want = (i >= 3 && i < 3 + in.size()) ? in[i - 3] : 0;
    ASSERT_EQ(want, out[i]) << "byte " << i;
  }
  std::vector<unsigned char> part(5);
  ASSERT_CU(cuMemcpyDtoH(part.data(), d.ptr() + 7, 5));
  EXPECT_EQ(0, std::memcmp(part.data(), in.data() + 4, 5));
}

TEST_F(DriverTest, CopyDeviceToDevice) {
  const size_t n = (1 << 20) + 3;
  DeviceBuffer a(n), b(n);
  ASSERT_CU(a.status());
  ASSERT_CU(b.status());
  auto in = pattern(n, 3);
  ASSERT_CU(cuMemcpyHtoD(a.ptr(), in.data(), n));
  ASSERT_CU(cuMemcpyDtoD(b.ptr(), a.ptr(), n));
  EXPECT_EQ(in, read_back(b.ptr(), n));
  // Unified cuMemcpy works on device pointers too.
  ASSERT_CU(cuMemsetD8(b.ptr(), 0, n));
  ASSERT_CU(cuMemcpy(b.ptr() + 1, a.ptr(), n - 1));
  auto out = read_back(b.ptr(), n);
  EXPECT_EQ(0, out[0]);
  EXPECT_EQ(0, std::memcmp(out.data() + 1, in.data(), n - 1));
}

TEST_F(DriverTest, AsyncCopiesWithPinnedMemory) {
  const size_t n = 8 << 20;
  Stream s;
  ASSERT_CU(s.status());
  PinnedBuffer src(n), dst(n);
  ASSERT_CU(src.status());
  ASSERT_CU(dst.status());
  auto in = pattern(n, 4);
  std::memcpy(src.get(), in.data(), n);
  DeviceBuffer a(n), b(n);
  ASSERT_CU(a.status());
  ASSERT_CU(b.status());
  ASSERT_CU(cuMemcpyHtoDAsync(a.ptr(), src.get(), n, s));
  ASSERT_CU(cuMemcpyDtoDAsync(b.ptr(), a.ptr(), n, s));
  ASSERT_CU(cuMemcpyDtoHAsync(dst.get(), b.ptr(), n, s));
  ASSERT_CU(cuStreamSynchronize(s));
  EXPECT_EQ(0, std::memcmp(dst.get(), in.data(), n));
}

TEST_F(DriverTest, AsyncCopyFromPageableMemoryIsCompleteWhenSynchronized) {
  const size_t n = 1 << 20;
  Stream s;
  ASSERT_CU(s.status());
  DeviceBuffer d(n);
  ASSERT_CU(d.status());
  auto in = pattern(n, 5);
  ASSERT_CU(cuMemcpyHtoDAsync(d.ptr(), in.data(), n, s));
  ASSERT_CU(cuStreamSynchronize(s));
  std::vector<unsigned char> out(n);
  ASSERT_CU(cuMemcpyDtoHAsync(out.data(), d.ptr(), n, s));
  ASSERT_CU(cuStreamSynchronize(s));
  EXPECT_EQ(in, out);
}

TEST_F(DriverTest, CopyOfZeroBytesSucceeds) {
  DeviceBuffer d(256);
  ASSERT_CU(d.status());
  unsigned char b = 0;
  EXPECT_CU(cuMemcpyHtoD(d.ptr(), &b, 0));
  EXPECT_CU(cuMemcpyDtoH(&b, d.ptr(), 0));
}

TEST_F(DriverTest, MemsetD8AtOddOffsetLeavesNeighbours) {
  const size_t n = 4096;
  DeviceBuffer d(n);
  ASSERT_CU(d.status());
  ASSERT_CU(cuMemsetD8(d.ptr(), 0x11, n));
  ASSERT_CU(cuMemsetD8(d.ptr() + 5, 0xee, 1001));
  auto out = read_back(d.ptr(), n);
  for (size_t i = 0; i < n; ++i)
    ASSERT_EQ((i >= 5 && i < 1006) ? 0xee : 0x11, out[i]) << "byte " << i;
}

TEST_F(DriverTest, MemsetD32WritesWords) {
  const size_t words = 100003;
  DeviceBuffer d(words * 4 + 8);
  ASSERT_CU(d.status());
  ASSERT_CU(cuMemsetD8(d.ptr(), 0, words * 4 + 8));
  ASSERT_CU(cuMemsetD32(d.ptr() + 4, 0xdeadbeefu, words));
  std::vector<uint32_t> out(words + 2);
  ASSERT_CU(cuMemcpyDtoH(out.data(), d.ptr(), out.size() * 4));
  EXPECT_EQ(0u, out.front());
  EXPECT_EQ(0u, out.back());
  for (size_t i = 1; i <= words; ++i) ASSERT_EQ(0xdeadbeefu, out[i]) << i;
}

TEST_F(DriverTest, MemsetD32RequiresFourByteAlignment) {
  DeviceBuffer d(4096);
  ASSERT_CU(d.status());
  EXPECT_EQ(CUDA_ERROR_INVALID_VALUE, cuMemsetD32(d.ptr() + 2, 1u, 16));
}

TEST_F(DriverTest, AsyncMemsetsAreOrderedWithCopies) {
  const size_t words = 1 << 18;
  Stream s;
  ASSERT_CU(s.status());
  DeviceBuffer d(words * 4);
  ASSERT_CU(d.status());
  PinnedBuffer host(words * 4);
  ASSERT_CU(host.status());
  ASSERT_CU(cuMemsetD32Async(d.ptr(), 0x01020304u, words, s));
  ASSERT_CU(cuMemsetD8Async(d.ptr(), 0xff, 8, s));
  ASSERT_CU(cuMemcpyDtoHAsync(host.get(), d.ptr(), words * 4, s));
  ASSERT_CU(cuStreamSynchronize(s));
  const auto* w = host.as<uint32_t>();
  EXPECT_EQ(0xffffffffu, w[0]);
  EXPECT_EQ(0xffffffffu, w[1]);
  for (size_t i = 2; i < words; ++i) ASSERT_EQ(0x01020304u, w[i]) << i;
}
