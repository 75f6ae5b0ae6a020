// Everything but the thread number is inline in include/CAtomics.h.
#include "CAtomics.h"

static _Thread_local unsigned thread_number;
static unsigned threads_numbered;

unsigned cairn_thread_number(void) {
  if (thread_number == 0) {
    unsigned n = __atomic_add_fetch(&threads_numbered, 1, __ATOMIC_RELAXED);
    thread_number = n == 0 ? 1 : n;
  }
  return thread_number;
}
