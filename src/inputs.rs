//! Finding and loading trace files: every command that reads traces accepts
//! files and directories of per-process files alike, and PyTorch memory
//! snapshot pickles, read into a trace for the command's duration.

use std::io::{BufWriter, Read};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use anyhow::{bail, Context, Result};

/// Files given, with directories replaced by the `*.bin` files inside them
/// (sorted, so output does not depend on directory order).
pub fn expand(paths: &[PathBuf]) -> Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    for p in paths {
        let meta = std::fs::metadata(p).with_context(|| format!("cannot read {}", p.display()))?;
        if meta.is_dir() {
            let mut found: Vec<PathBuf> = std::fs::read_dir(p)
                .with_context(|| format!("cannot list {}", p.display()))?
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|f| f.extension().is_some_and(|x| x == "bin") && f.is_file())
                .collect();
            found.sort();
            if found.is_empty() {
                bail!("{} holds no trace files (*.bin)", p.display());
            }
            out.extend(found);
        } else if let Some(trace) = snapshot_as_trace(p)? {
            out.push(trace);
        } else {
            out.push(p.clone());
        }
    }
    Ok(out)
}

/// The folders of snapshots read into traces, removed as the command ends
/// (`remove_converted`).
static CONVERTED: Mutex<Vec<tempfile::TempDir>> = Mutex::new(Vec::new());

/// A PyTorch memory snapshot pickle (`torch.cuda.memory._dump_snapshot`)
/// read into a trace file named after it, in a folder of its own; `None`
/// for any other file.
fn snapshot_as_trace(path: &Path) -> Result<Option<PathBuf>> {
    let mut head = [0u8; 2];
    let n = std::fs::File::open(path)
        .and_then(|mut f| f.read(&mut head))
        .with_context(|| format!("cannot read {}", path.display()))?;
    if !gmem_prof_torch_snapshot::pickle::looks_like_pickle(&head[..n]) {
        return Ok(None);
    }
    let data = std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
    let dir = tempfile::Builder::new()
        .prefix("gmem-prof-snapshot-")
        .tempdir()
        .context("cannot make a temporary folder for the snapshot's trace")?;
    let stem = path
        .file_stem()
        .map_or("snapshot".into(), |s| s.to_string_lossy().into_owned());
    let trace = dir.path().join(format!("{stem}.bin"));
    let file = std::fs::File::create(&trace)
        .with_context(|| format!("cannot write {}", trace.display()))?;
    gmem_prof_torch_snapshot::to_trace(&data, &path.display().to_string(), BufWriter::new(file))
        .with_context(|| {
            format!(
                "cannot read {} as a PyTorch memory snapshot",
                path.display()
            )
        })?;
    CONVERTED
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .push(dir);
    Ok(Some(trace))
}

/// Removes the traces snapshots were read into.
pub fn remove_converted() {
    CONVERTED
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .clear();
}
