//! How far long work got, for the person waiting at a terminal: one line
//! on stderr, "PREFIX  42% of 7.0 GiB", redrawn in place when the
//! percentage changes and cleared at the end. Off a terminal (a CI log)
//! it prints nothing.

use std::sync::atomic::{AtomicU64, Ordering};

pub struct ProgressLine {
    prefix: String,
    on: bool,
    shown_percent: AtomicU64,
}

impl ProgressLine {
    /// `on`: whether to draw at all (stderr is a terminal, not --quiet).
    pub fn new(prefix: String, on: bool) -> ProgressLine {
        ProgressLine {
            prefix,
            on,
            shown_percent: AtomicU64::new(u64::MAX),
        }
    }

    /// `done` of `total` bytes (callable from any thread: the analyzer's
    /// callback is).
    pub fn show(&self, done: u64, total: u64) {
        if !self.on {
            return;
        }
        let percent = (done * 100 / total.max(1)).min(100);
        if percent != self.shown_percent.swap(percent, Ordering::Relaxed) {
            eprint!(
                "\r{} {percent:>3}% of {}",
                self.prefix,
                gmem_prof_reports::format::bytes(total)
            );
        }
    }

    /// Replaces the line with `text` (a step that moves no bytes).
    pub fn say(&self, text: &str) {
        if self.on {
            eprint!("\r\x1b[2K{text}");
        }
    }

    pub fn clear(&self) {
        if self.on {
            eprint!("\r\x1b[2K");
        }
    }
}

/// What leads the line of run `i` (from 0) of `n`: "run 2/3: ", or nothing
/// for a single run.
pub fn run_label(i: usize, n: usize) -> String {
    match n {
        1 => String::new(),
        n => format!("run {}/{n}: ", i + 1),
    }
}
