//! The modules (executable and shared libraries) loaded in this process, as
//! the unwinder and the trace need them: address ranges, build ids, unwind
//! tables. The list follows the loader: modules it unloads are dropped before
//! the next walk (their unwind tables are unmapped with them), modules it
//! loads are added.

use std::ffi::{c_int, c_void, CStr};
use std::ops::Range;

use framehop::x86_64::UnwinderX86_64;
use framehop::{ExplicitModuleSectionInfo, Module, Unwinder};

use crate::stacks::elf::{self, Mapped, PF_X, PT_GNU_EH_FRAME, PT_LOAD, PT_NOTE};

/// What the trace records of a module.
#[derive(Clone, Debug)]
pub struct ModuleDesc {
    pub id: u32,
    pub path: String,
    pub bias: u64,
    pub range: Range<u64>,
    pub build_id: Vec<u8>,
}

pub struct Registry {
    pub unwinder: UnwinderX86_64<Mapped>,
    /// Sorted by start address; loaded now.
    pub modules: Vec<ModuleDesc>,
    /// Address ranges whose frames are ours or CUPTI's (skipped at the top).
    pub skip: Vec<Range<u64>>,
    /// `dlpi_adds + dlpi_subs` when the list was last read.
    pub loader_changes: u64,
    next_id: u32,
}

/// What `Registry::update` changed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Update {
    pub added: usize,
    pub removed: usize,
}

impl Registry {
    pub fn new() -> Registry {
        Registry {
            unwinder: UnwinderX86_64::new(),
            modules: Vec::new(),
            skip: Vec::new(),
            loader_changes: u64::MAX,
            next_id: 1,
        }
    }

    /// Makes the list the loader's `found` list: modules no longer loaded
    /// go (from the unwinder too), new ones come with fresh ids. `skip_self`:
    /// the collector's own module is one whose frames are skipped.
    pub fn update(
        &mut self,
        found: Vec<FoundModule>,
        loader_changes: u64,
        skip_self: bool,
    ) -> Update {
        self.loader_changes = loader_changes;
        let mut update = Update::default();
        let loaded = |k: &ModuleDesc| found.iter().any(|m| k.range == m.range && k.path == m.path);
        let (kept, gone): (Vec<ModuleDesc>, Vec<ModuleDesc>) = std::mem::take(&mut self.modules)
            .into_iter()
            .partition(loaded);
        for m in &gone {
            self.unwinder.remove_module(m.range.start);
            self.skip.retain(|r| *r != m.range);
            update.removed += 1;
        }
        self.modules = kept;
        let self_addr = self_marker as *const () as u64;
        for m in found {
            if self
                .modules
                .iter()
                .any(|k| k.range == m.range && k.path == m.path)
            {
                continue;
            }
            let is_ours =
                (skip_self && m.range.contains(&self_addr)) || m.path.contains("libcupti");
            if is_ours {
                self.skip.push(m.range.clone());
            }
            let id = self.next_id;
            self.next_id += 1;
            if let Some(info) = m.unwind_info {
                self.unwinder.add_module(Module::new(
                    m.path.clone(),
                    m.range.clone(),
                    m.bias,
                    info,
                ));
            }
            self.modules.push(ModuleDesc {
                id,
                path: m.path,
                bias: m.bias,
                range: m.range,
                build_id: m.build_id,
            });
            update.added += 1;
        }
        self.modules.sort_by_key(|m| m.range.start);
        update
    }

    pub fn find(&self, addr: u64) -> Option<&ModuleDesc> {
        find_module(&self.modules, addr)
    }
}

fn find_module(mods: &[ModuleDesc], addr: u64) -> Option<&ModuleDesc> {
    let i = mods.partition_point(|m| m.range.start <= addr);
    let m = mods.get(i.checked_sub(1)?)?;
    m.range.contains(&addr).then_some(m)
}

/// A function whose address tells which module is the collector.
#[inline(never)]
fn self_marker() {}

pub struct FoundModule {
    path: String,
    bias: u64,
    range: Range<u64>,
    build_id: Vec<u8>,
    unwind_info: Option<ExplicitModuleSectionInfo<Mapped>>,
}

