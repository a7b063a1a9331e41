// Thread-ownership annotations (STYLE.md point 13): which mutex guards a member, and
// which functions must hold it.
//
// Under clang they are its thread-safety attributes (checked with -Wthread-safety where
// the mutex type is annotated); elsewhere they compile to nothing and document ownership.
// Members a single thread owns say so in a comment ("background thread only"). Not for:
// run-time checks (the thread sanitizer job does those).
#pragma once

#if defined(__clang__)
#define KOLO_THREAD_ATTRIBUTE(x) __attribute__((x))
#else
#define KOLO_THREAD_ATTRIBUTE(x)
#endif

// The member is read and written only while holding `mu`.
#define KOLO_GUARDED_BY(mu) KOLO_THREAD_ATTRIBUTE(guarded_by(mu))
// What the pointer points to is guarded by `mu`.
#define KOLO_PT_GUARDED_BY(mu) KOLO_THREAD_ATTRIBUTE(pt_guarded_by(mu))
// The function must be called with `mu` held.
#define KOLO_REQUIRES(mu) KOLO_THREAD_ATTRIBUTE(requires_capability(mu))
// The function must be called without `mu` held (it takes it).
#define KOLO_EXCLUDES(mu) KOLO_THREAD_ATTRIBUTE(locks_excluded(mu))
