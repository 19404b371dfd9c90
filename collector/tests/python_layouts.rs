//! The collector reads CPython's frames at fixed offsets per minor version
//! (`python::LAYOUTS`). This compiles a small C program against each
//! installed interpreter's own headers (internal ones included) and checks
//! every offset against them. Interpreters whose headers are missing are
//! skipped, and a machine with none says so (the e2e tests still run the
//! interpreters themselves). Headers are looked for in /usr/include, under
//! pyenv, and under `$GMEM_PROF_TEST_PYTHONS/root/usr/include` (the
//! interpreters `.ci/pythons.sh` fetches).

use std::path::{Path, PathBuf};
use std::process::Command;

use gmem_prof_collector::python::{FrameChain, LAYOUTS};

const PROGRAM: &str = r#"
#define Py_BUILD_CORE 1
#include <Python.h>
#include <stddef.h>
#include <stdio.h>
#if PY_VERSION_HEX >= 0x030B0000
#include "internal/pycore_frame.h"
#include "internal/pycore_code.h"
#if PY_VERSION_HEX >= 0x030E0000
#include "internal/pycore_interpframe_structs.h"
#include "internal/pycore_stackref.h"
#endif
#else
#include "frameobject.h"
#endif
#define P(name, expr) printf("%s %zu\n", name, (size_t)(expr))
int main(void) {
    printf("minor %d\n", PY_MINOR_VERSION);
#if PY_VERSION_HEX >= 0x030D0000
    P("current", offsetof(PyThreadState, current_frame));
    P("previous", offsetof(_PyInterpreterFrame, previous));
    P("code", offsetof(_PyInterpreterFrame, f_executable));
    P("instr", offsetof(_PyInterpreterFrame, instr_ptr));
    P("entry", offsetof(_PyInterpreterFrame, owner));
#elif PY_VERSION_HEX >= 0x030B0000
    P("cframe", offsetof(PyThreadState, cframe));
    P("current", offsetof(_PyCFrame, current_frame));
    P("previous", offsetof(_PyInterpreterFrame, previous));
    P("code", offsetof(_PyInterpreterFrame, f_code));
    P("instr", offsetof(_PyInterpreterFrame, prev_instr));
#if PY_VERSION_HEX >= 0x030C0000
    P("entry", offsetof(_PyInterpreterFrame, owner));
#else
    P("entry", offsetof(_PyInterpreterFrame, is_entry));
#endif
#else
    P("frame", offsetof(PyThreadState, frame));
    P("previous", offsetof(PyFrameObject, f_back));
    P("code", offsetof(PyFrameObject, f_code));
    P("instr", offsetof(PyFrameObject, f_lasti));
#endif
#if PY_VERSION_HEX >= 0x030B0000
    P("code_start", offsetof(PyCodeObject, co_code_adaptive));
    P("co_name", offsetof(PyCodeObject, co_qualname));
#else
    P("co_name", offsetof(PyCodeObject, co_name));
#endif
    P("co_filename", offsetof(PyCodeObject, co_filename));
    P("co_firstlineno", offsetof(PyCodeObject, co_firstlineno));
    P("ascii_size", sizeof(PyASCIIObject));
    P("compact_size", sizeof(PyCompactUnicodeObject));
#if PY_VERSION_HEX >= 0x030E0000
    P("code_tag_bits", Py_TAG_BITS);
#else
    P("code_tag_bits", 0);
#endif
    return 0;
}
"#;

