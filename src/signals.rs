//! The CLI's signal handlers: `record` passes signals on to the program it
//! runs (record.rs), and a Ctrl-C while a trace is being written stops the
//! writing cleanly (merge.rs): its unfinished output removed, the inputs
//! kept, and a message that says how to finish it later.

use std::sync::atomic::{AtomicBool, Ordering};

/// Installs `handler` for `sig` (a handler, not SIG_IGN, so that programs
/// started afterwards begin with default dispositions).
pub fn set_handler(sig: libc::c_int, handler: extern "C" fn(libc::c_int)) {
    // SAFETY: a zeroed sigaction with a valid handler and empty mask.
    unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = handler as *const () as usize;
        sa.sa_flags = libc::SA_RESTART;
        libc::sigemptyset(&mut sa.sa_mask);
        libc::sigaction(sig, &sa, std::ptr::null_mut());
    }
}

static INTERRUPTED: AtomicBool = AtomicBool::new(false);

extern "C" fn note_interrupt(_sig: libc::c_int) {
    INTERRUPTED.store(true, Ordering::SeqCst);
}

/// From now on Ctrl-C (and SIGTERM) asks the work in progress to stop
/// (`interrupted`) instead of ending the process at once.
pub fn stop_on_interrupt() {
    set_handler(libc::SIGINT, note_interrupt);
    set_handler(libc::SIGTERM, note_interrupt);
}

/// Whether Ctrl-C (or SIGTERM) came since `stop_on_interrupt`.
pub fn interrupted() -> bool {
    INTERRUPTED.load(Ordering::Relaxed)
}
