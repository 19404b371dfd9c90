//! PyTorch from the inside: its caching allocator's tensors and segments
//! (`allocator`, through the allocator's trace tracker), the tensors of its
//! cudaMallocAsync backend (`async_backend`), and the autograd node that
//! made a tensor on the backward pass's threads (`autograd`); which of
//! its blocks are a CUDA library's workspace (`workspaces`). What the
//! collector keeps of it between events is `hook`.

pub mod allocator;
pub mod async_backend;
pub mod autograd;
pub mod hook;
pub mod workspaces;