/// Count of loader additions and removals so far (cheap: stops at the first
/// module).
pub fn loader_changes() -> u64 {
    unsafe extern "C" fn first(
        info: *mut libc::dl_phdr_info,
        _size: usize,
        data: *mut c_void,
    ) -> c_int {
        // SAFETY: the loader passes a valid info; data is our &mut u64.
        unsafe {
            let info = &*info;
            *(data as *mut u64) = info.dlpi_adds.wrapping_add(info.dlpi_subs);
        }
        1
    }
    let mut n = 0u64;
    // SAFETY: the callback matches dl_iterate_phdr's contract and only writes
    // through `data`, which points to n for the duration of the call.
    unsafe { libc::dl_iterate_phdr(Some(first), (&mut n as *mut u64).cast()) };
    n
}

pub fn list_modules() -> Vec<FoundModule> {
    unsafe extern "C" fn each(
        info: *mut libc::dl_phdr_info,
        _size: usize,
        data: *mut c_void,
    ) -> c_int {
        // SAFETY: the loader passes a valid info whose program headers stay
        // valid for this call; data is our &mut Vec.
        unsafe {
            let out = &mut *(data as *mut Vec<FoundModule>);
            if let Some(m) = describe(&*info) {
                out.push(m);
            }
        }
        0
    }
    let mut v: Vec<FoundModule> = Vec::new();
    // SAFETY: as in loader_changes.
    unsafe { libc::dl_iterate_phdr(Some(each), (&mut v as *mut Vec<FoundModule>).cast()) };
    v
}

/// The site-packages (or dist-packages) folders that loaded modules live
/// in: the program's Python environments, where pip's nvidia wheels put
/// libcupti. Empty for a program that is not Python.
pub fn site_packages() -> Vec<String> {
    unsafe extern "C" fn each(
        info: *mut libc::dl_phdr_info,
        _size: usize,
        data: *mut c_void,
    ) -> c_int {
        // SAFETY: the loader passes a valid info for this call (its name NULL
        // or NUL-terminated); data is our &mut Vec.
        unsafe {
            let dirs = &mut *(data as *mut Vec<String>);
            let name = (*info).dlpi_name;
            if name.is_null() {
                return 0;
            }
            let path = std::ffi::CStr::from_ptr(name).to_string_lossy();
            for marker in ["/site-packages/", "/dist-packages/"] {
                if let Some(at) = path.find(marker) {
                    let dir = path[..at + marker.len() - 1].to_string();
                    if !dirs.contains(&dir) {
                        dirs.push(dir);
                    }
                }
            }
        }
        0
    }
    let mut dirs: Vec<String> = Vec::new();
    // SAFETY: as in loader_changes.
    unsafe { libc::dl_iterate_phdr(Some(each), (&mut dirs as *mut Vec<String>).cast()) };
    dirs
}

/// A loaded module found by name.
pub struct Loaded {
    pub path: String,
    pub bias: u64,
    /// Addresses its loadable segments are mapped at.
    pub range: Range<u64>,
}

/// The addresses a module's loadable segments span (before its bias), or
/// None when it has none.
fn load_span(phdrs: &[libc::Elf64_Phdr]) -> Option<Range<u64>> {
    let loads = phdrs.iter().filter(|p| p.p_type == PT_LOAD);
    let lo = loads.clone().map(|p| p.p_vaddr).min()?;
    let hi = loads.map(|p| p.p_vaddr + p.p_memsz).max()?;
    (lo < hi).then_some(lo..hi)
}

/// The loaded module whose file name is `name`.
pub fn find_loaded(name: &str) -> Option<Loaded> {
    struct Search<'a> {
        name: &'a str,
        found: Option<Loaded>,
    }
    unsafe extern "C" fn each(
        info: *mut libc::dl_phdr_info,
        _size: usize,
        data: *mut c_void,
    ) -> c_int {
        // SAFETY: the loader passes a valid info whose program headers stay
        // valid for this call; data is our &mut Search.
        unsafe {
            let info = &*info;
            let search = &mut *(data as *mut Search);
            if info.dlpi_name.is_null() {
                return 0;
            }
            let path = CStr::from_ptr(info.dlpi_name).to_string_lossy();
            if path.rsplit('/').next() == Some(search.name) {
                let phdrs = std::slice::from_raw_parts(info.dlpi_phdr, info.dlpi_phnum as usize);
                let span = load_span(phdrs).unwrap_or(0..0);
                search.found = Some(Loaded {
                    path: path.into_owned(),
                    bias: info.dlpi_addr,
                    range: info.dlpi_addr + span.start..info.dlpi_addr + span.end,
                });
                return 1;
            }
        }
        0
    }
    let mut search = Search { name, found: None };
    // SAFETY: as in loader_changes.
    unsafe { libc::dl_iterate_phdr(Some(each), (&mut search as *mut Search).cast()) };
    search.found
}

