//! The process allocator, tuned for a long-running daemon (glibc only; elsewhere these
//! do nothing).
//!
//! glibc gives each thread that allocates its own arena (up to eight per core), and
//! memory freed in one arena is not reused by another: the Kubernetes client's
//! threads, the runtime's workers and Cranelift's compile threads each keep their own
//! high-water mark. Two arenas keep the daemon's resident memory close to what it
//! uses (measured by the `node_init` bench). Compiling a provider frees several MiB at
//! once; [`release_free_memory`] hands them back to the system after a load.

/// Limits glibc to two malloc arenas, unless `MALLOC_ARENA_MAX` says otherwise. Call
/// before any thread starts.
pub fn limit_arenas() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    if std::env::var_os("MALLOC_ARENA_MAX").is_none() {
        // SAFETY: mallopt only changes allocator settings; called before threads start.
        #[allow(unsafe_code)]
        unsafe {
            libc::mallopt(libc::M_ARENA_MAX, 2);
        }
    }
}

/// Returns the allocator's free pages to the system (after a provider compile).
pub fn release_free_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only releases free memory; it is thread-safe.
    #[allow(unsafe_code)]
    unsafe {
        libc::malloc_trim(0);
    }
}
