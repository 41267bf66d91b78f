// The arenas behind ExecArenaScope, and the global allocation functions that use them.
//
// Every replaceable operator new/delete of the program is defined here (the
// linker takes this object with ExecArenaScope, which DnnlStep uses, and an
// executable's definitions override libstdc++'s for every shared library too).
// Outside a scope they behave exactly as libstdc++'s: malloc (aligned_alloc for
// over-aligned types), the new-handler loop, std::bad_alloc; delete calls free.
//
// Inside a scope, on the scope's thread only, operator new bumps a pointer in
// the thread's slot of one reserved address range (mmap, MAP_NORESERVE: pages
// cost memory only once touched). Soundness:
//   - operator delete recognises arena memory by address (one range for all
//     threads), on any thread, at any time, and only decrements the owning
//     slot's count of live allocations; it never hands arena memory to free().
//   - A slot is rewound only when that count is zero. An outermost scope that
//     finds its thread's slot still holding live memory (allocated in an earlier
//     scope and kept: oneDNN builds some JIT kernels and caches lazily on a
//     primitive's first execution and keeps them for the process) leaves that
//     slot as it is and takes another whose count is zero. Memory kept past a
//     scope therefore stays valid; the slot it lives in becomes usable again
//     once all of it is freed, by whichever thread. After warm-up nothing is
//     kept, and a thread keeps rewinding the same slot.
//   - A slot holds one thread at a time; a thread returns its slot when it exits.
//     With no usable slot left, or a scope needing more than a slot, operator
//     new simply falls back to malloc.
//   - The OpenMP workers of a parallel region that a scope's primitive starts
//     allocate too (oneDNN's reorders and deconvolutions build per-thread state
//     in their parallel bodies): while any scope is alive, a thread inside an
//     OpenMP parallel region takes a slot of its own the same way. Such a
//     thread enters no scope, so its slot is rewound at an allocation that
//     finds every earlier one freed (the same condition a scope checks), and a
//     slot full of memory still live is left to it for another.
//   - Other threads are unaffected.
// Sanitizers bring their own operator new/delete (ASan checks new/delete pairs
// through them): under ASan, TSan and MSan none of this is compiled and the
// scope does nothing. SAMPAN_CPU_EXEC_ARENA=0 turns the arenas off at run time.
#include "backends/cpu/exec_arena.h"

#include <omp.h>
#include <sys/mman.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <new>

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__) || defined(__SANITIZE_MEMORY__)
#define SP_EXEC_ARENA 0
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer) || __has_feature(memory_sanitizer)
#define SP_EXEC_ARENA 0
#endif
#endif
#if !defined(SP_EXEC_ARENA) && defined(__linux__)
#define SP_EXEC_ARENA 1
#endif
#ifndef SP_EXEC_ARENA
#define SP_EXEC_ARENA 0
#endif

