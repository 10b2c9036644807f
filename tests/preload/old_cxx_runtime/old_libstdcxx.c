/* A stand-in for the older libstdc++.so.6 a Python environment puts first on
 * the library path: the soname, and symbol versions up to GCC 11's
 * (GLIBCXX_3.4.29), nothing newer. A preload that needs the system's
 * libstdc++ fails to load in front of it; libtierrt.so must not need one. */
void tierrt_old_cxx_runtime_marker(void) {}
