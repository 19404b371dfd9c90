//! Which node of PyTorch's autograd graph a thread is evaluating.
//!
//! The backward pass's tensors are allocated on autograd's own threads,
//! which run no Python. A native walk of their stacks (through the engine
//! to the node's `apply`) was about half of what recording resnet50's
//! training step cost when the host sets its pace (0.96 µs per tensor
//! against 0.42 without it, on the H200), and what a person reads from
//! that stack is the node ("AddmmBackward0"). The engine keeps the node at
//! hand: `torch::autograd::get_current_node()`, exported by libtorch_cpu.so,
//! returns the one this thread is evaluating. Such a tensor's stack is then
//! one frame naming the node's class (`AUTOGRAD_NODE_FILE`), read from its
//! C++ type information once per class.
//!
//! The ABI facts relied on (Itanium C++ ABI, libstdc++, x86-64, as every
//! PyTorch build for Linux x86-64 has them):
//! - `get_current_node` returns a `std::shared_ptr<Node>` by value: the
//!   caller passes the address of the result (two words: object, control
//!   block) and gets it back. A function of that name that returned a raw
//!   pointer or a reference would hand back something else, and the node
//!   is then not used.
//! - The copy we get holds one reference, given back by decrementing the
//!   control block's use count (its second word, after the vtable pointer:
//!   `_Sp_counted_base::_M_use_count`). The engine's own reference, held in
//!   a thread-local for as long as the node runs, keeps it above zero.
//! - A polymorphic object starts with its vtable pointer; the word before
//!   the vtable's address point is its `std::type_info`, whose second word
//!   is the mangled class name. Every pointer is checked to lie in a loaded
//!   module before it is read, and the name must look like a mangled class
//!   name; anything else and the thread's events get their native stack as
//!   before.

use std::cell::RefCell;
use std::ffi::{c_void, CStr, CString};
use std::sync::atomic::{AtomicI32, Ordering};

use crate::stacks::modules;

const LIBRARY: &str = "libtorch_cpu.so";
const GET_CURRENT_NODE: &CStr = c"_ZN5torch8autograd16get_current_nodeEv";

/// libstdc++'s `std::shared_ptr<T>`.
#[repr(C)]
struct SharedPtr {
    object: usize,
    control: usize,
}

/// `std::shared_ptr<Node> torch::autograd::get_current_node()`, with its
/// hidden result pointer (x86-64: passed in rdi, returned in rax).
type GetCurrentNode = unsafe extern "C" fn(result: *mut SharedPtr) -> *mut SharedPtr;

pub struct Autograd {
    current_node: GetCurrentNode,
}

impl Autograd {
    /// The engine's lookup in the loaded libtorch_cpu.so; None when it is
    /// not loaded or does not export it (PyTorch before 1.10).
    pub fn find() -> Option<Autograd> {
        let loaded = modules::find_loaded(LIBRARY)?;
        let path = CString::new(loaded.path).ok()?;
        // PyTorch loads the library RTLD_LOCAL, so dlsym(RTLD_DEFAULT) does
        // not see its symbols; RTLD_NOLOAD gives a handle on the copy that
        // is mapped, never loads one.
        // SAFETY: a valid C string and flags; dlsym and dlclose get the
        // handle dlopen returned.
        let f = unsafe {
            let handle = libc::dlopen(path.as_ptr(), libc::RTLD_LAZY | libc::RTLD_NOLOAD);
            if handle.is_null() {
                return None;
            }
            let f = libc::dlsym(handle, GET_CURRENT_NODE.as_ptr());
            // Our reference goes; PyTorch's keeps the library loaded.
            libc::dlclose(handle);
            f
        };
        if f.is_null() {
            return None;
        }
        // SAFETY: the function of that mangled name takes no argument but
        // its hidden result pointer (checked at each call, see above).
        let current_node = unsafe { std::mem::transmute::<*mut c_void, GetCurrentNode>(f) };
        Some(Autograd { current_node })
    }

    /// The vtable of the node the calling thread is evaluating (what tells
    /// its class), or None outside the backward pass.
    pub fn current_vtable(&self) -> Option<usize> {
        let mut node = SharedPtr {
            object: 0,
            control: 0,
        };
        let result: *mut SharedPtr = &mut node;
        // SAFETY: the engine's getter reads a thread-local and copies a
        // shared_ptr into `result`.
        let back = unsafe { (self.current_node)(result) };
        if back != result {
            return None;
        }
        if node.control != 0 && node.control.is_multiple_of(8) {
            // SAFETY: the live control block of the node's shared_ptr; its
            // use count is an atomic int after the vtable pointer.
            let uses = unsafe { &*((node.control + 8) as *const AtomicI32) };
            uses.fetch_sub(1, Ordering::AcqRel);
        }
        if node.object == 0 || !node.object.is_multiple_of(8) {
            return None;
        }
        // SAFETY: a live polymorphic object (the engine holds it while it
        // runs on this thread) starts with its vtable pointer.
        Some(unsafe { std::ptr::read(node.object as *const usize) })
    }
}