namespace sampan::cpu {

#if SP_EXEC_ARENA

namespace {

constexpr size_t kSlotBytes = size_t{16} << 10;  // one primitive call uses well under 2 KiB
constexpr size_t kSlots = 4096;                  // 64 MiB of address space
constexpr size_t kAlign = __STDCPP_DEFAULT_NEW_ALIGNMENT__;

struct Slot {
  std::atomic<int64_t> live{0};    // allocations from this slot not freed yet (freed on any thread)
  std::atomic<bool> taken{false};  // owned by a thread
  size_t used = 0;                 // bytes bumped since the last rewind (owner only)
};

// Constant-initialised: operator new may run before any dynamic initialiser.
constinit Slot g_slots[kSlots];
constinit std::atomic<char*> g_base{nullptr};  // kSlots * kSlotBytes bytes, set once

// Per thread, constant-initialised (usable at any time, even during thread exit).
constinit thread_local int t_slot = -1;  // -1: none yet; -2: none (all taken, disabled, or thread exiting)
constinit thread_local int t_depth = 0;
constinit std::atomic<int> g_scopes{0};  // threads inside a scope (outermost scopes alive)

bool DisabledByEnv() {
  static const bool disabled = [] {
    const char* v = std::getenv("SAMPAN_CPU_EXEC_ARENA");
    return v != nullptr && v[0] == '0';
  }();
  return disabled;
}

char* Base() {
  char* base = g_base.load(std::memory_order_acquire);
  if (base != nullptr) return base;
  void* p =
      mmap(nullptr, kSlots * kSlotBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) return nullptr;
  char* expected = nullptr;
  if (!g_base.compare_exchange_strong(expected, static_cast<char*>(p), std::memory_order_acq_rel)) {
    munmap(p, kSlots * kSlotBytes);  // another thread published its range first
    return expected;
  }
  return static_cast<char*>(p);
}

// Gives the thread's slot back when the thread exits.
struct SlotReleaser {
  ~SlotReleaser() {
    if (t_slot >= 0) g_slots[t_slot].taken.store(false, std::memory_order_release);
    t_slot = -2;
  }
};

// A slot holding no live memory, taken for this thread and rewound; -2 when none is left.
int AcquireSlot() {
  if (DisabledByEnv() || Base() == nullptr) return -2;
  for (size_t i = 0; i < kSlots; ++i) {
    Slot& s = g_slots[i];
    if (s.taken.load(std::memory_order_relaxed) || s.live.load(std::memory_order_relaxed) != 0) continue;
    bool expected = false;
    if (!s.taken.compare_exchange_strong(expected, true, std::memory_order_acq_rel)) continue;
    if (s.live.load(std::memory_order_acquire) != 0) {  // memory of a previous owner still live
      s.taken.store(false, std::memory_order_release);
      continue;
    }
    s.used = 0;
    thread_local SlotReleaser releaser;  // registered once per thread, on its first slot
    (void)releaser;
    return static_cast<int>(i);
  }
  return -2;
}

// A thread in no scope of its own running an OpenMP parallel region's body while some scope is
// alive: a worker of the team a scope's primitive started. (Workers of unrelated regions at the
// same time are served too, which is harmless: arena memory is valid until freed.)
bool InScopedTeam() {
  return g_scopes.load(std::memory_order_relaxed) > 0 && omp_in_parallel();
}

// Arena memory for the current thread's scope (or scoped team), or null (no scope, no slot, too big).
void* ArenaAlloc(size_t n, size_t align) {
  if (t_slot == -2 || (t_depth == 0 && !InScopedTeam())) return nullptr;
  const size_t size = ((n == 0 ? 1 : n) + kAlign - 1) & ~(kAlign - 1);
  for (int attempt = 0; attempt < 2; ++attempt) {
    if (t_slot == -1) t_slot = AcquireSlot();
    if (t_slot < 0) return nullptr;
    Slot& s = g_slots[t_slot];
    if (s.live.load(std::memory_order_acquire) == 0) s.used = 0;  // all bumped so far is freed
    const size_t start = (s.used + align - 1) & ~(align - 1);
    if (start <= kSlotBytes && size <= kSlotBytes - start) {
      s.used = start + size;
      s.live.fetch_add(1, std::memory_order_relaxed);
      return g_base.load(std::memory_order_relaxed) + static_cast<size_t>(t_slot) * kSlotBytes + start;
    }
    if (s.used == 0) return nullptr;  // larger than a slot
    // Full of memory still live (kept past its scope): leave the slot to it and take another.
    s.taken.store(false, std::memory_order_release);
    t_slot = -1;
  }
  return nullptr;
}

// True (and accounted) when `p` is arena memory.
bool ArenaFree(void* p) {
  char* base = g_base.load(std::memory_order_acquire);
  const auto c = static_cast<char*>(p);
  if (base == nullptr || c < base || c >= base + kSlots * kSlotBytes) return false;
  g_slots[static_cast<size_t>(c - base) / kSlotBytes].live.fetch_sub(1, std::memory_order_release);
  return true;
}

void* HeapNew(size_t n) {
  for (;;) {
    if (void* p = std::malloc(n == 0 ? 1 : n)) return p;
    std::new_handler h = std::get_new_handler();
    if (h == nullptr) throw std::bad_alloc();
    h();
  }
}

void* HeapNewAligned(size_t n, size_t align) {
  if (align < sizeof(void*)) align = sizeof(void*);
  n = ((n == 0 ? 1 : n) + align - 1) & ~(align - 1);  // aligned_alloc wants a multiple of the alignment
  for (;;) {
    if (void* p = std::aligned_alloc(align, n)) return p;
    std::new_handler h = std::get_new_handler();
    if (h == nullptr) throw std::bad_alloc();
    h();
  }
}

void* New(size_t n) {
  if (void* p = ArenaAlloc(n, kAlign)) return p;
  return HeapNew(n);
}

void* NewAligned(size_t n, std::align_val_t al) {
  const auto align = static_cast<size_t>(al);
  if (align <= kSlotBytes / 16)
    if (void* p = ArenaAlloc(n, align)) return p;
  return HeapNewAligned(n, align);
}

void Delete(void* p) noexcept {
  if (p != nullptr && !ArenaFree(p)) std::free(p);
}

}  // namespace

ExecArenaScope::ExecArenaScope() {
  if (t_depth++ != 0) return;
  g_scopes.fetch_add(1, std::memory_order_relaxed);
  if (t_slot == -2) return;
  if (t_slot >= 0) {
    Slot& s = g_slots[t_slot];
    if (s.live.load(std::memory_order_acquire) == 0) {
      s.used = 0;
      return;
    }
    s.taken.store(false, std::memory_order_release);  // kept memory: leave the slot to it
  }
  t_slot = AcquireSlot();
}

ExecArenaScope::~ExecArenaScope() {
  if (--t_depth == 0) g_scopes.fetch_sub(1, std::memory_order_relaxed);
}

bool ExecArenaEnabled() {
  return !DisabledByEnv();
}

#else  // SP_EXEC_ARENA

ExecArenaScope::ExecArenaScope() {}
ExecArenaScope::~ExecArenaScope() {}
bool ExecArenaEnabled() {
  return false;
}

#endif  // SP_EXEC_ARENA

}  // namespace sampan::cpu

