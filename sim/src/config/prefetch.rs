//! Cache prefetch hints: the replay often knows which scattered memory it will read a little
//! before it reads it (`truth`'s sorted batches), and fetching it meanwhile overlaps the wait for
//! memory with other work.

/// Starts fetching into cache the `len` bytes at `at` (a hint only: nothing is read, and on a
/// target without the instruction nothing happens).
pub fn prefetch_bytes(at: *const u8, len: usize) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        let mut line = at as usize & !63;
        let end = at as usize + len.max(1);
        while line < end {
            // SAFETY: `_mm_prefetch` needs SSE, which every x86-64 processor has; a prefetch
            // never faults and reads nothing the program sees, so any address will do.
            #[allow(unsafe_code)]
            unsafe {
                _mm_prefetch::<_MM_HINT_T0>(line as *const i8)
            };
            line += 64;
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (at, len);
}
