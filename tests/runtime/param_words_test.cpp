// Which words of a kernel's parameters a launch scans (runtime/param_layouts.h):
// the 8-byte words aligned in the driver's parameter buffer that lie wholly
// inside a parameter, each as the parameter and its position in that
// parameter's copy.
#include "runtime/param_layouts.h"

#include <gtest/gtest.h>

#include <vector>

namespace tierrt {
namespace {

std::vector<ParamWord> words_of(std::uint32_t index, std::uint64_t offset, std::uint64_t size, std::uint32_t cap = 4096) {
  std::vector<ParamWord> out(cap);
  std::uint32_t n = 0;
  EXPECT_TRUE(append_param_words(index, offset, size, out.data(), cap, &n));
  out.resize(n);
  return out;
}

TEST(ParamWords, APointerAtAnAlignedOffsetIsOneWord) {
  const auto w = words_of(3, 16, 8);
  ASSERT_EQ(w.size(), 1u);
  EXPECT_EQ(w[0].param, 3u);
  EXPECT_EQ(w[0].offset, 0u);
}

TEST(ParamWords, AScalarOrAnUnalignedShortParameterHasNone) {
  EXPECT_TRUE(words_of(0, 0, 4).empty());
  EXPECT_TRUE(words_of(0, 4, 8).empty()) << "straddles two aligned words: a kernel reads no pointer there";
  EXPECT_TRUE(words_of(0, 12, 4).empty());
}

TEST(ParamWords, AStructStartsAtItsFirstAlignedWord) {
  const auto w = words_of(1, 4, 28);  // buffer bytes 4..32: words at 8, 16, 24
  ASSERT_EQ(w.size(), 3u);
  for (std::size_t i = 0; i < w.size(); ++i) {
    EXPECT_EQ(w[i].param, 1u);
    EXPECT_EQ(w[i].offset, 4u + 8 * i);
  }
}

// The words the launch path scanned before it kept word lists: every
// aligned buffer position p with [p, p + 8) inside [offset, offset + size).
TEST(ParamWords, EveryOffsetAndSizeGivesTheWordsOfTheAlignedScan) {
  for (std::uint32_t offset = 0; offset < 40; ++offset)
    for (std::uint32_t size = 0; size < 80; ++size) {
      std::vector<std::uint32_t> expected;
      for (std::uint32_t p = (offset + 7) & ~7u; p + 8 <= offset + size; p += 8) expected.push_back(p - offset);
      const auto w = words_of(0, offset, size);
      ASSERT_EQ(w.size(), expected.size()) << "offset " << offset << " size " << size;
      for (std::size_t i = 0; i < w.size(); ++i) EXPECT_EQ(w[i].offset, expected[i]);
    }
  EXPECT_EQ(words_of(0, 4, 32764).size(), 4095u) << "the driver's largest parameter buffer";
}

TEST(ParamWords, WordsPastTheRoomOrAParameterPastAWordsReachAreRefused) {
  std::vector<ParamWord> out(2);
  std::uint32_t n = 0;
  EXPECT_FALSE(append_param_words(0, 0, 24, out.data(), 2, &n)) << "3 words into room for 2";
  n = 0;
  EXPECT_FALSE(append_param_words(70000, 0, 8, out.data(), 2, &n)) << "an index past 65535";
  n = 0;
  EXPECT_FALSE(append_param_words(0, 0, 70000, out.data(), 2, &n)) << "a parameter past 65535 bytes";
}

}  // namespace
}  // namespace tierrt
