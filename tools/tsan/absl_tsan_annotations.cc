// Makes absl::Mutex, absl::CondVar and absl::Notification visible to ThreadSanitizer when
// strata is built with -fsanitize=thread (STRATA_SANITIZE=thread) against an Abseil that was
// not: Debian's libabsl carries no TSan annotations, so TSan sees none of its lock/unlock
// happens-before edges and reports every absl::Mutex-guarded access as a race. Compiles to
// nothing in every other build: production code keeps calling Abseil directly.
//
// How: this file defines the public out-of-line Mutex/CondVar/Notification entry points
// itself. The executable's definitions take precedence over libabsl_synchronization.so's, for
// our code and for Abseil's own PLT calls (Notification -> Mutex::LockWhen/Unlock); each one
// tells TSan what the call does to the lock with the __tsan_mutex_* annotations (the ones
// Abseil itself uses when built with TSan) and calls the real function through
// dlsym(RTLD_NEXT). Calls inside the real function run in TSan's ignore window, so a
// Condition evaluated there (possibly by the unlocking thread) is neither reported nor
// checked. Functions that the library's *WithTimeout variants reach through the PLT (the
// *WithDeadline ones) are annotated once, there, never twice.
//
// Also turns off Abseil's own deadlock detector (see kAbslDeadlockDetectionOff).
//
// Limits: needs a shared libabsl_synchronization (dlsym) built with an inline namespace
// (mangled names below), and the Notification layout {Mutex, atomic<bool>}. Define
// STRATA_NO_ABSL_TSAN_ANNOTATIONS when Abseil itself is built with TSan.
#include "absl/base/config.h"

#if defined(ABSL_HAVE_THREAD_SANITIZER) && !defined(STRATA_NO_ABSL_TSAN_ANNOTATIONS)

#include <dlfcn.h>
#include <sanitizer/tsan_interface.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"

static_assert(ABSL_OPTION_USE_INLINE_NAMESPACE == 1,
              "mangled names below assume Abseil's inline namespace");

namespace {

#define STRATA_ABSL_STR2(x) #x
#define STRATA_ABSL_STR(x) STRATA_ABSL_STR2(x)

// Resolves absl::<ns>::<suffix> in the next object after the executable (libabsl).
void* RealSymbol(const char* prefix, const char* suffix) {
  const char* ns = STRATA_ABSL_STR(ABSL_OPTION_INLINE_NAMESPACE_NAME);
  std::string name = std::string(prefix) + "4absl" + std::to_string(std::strlen(ns)) + ns + suffix;
  void* sym = dlsym(RTLD_NEXT, name.c_str());
  if (sym == nullptr) {
    std::fprintf(stderr, "strata absl TSan annotations: %s not found in a shared libabsl\n",
                 name.c_str());
    std::abort();
  }
  return sym;
}

template <typename Fn>
Fn Real(const char* prefix, const char* suffix) {
  return reinterpret_cast<Fn>(RealSymbol(prefix, suffix));
}

#define STRATA_REAL(type, prefix, suffix) static const auto real = Real<type>(prefix, suffix)

// Where the notified flag lives: Notification is {mutable Mutex mutex_; atomic<bool>}.
static_assert(sizeof(absl::Notification) == sizeof(absl::Mutex) + alignof(absl::Mutex));
void* NotifiedFlag(const absl::Notification* n) {
  return const_cast<char*>(reinterpret_cast<const char*>(n)) + sizeof(absl::Mutex);
}

// Debian builds Abseil in debug mode, so absl::Mutex keeps a global lock-order graph (its
// deadlock detector) under an uninstrumented spin lock; the graph's memmove/memset go through
// TSan's interceptors and show up as races between unrelated Mutex destructions. TSan's own
// lock-order detector, fed by the annotations below, takes its place.
const bool kAbslDeadlockDetectionOff = [] {
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  return true;
}();

}  // namespace