/// The mangled name of the class whose vtable is `vtable`
/// ("N5torch8autograd9generated14AddmmBackward0E"). `module_end` gives
/// the end of the loaded module holding an address (None: none does):
/// nothing outside one is read.
pub fn class_name(vtable: usize, module_end: impl Fn(u64) -> Option<u64>) -> Option<String> {
    let word = |addr: usize| -> Option<usize> {
        let end = module_end(addr as u64)?;
        (addr.is_multiple_of(8) && (addr as u64).checked_add(8)? <= end)
            // SAFETY: 8 aligned bytes inside a loaded module's span.
            .then(|| unsafe { std::ptr::read(addr as *const usize) })
    };
    let type_info = word(vtable.checked_sub(8)?)?;
    let name = word(type_info.checked_add(8)?)?;
    let end = module_end(name as u64)?;
    let len = (end.saturating_sub(name as u64)).min(512) as usize;
    // SAFETY: `len` bytes from `name` lie inside the module's span.
    let bytes = unsafe { std::slice::from_raw_parts(name as *const u8, len) };
    let text = &bytes[..bytes.iter().position(|b| *b == 0)?];
    // GCC marks names compared by address with a leading '*'.
    let text = text.strip_prefix(b"*").unwrap_or(text);
    let mangled = !text.is_empty()
        && (text[0] == b'N' || text[0].is_ascii_digit())
        && text.iter().all(|b| b.is_ascii_alphanumeric() || *b == b'_');
    mangled.then(|| String::from_utf8_lossy(text).into_owned())
}

/// Per thread: vtable → `PyCode` id of its node frame (0: a class that
/// could not be named), direct mapped. A backward pass meets a few hundred
/// classes.
const CLASS_CACHE_BITS: u32 = 8;

thread_local! {
    static CLASS_CACHE: RefCell<Vec<(usize, u32)>> = const { RefCell::new(Vec::new()) };
}

/// The node frame's `PyCode` id of the class of `vtable`, from the
/// thread's cache, else from `name_it` (which names the class and
/// defines its id; None: it cannot be named).
pub fn cached_class_id(vtable: usize, name_it: impl FnOnce() -> Option<u32>) -> Option<u32> {
    let slot =
        ((vtable as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15) >> (64 - CLASS_CACHE_BITS)) as usize;
    CLASS_CACHE.with(|cache| {
        let mut cache = cache.try_borrow_mut().ok()?;
        if cache.is_empty() {
            cache.resize(1 << CLASS_CACHE_BITS, (0, 0));
        }
        let (key, id) = cache[slot];
        if key == vtable {
            return (id != 0).then_some(id);
        }
        let id = name_it();
        cache[slot] = (vtable, id.unwrap_or(0));
        id
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A vtable and type_info laid out as the Itanium ABI lays them out.
    struct Class {
        vtable: Box<[usize; 3]>,
        _type_info: Box<[usize; 2]>,
        _name: Box<[u8]>,
    }

    fn class(name: &[u8]) -> Class {
        let name: Box<[u8]> = name.into();
        let type_info = Box::new([0usize, name.as_ptr() as usize]);
        let vtable = Box::new([0usize, type_info.as_ptr() as usize, 0]);
        Class {
            vtable,
            _type_info: type_info,
            _name: name,
        }
    }

    fn everywhere(_: u64) -> Option<u64> {
        Some(u64::MAX)
    }

    #[test]
    fn reads_the_class_name_from_the_type_info() {
        let c = class(b"N5torch8autograd9generated14AddmmBackward0E\0");
        let vtable = c.vtable.as_ptr() as usize + 16;
        assert_eq!(
            class_name(vtable, everywhere).as_deref(),
            Some("N5torch8autograd9generated14AddmmBackward0E")
        );
        let local = class(b"*N5torch8autograd14AccumulateGradE\0");
        let vtable = local.vtable.as_ptr() as usize + 16;
        assert_eq!(
            class_name(vtable, everywhere).as_deref(),
            Some("N5torch8autograd14AccumulateGradE")
        );
    }

    #[test]
    fn reads_nothing_outside_a_module_nor_a_name_that_is_not_mangled() {
        let c = class(b"N5torch8autograd9generated14AddmmBackward0E\0");
        let vtable = c.vtable.as_ptr() as usize + 16;
        assert_eq!(class_name(vtable, |_| None), None);
        // The name runs past its module's end.
        let name = c._name.as_ptr() as u64;
        let stop_in_name = |a: u64| Some(if a >= name { name + 4 } else { u64::MAX });
        assert_eq!(class_name(vtable, stop_in_name), None);
        for bad in [&b"\0"[..], b"hello world\0", b"N5torch\xff\0"] {
            let c = class(bad);
            let vtable = c.vtable.as_ptr() as usize + 16;
            assert_eq!(class_name(vtable, everywhere), None, "{bad:?}");
        }
    }

    #[test]
    fn the_cache_names_each_class_once_and_remembers_refusals() {
        let mut asked = 0;
        for _ in 0..3 {
            let id = cached_class_id(0x1000, || {
                asked += 1;
                Some(7)
            });
            assert_eq!(id, Some(7));
        }
        assert_eq!(asked, 1);
        for _ in 0..3 {
            assert_eq!(
                cached_class_id(0x2008, || {
                    asked += 1;
                    None
                }),
                None
            );
        }
        assert_eq!(asked, 2);
    }
}