/// # Safety
/// `info` must come from dl_iterate_phdr, during the callback.
unsafe fn describe(info: &libc::dl_phdr_info) -> Option<FoundModule> {
    let bias = info.dlpi_addr;
    // SAFETY: dlpi_phdr points to dlpi_phnum program headers.
    let phdrs = unsafe { std::slice::from_raw_parts(info.dlpi_phdr, info.dlpi_phnum as usize) };
    let Range { start: lo, end: hi } = load_span(phdrs)?;
    let mut text: Option<Range<u64>> = None;
    let mut loads: Vec<Range<u64>> = Vec::new();
    for p in phdrs.iter().filter(|p| p.p_type == PT_LOAD) {
        let r = p.p_vaddr..p.p_vaddr + p.p_filesz;
        if p.p_flags & PF_X != 0 && text.is_none() {
            text = Some(r.clone());
        }
        loads.push(r);
    }
    let name = if info.dlpi_name.is_null() {
        String::new()
    } else {
        // SAFETY: dlpi_name is NUL-terminated.
        unsafe { CStr::from_ptr(info.dlpi_name) }
            .to_string_lossy()
            .into_owned()
    };
    let path = if name.is_empty() {
        std::fs::read_link("/proc/self/exe")
            .map(|p| p.to_string_lossy().into_owned())
            .unwrap_or_default()
    } else {
        name
    };
    let mut build_id = Vec::new();
    let mut unwind_info = None;
    for p in phdrs {
        if p.p_type == PT_NOTE {
            // SAFETY: PT_NOTE lies inside a loaded segment (mapped).
            if let Some(id) = unsafe { elf::gnu_build_id(bias + p.p_vaddr, p.p_filesz, p.p_align) }
            {
                build_id = id;
            }
        }
        if p.p_type == PT_GNU_EH_FRAME {
            // SAFETY: PT_GNU_EH_FRAME lies inside a loaded segment.
            unwind_info =
                unsafe { elf::eh_frame_info(bias, p.p_vaddr, p.p_filesz, &loads, text.clone()) };
        }
    }
    Some(FoundModule {
        path,
        bias,
        range: bias + lo..bias + hi,
        build_id,
        unwind_info,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn found(path: &str, start: u64) -> FoundModule {
        FoundModule {
            path: path.into(),
            bias: start,
            range: start..start + 0x1000,
            build_id: Vec::new(),
            unwind_info: None,
        }
    }

    /// A module the loader no longer lists leaves the registry (and the
    /// skipped ranges); one loaded at its place later is a new module.
    #[test]
    fn unloaded_modules_are_dropped_and_new_ones_get_new_ids() {
        let mut r = Registry::new();
        let u = r.update(
            vec![
                found("/lib/a.so", 0x1000),
                found("/lib/libcupti.so.13", 0x5000),
            ],
            1,
            false,
        );
        assert_eq!(
            u,
            Update {
                added: 2,
                removed: 0
            }
        );
        assert_eq!(r.skip, vec![0x5000..0x6000]);
        let a = r.find(0x1800).map(|m| m.id);
        let u = r.update(vec![found("/lib/a.so", 0x1000)], 2, false);
        assert_eq!(
            u,
            Update {
                added: 0,
                removed: 1
            }
        );
        assert!(r.find(0x5800).is_none());
        assert!(r.skip.is_empty());
        assert_eq!(
            r.find(0x1800).map(|m| m.id),
            a,
            "kept modules keep their ids"
        );
        let u = r.update(
            vec![found("/lib/a.so", 0x1000), found("/lib/b.so", 0x5000)],
            3,
            false,
        );
        assert_eq!(
            u,
            Update {
                added: 1,
                removed: 0
            }
        );
        let b = r.find(0x5800).unwrap();
        assert_eq!(b.path, "/lib/b.so");
        assert!(b.id > a.unwrap());
        assert_eq!(r.loader_changes, 3);
    }
}
