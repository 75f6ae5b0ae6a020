// Atomic loads and stores of 64-bit words in memory the engine does not own
// as Swift values: the coordination file, mapped shared between processes.
// Swift's Synchronization.Atomic must live in a Swift value, so it cannot
// overlay a mapped file; these are the C11 operations, inlined. The read
// path's counters use them too, on words of their own (see StripedCounter).
#ifndef CAIRN_ATOMICS_H
#define CAIRN_ATOMICS_H

#include <stdint.h>

static inline uint64_t cairn_load_acquire(const void *p) {
  return __atomic_load_n((const uint64_t *)p, __ATOMIC_ACQUIRE);
}

static inline uint64_t cairn_load_relaxed(const void *p) {
  return __atomic_load_n((const uint64_t *)p, __ATOMIC_RELAXED);
}

static inline void cairn_store_release(void *p, uint64_t v) {
  __atomic_store_n((uint64_t *)p, v, __ATOMIC_RELEASE);
}

static inline void cairn_store_relaxed(void *p, uint64_t v) {
  __atomic_store_n((uint64_t *)p, v, __ATOMIC_RELAXED);
}

static inline void cairn_fence_acquire(void) { __atomic_thread_fence(__ATOMIC_ACQUIRE); }

static inline void cairn_fence_release(void) { __atomic_thread_fence(__ATOMIC_RELEASE); }

static inline void cairn_fence_seq_cst(void) { __atomic_thread_fence(__ATOMIC_SEQ_CST); }

static inline uint64_t cairn_fetch_add(void *p, uint64_t v) {
  return __atomic_fetch_add((uint64_t *)p, v, __ATOMIC_SEQ_CST);
}

static inline void cairn_add_relaxed(void *p, uint64_t v) {
  __atomic_fetch_add((uint64_t *)p, v, __ATOMIC_RELAXED);
}

static inline void cairn_or_relaxed(void *p, uint64_t v) {
  __atomic_fetch_or((uint64_t *)p, v, __ATOMIC_RELAXED);
}

/// A small number fixed for the calling thread: 1 for the first thread
/// that asks, 2 for the next, and so on (wrapping). Counters many readers
/// add to pick their stripe by it, so two threads rarely share a line.
unsigned cairn_thread_number(void);

/// Stores `desired` if the word holds `expected`; returns whether it did.
static inline int cairn_compare_exchange(void *p, uint64_t expected, uint64_t desired) {
  return __atomic_compare_exchange_n((uint64_t *)p, &expected, desired, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
}

#endif