#if SP_EXEC_ARENA

// The replaceable global allocation functions ([new.delete]).
using sampan::cpu::Delete;
using sampan::cpu::New;
using sampan::cpu::NewAligned;

void* operator new(std::size_t n) {
  return New(n);
}
void* operator new[](std::size_t n) {
  return New(n);
}
void* operator new(std::size_t n, const std::nothrow_t&) noexcept {
  try {
    return New(n);
  } catch (...) {
    return nullptr;
  }
}
void* operator new[](std::size_t n, const std::nothrow_t&) noexcept {
  try {
    return New(n);
  } catch (...) {
    return nullptr;
  }
}
void* operator new(std::size_t n, std::align_val_t al) {
  return NewAligned(n, al);
}
void* operator new[](std::size_t n, std::align_val_t al) {
  return NewAligned(n, al);
}
void* operator new(std::size_t n, std::align_val_t al, const std::nothrow_t&) noexcept {
  try {
    return NewAligned(n, al);
  } catch (...) {
    return nullptr;
  }
}
void* operator new[](std::size_t n, std::align_val_t al, const std::nothrow_t&) noexcept {
  try {
    return NewAligned(n, al);
  } catch (...) {
    return nullptr;
  }
}
void operator delete(void* p) noexcept {
  Delete(p);
}
void operator delete[](void* p) noexcept {
  Delete(p);
}
void operator delete(void* p, const std::nothrow_t&) noexcept {
  Delete(p);
}
void operator delete[](void* p, const std::nothrow_t&) noexcept {
  Delete(p);
}
void operator delete(void* p, std::size_t) noexcept {
  Delete(p);
}
void operator delete[](void* p, std::size_t) noexcept {
  Delete(p);
}
void operator delete(void* p, std::align_val_t) noexcept {
  Delete(p);
}
void operator delete[](void* p, std::align_val_t) noexcept {
  Delete(p);
}
void operator delete(void* p, std::align_val_t, const std::nothrow_t&) noexcept {
  Delete(p);
}
void operator delete[](void* p, std::align_val_t, const std::nothrow_t&) noexcept {
  Delete(p);
}
void operator delete(void* p, std::size_t, std::align_val_t) noexcept {
  Delete(p);
}
void operator delete[](void* p, std::size_t, std::align_val_t) noexcept {
  Delete(p);
}

#endif  // SP_EXEC_ARENA
