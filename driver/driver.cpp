#include "driver/driver.h"

#include <dlfcn.h>
#include <elf.h>
#include <link.h>

#include <mutex>

namespace tierrt::drv {

namespace detail {
std::atomic<bool> g_counting{false};
std::atomic<std::uint64_t> g_counts[static_cast<unsigned>(Id::kCount)];
}  // namespace detail

namespace {

// ---- the real dlsym/dlopen, found in libc's (or libdl's) own symbol table ----
//
// libtierrt.so's dlsym/dlvsym end up here, and a sanitizer runtime preloaded
// ahead of it calls dlsym while it starts, before its shadow memory exists:
// an instrumented function would fault on its first shadow access. So this
// part is built uninstrumented, down to every helper it calls (the compiler
// does not inline an instrumented function into an uninstrumented one), and
// calls no libc string function: the sanitizers replace those, and ASan's
// strcmp jumps through a pointer it has not filled in yet at that point.
#define TIERRT_UNSANITIZED __attribute__((no_sanitize("address", "undefined", "thread")))

TIERRT_UNSANITIZED bool same_string(const char* a, const char* b) {
  for (; *a != '\0' && *a == *b; ++a, ++b) {
  }
  return *a == *b;
}

TIERRT_UNSANITIZED bool starts_with(const char* s, const char* prefix) {
  for (; *prefix != '\0'; ++s, ++prefix)
    if (*s != *prefix) return false;
  return true;
}

// What follows the last '/'.
TIERRT_UNSANITIZED const char* file_name(const char* path) {
  const char* file = path;
  for (const char* p = path; *p != '\0'; ++p)
    if (*p == '/') file = p + 1;
  return file;
}

struct ElfLookup {
  const char* name;
  void* found;
};

TIERRT_UNSANITIZED std::uint32_t gnu_hash(const char* s) {
  std::uint32_t h = 5381;
  for (; *s; ++s) h = h * 33 + static_cast<unsigned char>(*s);
  return h;
}

// Dynamic-section pointers are relocated in place by ld.so on most targets but
// not on all; accept both forms.
template <class T>
TIERRT_UNSANITIZED const T* dyn_ptr(ElfW(Addr) base, ElfW(Addr) p) {
  return reinterpret_cast<const T*>(p < base ? base + p : p);
}

TIERRT_UNSANITIZED void* lookup_in_object(const dl_phdr_info* info, const char* name) {
  const ElfW(Dyn)* dyn = nullptr;
  for (int i = 0; i < info->dlpi_phnum; ++i)
    if (info->dlpi_phdr[i].p_type == PT_DYNAMIC)
      dyn = reinterpret_cast<const ElfW(Dyn)*>(info->dlpi_addr +
                                               info->dlpi_phdr[i].p_vaddr);
  if (dyn == nullptr) return nullptr;
  const ElfW(Addr) base = info->dlpi_addr;
  const ElfW(Sym)* symtab = nullptr;
  const char* strtab = nullptr;
  const std::uint32_t* gh = nullptr;
  const ElfW(Half)* versym = nullptr;
  for (const ElfW(Dyn)* d = dyn; d->d_tag != DT_NULL; ++d) {
    switch (d->d_tag) {
      case DT_SYMTAB: symtab = dyn_ptr<ElfW(Sym)>(base, d->d_un.d_ptr); break;
      case DT_STRTAB: strtab = dyn_ptr<char>(base, d->d_un.d_ptr); break;
      case DT_GNU_HASH: gh = dyn_ptr<std::uint32_t>(base, d->d_un.d_ptr); break;
      case DT_VERSYM: versym = dyn_ptr<ElfW(Half)>(base, d->d_un.d_ptr); break;
      default: break;
    }
  }
  if (symtab == nullptr || strtab == nullptr || gh == nullptr) return nullptr;
  const std::uint32_t nbuckets = gh[0], symoffset = gh[1], bloom_size = gh[2];
  const auto* bloom = reinterpret_cast<const ElfW(Addr)*>(gh + 4);
  const auto* buckets = reinterpret_cast<const std::uint32_t*>(bloom + bloom_size);
  const std::uint32_t* chain = buckets + nbuckets;
  if (nbuckets == 0) return nullptr;
  const std::uint32_t h = gnu_hash(name);
  std::uint32_t i = buckets[h % nbuckets];
  if (i < symoffset) return nullptr;
  for (;; ++i) {
    const std::uint32_t c = chain[i - symoffset];
    if ((c | 1) == (h | 1)) {
      const ElfW(Sym)& s = symtab[i];
      const bool hidden_version = versym != nullptr && (versym[i] & 0x8000) != 0;
      if (s.st_shndx != SHN_UNDEF && !hidden_version &&
          ELF64_ST_TYPE(s.st_info) == STT_FUNC &&
          same_string(strtab + s.st_name, name))
        return reinterpret_cast<void*>(base + s.st_value);
    }
    if (c & 1) break;
  }
  return nullptr;
}

TIERRT_UNSANITIZED int phdr_cb(dl_phdr_info* info, size_t, void* data) {
  auto* q = static_cast<ElfLookup*>(data);
  const char* path = info->dlpi_name;
  if (path == nullptr) return 0;
  const char* file = file_name(path);
  if (!starts_with(file, "libc.so") && !starts_with(file, "libdl.so")) return 0;
  if (void* p = lookup_in_object(info, q->name)) {
    q->found = p;
    return 1;
  }
  return 0;
}

TIERRT_UNSANITIZED void* find_libc_function(const char* name) {
  ElfLookup q{name, nullptr};
  dl_iterate_phdr(phdr_cb, &q);
  return q.found;
}

struct NextLookup {
  const void* caller;
  const char* name;
  bool passed;  // the caller's object came already
  void* found;
};

TIERRT_UNSANITIZED bool contains(const dl_phdr_info* info, const void* addr) {
  const auto a = reinterpret_cast<ElfW(Addr)>(addr);
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const ElfW(Phdr)& ph = info->dlpi_phdr[i];
    const ElfW(Addr) start = info->dlpi_addr + ph.p_vaddr;
    if (ph.p_type == PT_LOAD && a >= start && a - start < ph.p_memsz) return true;
  }
  return false;
}

// dl_iterate_phdr visits objects in load order, the order RTLD_NEXT follows.
TIERRT_UNSANITIZED int next_cb(dl_phdr_info* info, size_t, void* data) {
  auto* q = static_cast<NextLookup*>(data);
  if (!q->passed) {
    q->passed = contains(info, q->caller);
    return 0;
  }
  q->found = lookup_in_object(info, q->name);
  return q->found != nullptr ? 1 : 0;
}

struct RealDl {
  DlsymFn dlsym = nullptr;
  DlopenFn dlopen = nullptr;
};

TIERRT_UNSANITIZED const RealDl& real_dl() {
  static const RealDl r = []() TIERRT_UNSANITIZED {
    RealDl x;
    x.dlsym = reinterpret_cast<DlsymFn>(find_libc_function("dlsym"));
    x.dlopen = reinterpret_cast<DlopenFn>(find_libc_function("dlopen"));
    // Fallback for unusual C libraries: by version, looked up past this
    // object. glibc 2.34 moved both into libc proper; before, they had the
    // architecture's base version.
#if defined(__aarch64__)
    constexpr const char* kBaseVersion = "GLIBC_2.17";
#else
    constexpr const char* kBaseVersion = "GLIBC_2.2.5";
#endif
    auto versioned = [](const char* name) TIERRT_UNSANITIZED -> void* {
      // A plain array: std::initializer_list's members are instrumented.
      const char* const versions[] = {"GLIBC_2.34", kBaseVersion};
      for (const char* v : versions)
        if (void* f = dlvsym(RTLD_NEXT, name, v)) return f;
      return nullptr;
    };
    if (x.dlsym == nullptr) x.dlsym = reinterpret_cast<DlsymFn>(versioned("dlsym"));
    if (x.dlopen == nullptr) x.dlopen = reinterpret_cast<DlopenFn>(versioned("dlopen"));
    return x;
  }();
  return r;
}

const char* const kSymbolNames[] = {
#define TIERRT_DRV_NAME_(name) TIERRT_DRV_STR_(name),
    TIERRT_DRIVER_FUNCTIONS(TIERRT_DRV_NAME_)
#undef TIERRT_DRV_NAME_
};

Table resolve_table() {
  Table t;
  const RealDl& dl = real_dl();
  if (dl.dlsym == nullptr || dl.dlopen == nullptr) return t;
  void* h = dl.dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (h == nullptr) return t;
  t.handle = h;
#define TIERRT_DRV_RESOLVE_(name)                                       \
  t.name = reinterpret_cast<decltype(t.name)>(                          \
      dl.dlsym(h, kSymbolNames[static_cast<unsigned>(Id::name)]));
  TIERRT_DRIVER_FUNCTIONS(TIERRT_DRV_RESOLVE_)
#undef TIERRT_DRV_RESOLVE_
  t.loaded = t.cuInit != nullptr;
  return t;
}

}  // namespace

