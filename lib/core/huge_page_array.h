// Large arrays that their producer fills end to end (a plan's sample table and document
// streams): huge-page memory as in huge_pages.h, without the zeroing pass of resize().
#pragma once

#include <type_traits>
#include <utility>
#include <vector>

#include "core/huge_pages.h"

namespace ms {

// HugePageAllocator whose construct() without a value leaves an element default-initialized
// (uninitialized for plain numbers), so resize() of an array that is then filled end to end
// costs no zeroing pass: the pages are zeroed once by the kernel as they are first touched, and
// for an array of hundreds of MB a second pass in user space is a visible share of the work.
template <class T>
struct UninitHugePageAllocator : HugePageAllocator<T> {
  template <class U>
  struct rebind {
    using other = UninitHugePageAllocator<U>;
  };
  UninitHugePageAllocator() = default;
  template <class U>
  UninitHugePageAllocator(const UninitHugePageAllocator<U>&) noexcept {}

  template <class U>
  void construct(U* p) noexcept(std::is_nothrow_default_constructible_v<U>) {
    ::new (static_cast<void*>(p)) U;
  }
  template <class U, class... Args>
  void construct(U* p, Args&&... args) {
    ::new (static_cast<void*>(p)) U(std::forward<Args>(args)...);
  }
};

// A large array that its producer fills completely (see UninitHugePageAllocator).
template <class T>
using HugePageArray = std::vector<T, UninitHugePageAllocator<T>>;

}  // namespace ms
