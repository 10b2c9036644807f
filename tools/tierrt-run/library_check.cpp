#include "library_check.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <system_error>

namespace tierrt::run {

namespace {

namespace fs = std::filesystem;

// Every function tierrt.h declares: a library without them is not tierrt.
constexpr const char* kApi[] = {"tierrt_version", "tierrt_mark_step", "tierrt_mark_phase", "tierrt_advise",
                                "tierrt_get_stats"};

// The library beside an installed program: meson puts it in libdir, which is
// lib, lib64 or a multiarch folder under lib depending on the distribution.
std::string installed_beside(const fs::path& bin_dir) {
  std::error_code ec;
  const fs::path prefix = bin_dir.parent_path();
  for (const fs::directory_entry& d : fs::directory_iterator(prefix, ec)) {
    if (!d.is_directory(ec) || !d.path().filename().string().starts_with("lib")) continue;
    if (const fs::path p = d.path() / "libtierrt.so"; fs::exists(p, ec)) return p.string();
    for (const fs::directory_entry& sub : fs::directory_iterator(d.path(), ec))
      if (const fs::path p = sub.path() / "libtierrt.so"; sub.is_directory(ec) && fs::exists(p, ec))
        return p.string();
  }
  return {};
}

// The child's output as one line: the loader's reason when it refused the
// library ("ERROR: ld.so: object '...' from LD_PRELOAD cannot be preloaded
// (REASON): ignored."), else the child's own line.
std::string one_line(const std::string& output) {
  const std::size_t at = output.find("cannot be preloaded");
  if (at != std::string::npos) {
    const std::size_t end = output.find(": ignored", at);
    return output.substr(at, end == std::string::npos ? output.find('\n', at) - at : end - at);
  }
  std::string line = output.substr(0, output.find('\n'));
  return line.empty() ? "cannot be loaded" : line;
}

}  // namespace

std::string find_library() {
  if (const char* v = std::getenv("TIERRT_LIBRARY"); v && *v) return v;
  std::error_code ec;
  const fs::path self = fs::canonical("/proc/self/exe", ec);
  if (!ec) {
    if (std::string p = installed_beside(self.parent_path()); !p.empty()) return p;
  }
  if (fs::exists(TIERRT_BUILD_LIBRARY, ec)) return TIERRT_BUILD_LIBRARY;
  return {};
}

std::string check_library(const std::string& path, const std::string& ld_preload) {
  std::error_code ec;
  if (!fs::is_regular_file(path, ec)) return path + ": no such file";
  int out[2];
  if (pipe2(out, O_CLOEXEC) != 0) return path + ": cannot be checked (no pipe)";
  const pid_t pid = fork();
  if (pid == 0) {
    dup2(out[1], STDOUT_FILENO);
    dup2(out[1], STDERR_FILENO);
    setenv("LD_PRELOAD", ld_preload.c_str(), 1);
    execl("/proc/self/exe", "tierrt-run", kCheckLibraryFlag, path.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  close(out[1]);
  std::string output;
  char buf[512];
  for (ssize_t n; (n = read(out[0], buf, sizeof buf)) != 0;) {
    if (n > 0) output.append(buf, static_cast<std::size_t>(n));
    else if (errno != EINTR) break;
  }
  close(out[0]);
  int status = 0;
  if (pid < 0 || waitpid(pid, &status, 0) != pid) return path + ": cannot be checked (no child process)";
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return {};
  return path + ": " + one_line(output);
}

int check_preloaded_library(const char* path) {
  std::error_code ec;
  const fs::path wanted = fs::canonical(path, ec);
  std::string missing;
  for (const char* name : kApi) {
    void* f = dlsym(RTLD_DEFAULT, name);
    Dl_info info{};
    if (f && dladdr(f, &info) && info.dli_fname && fs::canonical(info.dli_fname, ec) == wanted) continue;
    missing += missing.empty() ? name : std::string(", ") + name;
  }
  if (missing.empty()) return 0;
  std::fprintf(stderr, "is not libtierrt.so (it does not export %s)\n", missing.c_str());
  return 1;
}

}  // namespace tierrt::run
