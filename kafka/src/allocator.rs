//! How long the process's allocator keeps memory it freed before it gives the pages back to
//! the kernel: featurelog's binaries set it once, at start.
//!
//! They allocate from mimalloc, librdkafka included (its `override`). librdkafka frees and
//! allocates its fetch buffers (a decompressed message set each) many times a second, and the
//! joiner the records it copies out of them, its Parquet buffers at each flush and the logs it
//! held. mimalloc's default `purge_delay` gives a page back 1 s after it was freed, and that
//! churn reuses most pages a little later than that: the kernel faulted them in and zeroed them
//! again each time. On the join benchmark's 1.8M records, 10 s halved the minor page faults
//! (372,000-406,000 to 168,000-193,000) and the system CPU time (1.6-1.8 s to 0.8-1.0 s). Memory
//! freed and not reused still goes back, 10 s later.

/// The delay, in milliseconds, unless the environment sets mimalloc's own
/// (`MIMALLOC_PURGE_DELAY`, which the allocator reads before `main`).
pub const PURGE_DELAY_MS: std::ffi::c_long = 10_000;

/// `mi_option_purge_delay`, its place in mimalloc.h's option list (v2 and v3): the crate's
/// bindings do not name it. The unit test reads mimalloc's default there.
const MI_OPTION_PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;

/// Sets mimalloc's purge delay to [`PURGE_DELAY_MS`], unless the environment set it. Call it
/// first thing in `main`; it affects the whole process.
pub fn keep_freed_pages() {
    let set_by_env = ["MIMALLOC_PURGE_DELAY", "MIMALLOC_RESET_DELAY"]
        .iter()
        .any(|name| std::env::var_os(name).is_some());
    if set_by_env {
        return;
    }
    // Unsafe only as a foreign call: it stores an integer in mimalloc's option table, which the
    // allocator reads whenever it decides to purge, and touches no memory of ours.
    #[allow(unsafe_code)]
    // SAFETY: `mi_option_set` takes an option id and a value and may be called at any time.
    unsafe {
        libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, PURGE_DELAY_MS);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[allow(unsafe_code)]
    fn purge_delay() -> std::ffi::c_long {
        // SAFETY: reads an integer from mimalloc's option table.
        unsafe { libmimalloc_sys::mi_option_get(MI_OPTION_PURGE_DELAY) }
    }

    #[test]
    fn the_purge_delay_is_set_unless_the_environment_sets_it() {
        if std::env::var_os("MIMALLOC_PURGE_DELAY").is_some() {
            return;
        }
        // mimalloc v3's default, read at the option's place: the place is the purge delay's.
        assert_eq!(purge_delay(), 1000);
        keep_freed_pages();
        assert_eq!(purge_delay(), PURGE_DELAY_MS);
    }
}
