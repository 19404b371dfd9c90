//! Analyzer tests, one binary:
//! - `samples`: the real traces of traces/samples/, checked against what the
//!   recorded programs did (the `// expect:` lines of tests/programs/*.cu and
//!   the figures PyTorch itself reported), never against our own output.
//! - `reference`: random traces compared with a naive reference.
//! - `constructed`: patterns with exactly known answers (fragmentation).
//! - `damaged`: bad input gives warnings or a clear error, never a panic.
//! - `determinism`: the same analysis whatever the thread count.

mod constructed;
mod damaged;
mod determinism;
mod events;
mod reference;
mod samples;
mod util;
