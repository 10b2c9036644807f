// Fuzz input read front to back as the values a target needs; once it runs
// out, every read yields zeros, so that any input is a complete program.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>

class FuzzInput {
 public:
  FuzzInput(const std::uint8_t* data, std::size_t size) : p_(data), left_(size) {}

  bool empty() const { return left_ == 0; }
  std::size_t left() const { return left_; }

  template <class T>
  T take() {
    static_assert(std::is_trivially_copyable_v<T>);
    T v{};
    const std::size_t n = left_ < sizeof v ? left_ : sizeof v;
    std::memcpy(&v, p_, n);
    p_ += n, left_ -= n;
    return v;
  }

  // Bytes up to (not including) `stop`, or to the end.
  std::string take_until(char stop) {
    const void* at = std::memchr(p_, stop, left_);
    const std::size_t n = at ? static_cast<std::size_t>(static_cast<const std::uint8_t*>(at) - p_) : left_;
    std::string s(reinterpret_cast<const char*>(p_), n);
    const std::size_t used = at ? n + 1 : n;
    p_ += used, left_ -= used;
    return s;
  }

 private:
  const std::uint8_t* p_;
  std::size_t left_;
};