namespace absl {
ABSL_NAMESPACE_BEGIN

// ---- exclusive and shared locking ---------------------------------------------------------

void Mutex::Lock() {
  STRATA_REAL(void (*)(Mutex*), "_ZN", "5Mutex4LockEv");
  __tsan_mutex_pre_lock(this, 0);
  real(this);
  __tsan_mutex_post_lock(this, 0, 0);
}

void Mutex::Unlock() {
  STRATA_REAL(void (*)(Mutex*), "_ZN", "5Mutex6UnlockEv");
  __tsan_mutex_pre_unlock(this, 0);
  real(this);
  __tsan_mutex_post_unlock(this, 0);
}

bool Mutex::TryLock() {
  STRATA_REAL(bool (*)(Mutex*), "_ZN", "5Mutex7TryLockEv");
  __tsan_mutex_pre_lock(this, __tsan_mutex_try_lock);
  const bool locked = real(this);
  __tsan_mutex_post_lock(this, locked ? __tsan_mutex_try_lock : __tsan_mutex_try_lock_failed, 0);
  return locked;
}

void Mutex::ReaderLock() {
  STRATA_REAL(void (*)(Mutex*), "_ZN", "5Mutex10ReaderLockEv");
  __tsan_mutex_pre_lock(this, __tsan_mutex_read_lock);
  real(this);
  __tsan_mutex_post_lock(this, __tsan_mutex_read_lock, 0);
}

void Mutex::ReaderUnlock() {
  STRATA_REAL(void (*)(Mutex*), "_ZN", "5Mutex12ReaderUnlockEv");
  __tsan_mutex_pre_unlock(this, __tsan_mutex_read_lock);
  real(this);
  __tsan_mutex_post_unlock(this, __tsan_mutex_read_lock);
}

bool Mutex::ReaderTryLock() {
  STRATA_REAL(bool (*)(Mutex*), "_ZN", "5Mutex13ReaderTryLockEv");
  __tsan_mutex_pre_lock(this, __tsan_mutex_try_read_lock);
  const bool locked = real(this);
  __tsan_mutex_post_lock(
      this, locked ? __tsan_mutex_try_read_lock : __tsan_mutex_try_read_lock_failed, 0);
  return locked;
}

// ---- conditional locking: the lock is held on return, whatever the result -------------

void Mutex::LockWhen(const Condition& cond) {
  STRATA_REAL(void (*)(Mutex*, const Condition*), "_ZN", "5Mutex8LockWhenERKNS0_9ConditionE");
  __tsan_mutex_pre_lock(this, 0);
  real(this, &cond);
  __tsan_mutex_post_lock(this, 0, 0);
}

bool Mutex::LockWhenWithDeadline(const Condition& cond, absl::Time deadline) {
  STRATA_REAL(bool (*)(Mutex*, const Condition*, absl::Time), "_ZN",
              "5Mutex20LockWhenWithDeadlineERKNS0_9ConditionENS0_4TimeE");
  __tsan_mutex_pre_lock(this, 0);
  const bool met = real(this, &cond, deadline);
  __tsan_mutex_post_lock(this, 0, 0);
  return met;
}

void Mutex::ReaderLockWhen(const Condition& cond) {
  STRATA_REAL(void (*)(Mutex*, const Condition*), "_ZN",
              "5Mutex14ReaderLockWhenERKNS0_9ConditionE");
  __tsan_mutex_pre_lock(this, __tsan_mutex_read_lock);
  real(this, &cond);
  __tsan_mutex_post_lock(this, __tsan_mutex_read_lock, 0);
}

bool Mutex::ReaderLockWhenWithDeadline(const Condition& cond, absl::Time deadline) {
  STRATA_REAL(bool (*)(Mutex*, const Condition*, absl::Time), "_ZN",
              "5Mutex26ReaderLockWhenWithDeadlineERKNS0_9ConditionENS0_4TimeE");
  __tsan_mutex_pre_lock(this, __tsan_mutex_read_lock);
  const bool met = real(this, &cond, deadline);
  __tsan_mutex_post_lock(this, __tsan_mutex_read_lock, 0);
  return met;
}

// ---- waiting with the lock held: modelled as unlock ... lock -----------------------------
// The whole real call sits inside the unlock annotation's ignore window, so the Condition
// evaluated there while the lock is really held is not seen as an unlocked access.

void Mutex::Await(const Condition& cond) {
  STRATA_REAL(void (*)(Mutex*, const Condition*), "_ZN", "5Mutex5AwaitERKNS0_9ConditionE");
  __tsan_mutex_pre_unlock(this, 0);
  real(this, &cond);
  __tsan_mutex_post_unlock(this, 0);
  __tsan_mutex_pre_lock(this, 0);
  __tsan_mutex_post_lock(this, 0, 0);
}

bool Mutex::AwaitWithDeadline(const Condition& cond, absl::Time deadline) {
  STRATA_REAL(bool (*)(Mutex*, const Condition*, absl::Time), "_ZN",
              "5Mutex17AwaitWithDeadlineERKNS0_9ConditionENS0_4TimeE");
  __tsan_mutex_pre_unlock(this, 0);
  const bool met = real(this, &cond, deadline);
  __tsan_mutex_post_unlock(this, 0);
  __tsan_mutex_pre_lock(this, 0);
  __tsan_mutex_post_lock(this, 0, 0);
  return met;
}

void CondVar::Wait(Mutex* mu) {
  STRATA_REAL(void (*)(CondVar*, Mutex*), "_ZN", "7CondVar4WaitEPNS0_5MutexE");
  __tsan_mutex_pre_unlock(mu, 0);
  real(this, mu);
  __tsan_mutex_post_unlock(mu, 0);
  __tsan_mutex_pre_lock(mu, 0);
  __tsan_mutex_post_lock(mu, 0, 0);
}

bool CondVar::WaitWithDeadline(Mutex* mu, absl::Time deadline) {
  STRATA_REAL(bool (*)(CondVar*, Mutex*, absl::Time), "_ZN",
              "7CondVar16WaitWithDeadlineEPNS0_5MutexENS0_4TimeE");
  __tsan_mutex_pre_unlock(mu, 0);
  const bool timed_out = real(this, mu, deadline);
  __tsan_mutex_post_unlock(mu, 0);
  __tsan_mutex_pre_lock(mu, 0);
  __tsan_mutex_post_lock(mu, 0, 0);
  return timed_out;
}

Mutex::~Mutex() {
  STRATA_REAL(void (*)(Mutex*), "_ZN", "5MutexD1Ev");
  real(this);
  __tsan_mutex_destroy(this, 0);
}

// ---- Notification: its fast paths read the flag without the mutex -----------------------

void Notification::Notify() {
  STRATA_REAL(void (*)(Notification*), "_ZN", "12Notification6NotifyEv");
  __tsan_release(NotifiedFlag(this));
  real(this);
}

void Notification::WaitForNotification() const {
  STRATA_REAL(void (*)(const Notification*), "_ZNK", "12Notification19WaitForNotificationEv");
  real(this);
  __tsan_acquire(NotifiedFlag(this));
}

bool Notification::WaitForNotificationWithTimeout(absl::Duration timeout) const {
  STRATA_REAL(bool (*)(const Notification*, absl::Duration), "_ZNK",
              "12Notification30WaitForNotificationWithTimeoutENS0_8DurationE");
  const bool notified = real(this, timeout);
  if (notified) __tsan_acquire(NotifiedFlag(this));
  return notified;
}

bool Notification::WaitForNotificationWithDeadline(absl::Time deadline) const {
  STRATA_REAL(bool (*)(const Notification*, absl::Time), "_ZNK",
              "12Notification31WaitForNotificationWithDeadlineENS0_4TimeE");
  const bool notified = real(this, deadline);
  if (notified) __tsan_acquire(NotifiedFlag(this));
  return notified;
}

ABSL_NAMESPACE_END
}  // namespace absl

#endif  // ABSL_HAVE_THREAD_SANITIZER && !STRATA_NO_ABSL_TSAN_ANNOTATIONS