void* next_definition(const void* caller, const char* name, bool* found_caller) noexcept {
  NextLookup q{caller, name, false, nullptr};
  dl_iterate_phdr(next_cb, &q);
  *found_caller = q.passed;
  return q.found;
}

namespace detail {
const Table& table() noexcept {
  static const Table t = resolve_table();
  return t;
}
}  // namespace detail

bool loaded() noexcept { return detail::table().loaded; }

void* resolve(const char* symbol) noexcept {
  const Table& t = detail::table();
  return t.handle != nullptr ? real_dl().dlsym(t.handle, symbol) : nullptr;
}

const char* symbol_name(Id id) noexcept {
  const auto i = static_cast<unsigned>(id);
  return i < static_cast<unsigned>(Id::kCount) ? kSymbolNames[i] : "?";
}

TIERRT_UNSANITIZED DlsymFn real_dlsym() noexcept { return real_dl().dlsym; }
TIERRT_UNSANITIZED DlopenFn real_dlopen() noexcept { return real_dl().dlopen; }

const char* result_name(CUresult r) noexcept {
  switch (r) {
#define N(x) case x: return #x;
    N(CUDA_SUCCESS) N(CUDA_ERROR_INVALID_VALUE) N(CUDA_ERROR_OUT_OF_MEMORY)
    N(CUDA_ERROR_NOT_INITIALIZED) N(CUDA_ERROR_DEINITIALIZED)
    N(CUDA_ERROR_PROFILER_DISABLED) N(CUDA_ERROR_STUB_LIBRARY)
    N(CUDA_ERROR_DEVICE_UNAVAILABLE) N(CUDA_ERROR_NO_DEVICE)
    N(CUDA_ERROR_INVALID_DEVICE) N(CUDA_ERROR_DEVICE_NOT_LICENSED)
    N(CUDA_ERROR_INVALID_IMAGE) N(CUDA_ERROR_INVALID_CONTEXT)
    N(CUDA_ERROR_MAP_FAILED) N(CUDA_ERROR_UNMAP_FAILED)
    N(CUDA_ERROR_ARRAY_IS_MAPPED) N(CUDA_ERROR_ALREADY_MAPPED)
    N(CUDA_ERROR_NO_BINARY_FOR_GPU) N(CUDA_ERROR_ALREADY_ACQUIRED)
    N(CUDA_ERROR_NOT_MAPPED) N(CUDA_ERROR_ECC_UNCORRECTABLE)
    N(CUDA_ERROR_UNSUPPORTED_LIMIT) N(CUDA_ERROR_CONTEXT_ALREADY_IN_USE)
    N(CUDA_ERROR_PEER_ACCESS_UNSUPPORTED) N(CUDA_ERROR_INVALID_PTX)
    N(CUDA_ERROR_INVALID_SOURCE) N(CUDA_ERROR_FILE_NOT_FOUND)
    N(CUDA_ERROR_SHARED_OBJECT_SYMBOL_NOT_FOUND)
    N(CUDA_ERROR_SHARED_OBJECT_INIT_FAILED) N(CUDA_ERROR_OPERATING_SYSTEM)
    N(CUDA_ERROR_INVALID_HANDLE) N(CUDA_ERROR_ILLEGAL_STATE)
    N(CUDA_ERROR_NOT_FOUND) N(CUDA_ERROR_NOT_READY)
    N(CUDA_ERROR_ILLEGAL_ADDRESS) N(CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES)
    N(CUDA_ERROR_LAUNCH_TIMEOUT) N(CUDA_ERROR_LAUNCH_FAILED)
    N(CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED)
    N(CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED) N(CUDA_ERROR_NOT_PERMITTED)
    N(CUDA_ERROR_NOT_SUPPORTED) N(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED)
    N(CUDA_ERROR_STREAM_CAPTURE_INVALIDATED) N(CUDA_ERROR_STREAM_CAPTURE_MERGE)
    N(CUDA_ERROR_STREAM_CAPTURE_UNMATCHED) N(CUDA_ERROR_STREAM_CAPTURE_UNJOINED)
    N(CUDA_ERROR_STREAM_CAPTURE_ISOLATION) N(CUDA_ERROR_STREAM_CAPTURE_IMPLICIT)
    N(CUDA_ERROR_CAPTURED_EVENT) N(CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD)
    N(CUDA_ERROR_TIMEOUT) N(CUDA_ERROR_UNKNOWN)
#undef N
    default: break;
  }
  const char* s = nullptr;
  if (TIERRT_CU(cuGetErrorName, r, &s) == CUDA_SUCCESS && s) return s;
  return "CUDA_ERROR_(unrecognised)";
}

void set_counting(bool on) noexcept {
  detail::g_counting.store(on, std::memory_order_relaxed);
}
std::uint64_t calls(Id id) noexcept {
  return detail::g_counts[static_cast<unsigned>(id)].load(std::memory_order_relaxed);
}
std::uint64_t total_calls() noexcept {
  std::uint64_t n = 0;
  for (auto& c : detail::g_counts) n += c.load(std::memory_order_relaxed);
  return n;
}
void reset_counts() noexcept {
  for (auto& c : detail::g_counts) c.store(0, std::memory_order_relaxed);
}

}  // namespace tierrt::drv
