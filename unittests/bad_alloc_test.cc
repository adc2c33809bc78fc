#include "allocation/bad_alloc.h"

#include <gtest/gtest.h>

#include <string>

#include "allocation/byte_format.h"

namespace strata::allocation {
namespace {

TEST(BadAllocTest, MessageCarriesTheNumbersAUserNeeds) {
  BadAlloc e(platform::CUDAPlace(1), 2ull << 30);
  e.set_device_memory(80ull << 30, 1536ull << 20)
      .set_pool_usage(70ull << 30, 75ull << 30)
      .set_hint("Try max_split_size_mb to avoid fragmentation.");
  const std::string m = e.what();
  EXPECT_NE(m.find("cuda:1"), std::string::npos) << m;
  EXPECT_NE(m.find("Tried to allocate 2.00 GiB"), std::string::npos) << m;
  EXPECT_NE(m.find("total capacity of 80.00 GiB of which 1.50 GiB is free"), std::string::npos)
      << m;
  EXPECT_NE(m.find("70.00 GiB is allocated by strata"), std::string::npos) << m;
  EXPECT_NE(m.find("5.00 GiB is reserved by strata but unallocated"), std::string::npos) << m;
  EXPECT_NE(m.find("max_split_size_mb"), std::string::npos) << m;
}

TEST(BadAllocTest, IsAStdBadAlloc) {
  try {
    throw BadAlloc(platform::CPUPlace(), 10);
  } catch (const std::bad_alloc& e) {
    EXPECT_NE(std::string(e.what()).find("cpu"), std::string::npos);
  }
}

TEST(BadAllocTest, LimitMessageSaysItWasTheLimit) {
  BadAlloc e(platform::CUDAPlace(0), 3ull << 20);
  e.set_memory_limit(100ull << 20, 99ull << 20);
  const std::string m = e.what();
  EXPECT_NE(m.find("gpu_memory_limit_mb"), std::string::npos) << m;
  EXPECT_NE(m.find("100.00 MiB"), std::string::npos) << m;
}

TEST(ByteFormatTest, Units) {
  EXPECT_EQ(FormatBytes(0), "0 B");
  EXPECT_EQ(FormatBytes(1023), "1023 B");
  EXPECT_EQ(FormatBytes(1024), "1.00 KiB");
  EXPECT_EQ(FormatBytes(3ull << 29), "1.50 GiB");
  EXPECT_EQ(FormatBytesSigned(-2048), "-2.00 KiB");
}

}  // namespace
}  // namespace strata::allocation
