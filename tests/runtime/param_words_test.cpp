// Which words of a parameter a launch scans (runtime/param_layouts.h): the
// 8-byte words aligned in the driver's parameter buffer that lie wholly
// inside the parameter, as positions in the parameter's own copy.
#include "runtime/param_layouts.h"

#include <gtest/gtest.h>

namespace tierrt {
namespace {

// The words the launch path scanned before it kept spans: every aligned
// buffer position w with [w, w + 8) inside [offset, offset + size).
void expect_same_words(std::uint32_t offset, std::uint32_t size) {
  const ParamWords words = ParamWords::of(offset, size);
  std::uint32_t n = 0;
  for (std::uint32_t w = (offset + 7) & ~7u; w + 8 <= offset + size; w += 8, ++n)
    EXPECT_EQ(words.skip() + 8 * n, w - offset) << "offset " << offset << " size " << size;
  EXPECT_EQ(words.count(), n) << "offset " << offset << " size " << size;
}

TEST(ParamWords, APointerAtAnAlignedOffsetIsOneWord) {
  const ParamWords w = ParamWords::of(16, 8);
  EXPECT_EQ(w.skip(), 0u);
  EXPECT_EQ(w.count(), 1u);
}

TEST(ParamWords, AScalarOrAnUnalignedShortParameterHasNone) {
  EXPECT_EQ(ParamWords::of(0, 4).count(), 0u);
  EXPECT_EQ(ParamWords::of(4, 8).count(), 0u) << "straddles two aligned words: a kernel reads no pointer there";
  EXPECT_EQ(ParamWords::of(12, 4).count(), 0u);
}

TEST(ParamWords, AStructStartsAtItsFirstAlignedWord) {
  const ParamWords w = ParamWords::of(4, 28);  // buffer bytes 4..32: words at 8, 16, 24
  EXPECT_EQ(w.skip(), 4u);
  EXPECT_EQ(w.count(), 3u);
}

TEST(ParamWords, EveryOffsetAndSizeGivesTheWordsOfTheAlignedScan) {
  for (std::uint32_t offset = 0; offset < 40; ++offset)
    for (std::uint32_t size = 0; size < 80; ++size) expect_same_words(offset, size);
  expect_same_words(4, 32764);  // the driver's largest parameter buffer
}

}  // namespace
}  // namespace tierrt
