//! Finding and loading trace files: every command that reads traces accepts
//! files and directories of per-process files alike.

use std::path::PathBuf;

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
        } else {
            out.push(p.clone());
        }
    }
    Ok(out)
}
