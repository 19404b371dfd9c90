//! Whether the collector records now. Recording starts once CUPTI is set
//! up; it stops for good at exit, in a fork child and after an internal
//! error; the program may pause and resume it between steps
//! (`gmem_prof_set_recording`). Every callback and hook asks `recording()`
//! before anything else, so this is read on every event: plain atomics.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

#[derive(Default)]
pub struct Switch {
    /// Callbacks record only while this is set (cleared at exit, in a fork
    /// child, and when CUPTI could not be set up).
    on: AtomicBool,
    /// Set while the program has paused recording (`set_paused`), which
    /// holds `pausing` while it switches.
    paused: AtomicBool,
    pausing: Mutex<()>,
    /// Set once the end began (exit, fork child): the collector's threads
    /// stop, and the end runs once.
    ending: AtomicBool,
}

impl Switch {
    /// Whether events are being recorded now.
    #[inline]
    pub fn recording(&self) -> bool {
        self.on.load(Ordering::Relaxed) && !self.paused.load(Ordering::Relaxed)
    }

    /// Whether recording was started and not stopped (paused or not).
    pub fn is_on(&self) -> bool {
        self.on.load(Ordering::Acquire)
    }

    pub fn turn_on(&self) {
        self.on.store(true, Ordering::SeqCst);
    }

    /// Stops recording for good; returns whether it was on.
    pub fn turn_off(&self) -> bool {
        self.on.swap(false, Ordering::SeqCst)
    }

    /// Marks the end as begun; returns whether it already was.
    pub fn begin_end(&self) -> bool {
        self.ending.swap(true, Ordering::SeqCst)
    }

    /// Whether the end has begun (the collector's threads then stop).
    pub fn ending(&self) -> bool {
        self.ending.load(Ordering::Acquire)
    }

    /// Pauses or resumes recording: `switch_callbacks` turns CUPTI's
    /// callbacks off or on and says whether all of them switched. It is
    /// paused before the callbacks go and resumed after they are back, so
    /// no callback records half of a call. Returns `None` when nothing
    /// changed (recording off, already so, or another switch under way
    /// failed), else what `switch_callbacks` said.
    pub fn set_paused(
        &self,
        paused: bool,
        switch_callbacks: impl FnOnce() -> bool,
    ) -> Option<bool> {
        let Ok(_switching) = self.pausing.lock() else {
            return None;
        };
        if !self.on.load(Ordering::Acquire) || self.paused.load(Ordering::Acquire) == paused {
            return None;
        }
        if paused {
            self.paused.store(true, Ordering::Release);
        }
        let all_set = switch_callbacks();
        if !paused {
            self.paused.store(false, Ordering::Release);
        }
        Some(all_set)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pausing_needs_recording_on_and_a_change() {
        let s = Switch::default();
        assert!(!s.recording());
        assert_eq!(s.set_paused(true, || true), None, "not on yet");
        s.turn_on();
        assert!(s.recording());
        // While the callbacks switch, recording is already paused.
        assert_eq!(s.set_paused(true, || !s.recording()), Some(true));
        assert!(!s.recording() && s.is_on());
        assert_eq!(s.set_paused(true, || true), None, "already paused");
        // Resumed only after the callbacks are back.
        assert_eq!(s.set_paused(false, || !s.recording()), Some(true));
        assert!(s.recording());
        assert!(s.turn_off());
        assert!(!s.turn_off(), "off once");
        assert!(!s.begin_end());
        assert!(s.begin_end(), "the end begins once");
        assert!(s.ending());
    }
}
