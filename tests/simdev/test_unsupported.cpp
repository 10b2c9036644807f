// Functions simdev does not implement answer CUDA_ERROR_NOT_SUPPORTED instead
// of pretending to succeed.
#include <cstring>

#include "simdev_test.h"

TEST_F(SimdevTest, GraphicsInteropIsNotSupported) {
  CUgraphicsResource res = nullptr;
  EXPECT_EQ(CUDA_ERROR_NOT_SUPPORTED, cuGraphicsMapResources(1, &res, nullptr));
  EXPECT_EQ(CUDA_ERROR_NOT_SUPPORTED, cuGraphicsUnmapResources(1, &res, nullptr));
}

TEST_F(SimdevTest, TextureObjectsAreNotSupported) {
  CUDA_RESOURCE_DESC desc;
  std::memset(&desc, 0, sizeof desc);
  desc.resType = CU_RESOURCE_TYPE_LINEAR;
  CUtexObject tex = 0;
  EXPECT_EQ(CUDA_ERROR_NOT_SUPPORTED, cuTexObjectCreate(&tex, &desc, nullptr, nullptr));
}

TEST_F(SimdevTest, NotSupportedHasANameAndAString) {
  const char* s = nullptr;
  ASSERT_CU(cuGetErrorName(CUDA_ERROR_NOT_SUPPORTED, &s));
  EXPECT_STREQ("CUDA_ERROR_NOT_SUPPORTED", s);
}
