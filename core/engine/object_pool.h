// PoolAllocator: a std::allocator replacement that recycles blocks through a per-thread
// free list, so making and dropping tensor handles in a loop (`y = x + 1`) does not call
// malloc/free per op. Blocks freed on another thread join that thread's list; each list
// is capped and returns its blocks to the system when its thread exits. A block freed on
// a thread after its list was destroyed (a `static Tensor` dies after the main thread's
// thread_locals) goes straight back to the system.
#pragma once

#include <cstddef>
#include <new>
#include <vector>

namespace tide::detail {

template <size_t Size, size_t Align>
class BlockCache {
 public:
  static void* take() {
    if (t_list_gone) return ::operator new(Size, std::align_val_t(Align));
    auto& l = list();
    if (!l.blocks.empty()) {
      void* p = l.blocks.back();
      l.blocks.pop_back();
      return p;
    }
    return ::operator new(Size, std::align_val_t(Align));
  }
  static void give(void* p) {
    if (t_list_gone) {
      ::operator delete(p, std::align_val_t(Align));
      return;
    }
    auto& l = list();
    if (l.blocks.size() < kCap) l.blocks.push_back(p);
    else ::operator delete(p, std::align_val_t(Align));
  }

 private:
  static constexpr size_t kCap = 4096;
  struct List {
    std::vector<void*> blocks;
    ~List() {
      for (void* p : blocks) ::operator delete(p, std::align_val_t(Align));
      t_list_gone = true;
    }
  };
  // Trivially destructible, so it stays readable after the thread's other thread_locals
  // (the List) are destroyed.
  static inline thread_local bool t_list_gone = false;
  static List& list() {
    thread_local List l;
    return l;
  }
};

template <class T>
struct PoolAllocator {
  using value_type = T;
  PoolAllocator() = default;
  template <class U>
  PoolAllocator(const PoolAllocator<U>&) {}  // NOLINT
  T* allocate(size_t n) {
    if (n == 1) return static_cast<T*>(BlockCache<sizeof(T), alignof(T)>::take());
    return static_cast<T*>(::operator new(n * sizeof(T), std::align_val_t(alignof(T))));
  }
  void deallocate(T* p, size_t n) {
    if (n == 1) BlockCache<sizeof(T), alignof(T)>::give(p);
    else ::operator delete(p, std::align_val_t(alignof(T)));
  }
  template <class U>
  bool operator==(const PoolAllocator<U>&) const {
    return true;
  }
};

}  // namespace tide::detail
