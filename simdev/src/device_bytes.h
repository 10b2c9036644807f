// The bytes that simdev's copies and memsets move stand in for a GPU's copy
// engines: whether they may overlap a kernel is the device's ordering
// (streams, events), which simdev enforces and the tests check by content.
// ThreadSanitizer cannot see that ordering, so under it these moves are not
// tracked: reporting them (then matching a suppression) cost ~1000x in time,
// one race report per copied range. Every other access, simdev's bookkeeping,
// the host kernels and all of tierrt included, is still checked.
#pragma once

#if defined(__SANITIZE_THREAD__)
#define SIMDEV_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define SIMDEV_TSAN 1
#endif
#endif

#ifdef SIMDEV_TSAN
extern "C" {
void AnnotateIgnoreReadsBegin(const char* file, int line);
void AnnotateIgnoreReadsEnd(const char* file, int line);
void AnnotateIgnoreWritesBegin(const char* file, int line);
void AnnotateIgnoreWritesEnd(const char* file, int line);
}
#endif

namespace simdev {

// Scope in which this thread moves device bytes on behalf of the device.
class DeviceBytesMove {
 public:
#ifdef SIMDEV_TSAN
  DeviceBytesMove() {
    AnnotateIgnoreReadsBegin(__FILE__, __LINE__);
    AnnotateIgnoreWritesBegin(__FILE__, __LINE__);
  }
  ~DeviceBytesMove() {
    AnnotateIgnoreWritesEnd(__FILE__, __LINE__);
    AnnotateIgnoreReadsEnd(__FILE__, __LINE__);
  }
#else
  DeviceBytesMove() = default;
#endif
  DeviceBytesMove(const DeviceBytesMove&) = delete;
  DeviceBytesMove& operator=(const DeviceBytesMove&) = delete;
};

}  // namespace simdev
