// Per-thread arenas serving operator new while a oneDNN primitive executes.
//
// oneDNN 2.6 allocates on every dnnl_primitive_execute, and no API avoids it:
// cvt_primitive_args copies the argument array into a std::unordered_map (one
// node per argument plus a bucket array), and implementations wrap their
// parallel body in a std::function and build a std::vector of post-op
// arguments: 4-10 small operator new calls per step. While an ExecArenaScope
// is alive, operator new on its thread is served from that thread's arena
// instead of the heap (exec_arena.cpp replaces the global allocation functions
// with pass-throughs to malloc/free that do this), so an inference makes no
// heap allocation. Under sanitizers the replacement is compiled out and the
// scope does nothing. (oneDNN's gemm-based matmul also allocates its packing
// buffers with posix_memalign on every call, which no operator new arena sees:
// constant-weight matmuls run on packed_gemm.h instead.)
#pragma once

namespace sampan::cpu {

//! While alive (and nested ones), operator new on this thread comes from its arena.
class ExecArenaScope {
 public:
  ExecArenaScope();
  ~ExecArenaScope();
  ExecArenaScope(const ExecArenaScope&) = delete;
  ExecArenaScope& operator=(const ExecArenaScope&) = delete;
};

//! True when this build serves operator new from the arenas (false under sanitizers).
bool ExecArenaEnabled();

}  // namespace sampan::cpu