/// Include directories of the interpreters installed here, 3.10 to 3.15,
/// each with the root its `pyconfig.h` is found from (Debian's includes
/// `<x86_64-linux-gnu/python3.N/pyconfig.h>`).
fn include_dirs() -> Vec<(PathBuf, PathBuf)> {
    let mut out: Vec<(PathBuf, PathBuf)> = Vec::new();
    let home = std::env::var("HOME").unwrap_or_default();
    let mut roots = vec![PathBuf::from("/usr/include")];
    if let Ok(dirs) = std::fs::read_dir(format!("{home}/.pyenv/versions")) {
        let mut v: Vec<PathBuf> = dirs.flatten().map(|d| d.path().join("include")).collect();
        v.sort();
        roots.extend(v);
    }
    if let Some(fetched) = std::env::var_os("GMEM_PROF_TEST_PYTHONS") {
        roots.push(PathBuf::from(fetched).join("root/usr/include"));
    }
    for root in roots {
        for minor in 10..=15 {
            let dir = root.join(format!("python3.{minor}"));
            if dir.join("internal").is_dir()
                && !out
                    .iter()
                    .any(|(d, _)| d.ends_with(dir.file_name().unwrap()))
            {
                out.push((dir, root.clone()));
            }
        }
    }
    out
}

fn offsets(include: &Path, root: &Path, scratch: &Path) -> Option<Vec<(String, usize)>> {
    let src = scratch.join("layout.c");
    let exe = scratch.join("layout");
    std::fs::write(&src, PROGRAM).ok()?;
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let built = Command::new(cc)
        .arg(format!("-I{}", include.display()))
        .arg(format!("-I{}", root.display()))
        .arg(&src)
        .arg("-o")
        .arg(&exe)
        .output()
        .ok()?;
    if !built.status.success() {
        eprintln!(
            "{}: {}",
            include.display(),
            String::from_utf8_lossy(&built.stderr)
        );
        return None;
    }
    let out = Command::new(&exe).output().ok()?;
    Some(
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|l| {
                let (k, v) = l.split_once(' ')?;
                Some((k.to_string(), v.parse().ok()?))
            })
            .collect(),
    )
}

#[test]
fn layouts_match_the_installed_interpreters() {
    let scratch = std::env::temp_dir().join(format!("gmem-py-layouts-{}", std::process::id()));
    std::fs::create_dir_all(&scratch).unwrap();
    let mut checked = Vec::new();
    for (include, root) in include_dirs() {
        let Some(got) = offsets(&include, &root, &scratch) else {
            eprintln!(
                "skipped {}: could not build against its headers",
                include.display()
            );
            continue;
        };
        let get = |k: &str| got.iter().find(|(n, _)| n == k).map(|(_, v)| *v);
        let minor = get("minor").unwrap() as u32;
        let l = LAYOUTS
            .iter()
            .find(|l| l.minor == minor)
            .unwrap_or_else(|| panic!("no layout for 3.{minor}"));
        match l.frame_chain {
            FrameChain::FrameObject { frame } => assert_eq!(Some(frame), get("frame")),
            FrameChain::CFrame { cframe, current } => {
                assert_eq!(Some(cframe), get("cframe"));
                assert_eq!(Some(current), get("current"));
            }
            FrameChain::Direct { current } => assert_eq!(Some(current), get("current")),
        }
        assert_eq!(Some(l.previous), get("previous"), "3.{minor}");
        assert_eq!(Some(l.code), get("code"), "3.{minor}");
        assert_eq!(Some(l.instr), get("instr"), "3.{minor}");
        assert_eq!(l.entry, get("entry"), "3.{minor}");
        if minor >= 11 {
            assert_eq!(Some(l.code_start), get("code_start"), "3.{minor}");
        }
        assert_eq!(Some(l.co_filename), get("co_filename"), "3.{minor}");
        assert_eq!(Some(l.co_name), get("co_name"), "3.{minor}");
        assert_eq!(Some(l.co_firstlineno), get("co_firstlineno"), "3.{minor}");
        assert_eq!(Some(l.ascii_size), get("ascii_size"), "3.{minor}");
        assert_eq!(Some(l.compact_size), get("compact_size"), "3.{minor}");
        assert_eq!(Some(l.code_tag_bits), get("code_tag_bits"), "3.{minor}");
        checked.push(format!("3.{minor} ({})", include.display()));
    }
    let _ = std::fs::remove_dir_all(&scratch);
    if checked.is_empty() {
        eprintln!("no CPython 3.10-3.15 headers here (python3-dev or pyenv): no layout checked");
    } else {
        eprintln!("layouts checked against: {checked:?}");
    }
}
