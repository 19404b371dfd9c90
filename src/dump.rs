//! `gmem-prof dump`: one line per record, in file order. The format's
//! debugging view and the snapshot format of the compatibility tests.

use std::fmt::Write as _;
use std::io::{BufWriter, Write};

use anyhow::{bail, Result};
use gmem_prof_traces::record::{memory_kind, AllocatorAction, Frame};
use gmem_prof_traces::{decode_chunk, Record, TraceReader};

use crate::cli::DumpArgs;

pub fn run(a: DumpArgs) -> Result<()> {
    let files = crate::inputs::expand(&a.traces)?;
    let stdout = std::io::stdout();
    let mut out = BufWriter::new(stdout.lock());
    let mut failures = 0;
    for (i, path) in files.iter().enumerate() {
        let data = crate::merge::map(path)?;
        let mut reader = match TraceReader::new(&data) {
            Ok(r) => r,
            Err(e) => {
                eprintln!("gmem-prof: {}: {e}", path.display());
                failures += 1;
                continue;
            }
        };
        if files.len() > 1 && !a.json {
            writeln!(out, "# file {i}: {}", path.display())?;
        }
        let mut line = String::new();
        while let Some(raw) = reader.next_chunk() {
            let (chunk, err) = match decode_chunk(&raw) {
                Ok(c) => (c, None),
                Err((c, why)) => (c, Some(why)),
            };
            for r in &chunk.records {
                if matches!(r, Record::Trailer(_)) {
                    reader.mark_trailer_seen();
                }
                line.clear();
                if a.json {
                    let mut v = serde_json::to_value(r)?;
                    if let Some(o) = v.as_object_mut() {
                        // Not "stream" and "file": records have fields of
                        // those names (a CUDA stream, a Python file) that
                        // these must not replace.
                        o.insert("trace_stream".into(), chunk.stream.into());
                        if files.len() > 1 {
                            o.insert("trace_file".into(), i.into());
                        }
                        if let Record::Api(call) = r {
                            o.insert("func_name".into(), call.func.name().unwrap_or("").into());
                        }
                    }
                    line = v.to_string();
                } else {
                    text_line(&mut line, chunk.stream, r);
                }
                writeln!(out, "{line}")?;
            }
            if let Some(why) = err {
                eprintln!(
                    "gmem-prof: warning: {}: chunk at byte {}: {why}",
                    path.display(),
                    raw.offset
                );
            }
        }
        for w in &reader.warnings {
            eprintln!("gmem-prof: warning: {}: {w}", path.display());
        }
    }
    out.flush()?;
    if failures == files.len() {
        bail!("no readable trace");
    }
    Ok(())
}

fn hex(v: u64) -> String {
    format!("{v:#x}")
}

/// Quotes a string for the text dump so control characters and spaces in
/// names cannot break the one-record-per-line format.
fn q(s: &str) -> String {
    format!("{s:?}")
}

#[expect(
    clippy::too_many_lines,
    reason = "one line format per record kind, as FORMAT.md lists them"
)]
fn text_line(l: &mut String, stream: u32, r: &Record) {
    let _ = write!(l, "s{stream} ");
    let _ = match r {
        Record::Process(p) => write!(
            l,
            "process pid={} ppid={} start={} host={} exe={} cmdline={} collector={} cupti_api={} cupti={} driver={} kernels={} stacks={} cupti_device_buffers={} collector_tids={:?}",
            p.pid, p.ppid, p.start.0, q(&p.hostname), q(&p.exe), q(&p.cmdline.join(" ")),
            p.collector_version, p.cupti_api_version, q(&p.cupti_path), q(&p.driver_version),
            match (p.kernels_traced, p.kernels_timed) {
                (false, _) => "off",
                (true, false) => "launches",
                (true, true) => "timed",
            },
            p.stacks_captured, p.cupti_device_buffer_bytes.0, p.collector_tids
        ),
        Record::Device(d) => write!(
            l,
            "device id={} name={} memory={} cc={}.{} sms={} uuid={}",
            d.device, q(&d.name), d.total_memory.0, d.compute_major, d.compute_minor,
            d.multiprocessors, d.uuid.iter().map(|b| format!("{b:02x}")).collect::<String>()
        ),
        Record::String(s) => write!(l, "string id={} text={}", s.id.0, q(&s.text)),
        Record::Module(m) => write!(
            l,
            "module id={} path={} bias={} range={}-{} build_id={}",
            m.id, q(&m.path), hex(m.bias), hex(m.start), hex(m.end),
            m.build_id.iter().map(|b| format!("{b:02x}")).collect::<String>()
        ),
        Record::Stack(s) => {
            let frames: Vec<String> = s
                .frames
                .iter()
                .map(|f| match f {
                    Frame::Native(a) => hex(*a),
                    Frame::Python { code, line } => format!("py:{}:{line}", code.0),
                })
                .collect();
            write!(l, "stack id={} truncated={} frames=[{}]", s.id.0, s.truncated, frames.join(" "))
        }
        Record::Api(a) => write!(
            l,
            "api t={} dur={} tid={} {} corr={} result={} bytes={} addr={} handle={} stream={} stack={}{}",
            a.time.0, a.duration.0, a.tid,
            a.func.name().map(str::to_string).unwrap_or_else(|| format!("func{}", a.func.0)),
            a.correlation, a.result, a.bytes.0, hex(a.address), hex(a.handle), hex(a.stream),
            a.stack.0, if a.internal { " internal" } else { "" }
        ),
        Record::Memory(m) => {
            let _ = write!(
                l,
                "memory t={} {} kind={} addr={} bytes={} dev={} ctx={} stream={} corr={} pc={}{}",
                m.time.0, if m.alloc { "alloc" } else { "free" }, memory_kind::name(m.kind),
                hex(m.address), m.bytes.0, m.device, m.context, m.stream, m.correlation, hex(m.pc),
                if m.is_async { " async" } else { "" }
            );
            if m.pool_type != 0 {
                let _ = write!(
                    l,
                    " pool_type={} pool={} pool_size={} pool_utilized={} release_threshold={}",
                    m.pool_type, hex(m.pool_address), m.pool_size, m.pool_utilized, m.pool_release_threshold
                );
            }
            Ok(())
        }
        Record::Pool(p) => write!(
            l,
            "pool t={} op={} type={} addr={} size={} utilized={} release_threshold={} min_keep={} dev={} corr={}",
            p.time.0,
            match p.op { 1 => "created", 2 => "destroyed", 3 => "trimmed", _ => "unknown" },
            p.pool_type, hex(p.address), p.size.0, p.utilized.0, p.release_threshold,
            p.min_bytes_to_keep, p.device, p.correlation
        ),
        Record::Kernel(k) => write!(
            l,
            "kernel start={} end={} name={} dev={} ctx={} stream={} corr={} grid={:?} block={:?} smem={}+{} regs={}",
            k.start.0, k.end.0, k.name.0, k.device, k.context, k.stream, k.correlation, k.grid,
            k.block, k.static_shared, k.dynamic_shared, k.registers
        ),
        Record::KernelLaunch(k) => write!(
            l,
            "kernel_launch t={} tid={} name={} dev={} ctx={} stream={} corr={} grid={:?} block={:?} smem={}",
            k.time.0, k.tid, k.name.0, k.device, k.context, k.stream, k.correlation, k.grid,
            k.block, k.dynamic_shared
        ),
        Record::Dropped(d) => write!(l, "dropped t={} cupti={} collector={}", d.time.0, d.cupti, d.collector),
        Record::CallDevice(c) => write!(l, "call_device t={} tid={} dev={}", c.time.0, c.tid, c.device),
        Record::PoolUsage(u) => write!(
            l,
            "pool_usage t={} dev={} framework={} reason={} in_use={} peak_in_use={} pool={} limit={}",
            u.time.0, u.device, u.framework, u.reason, u.in_use.0, u.peak_in_use.0, u.pool.0, u.limit.0
        ),
        Record::DeviceMemory(m) => write!(
            l,
            "device_memory t={} dev={} reason={} total={} used={} free={} reserved={} processes={}",
            m.time.0,
            m.device,
            m.reason,
            m.total.0,
            m.used.0,
            m.free.0,
            m.reserved.0,
            m.processes
                .iter()
                .map(|p| format!("{}:{}", p.pid, p.used.0))
                .collect::<Vec<_>>()
                .join(",")
        ),
        Record::Message(m) => write!(
            l,
            "message t={} {} {}",
            m.time.0,
            match m.level { 0 => "info", 1 => "warning", _ => "error" },
            q(&m.text)
        ),
        Record::ProcessEnd(p) => write!(l, "process_end t={}", p.time.0),
        Record::Symbol(s) => {
            let frames: Vec<String> = s
                .frames
                .iter()
                .map(|f| format!("{} {}:{}", q(&f.function), q(&f.file), f.line))
                .collect();
            write!(
                l,
                "symbol addr={} module={} offset={} frames=[{}]",
                hex(s.address), s.module, hex(s.module_offset), frames.join(", ")
            )
        }
        Record::Trailer(t) => write!(l, "trailer chunks={} records={}", t.chunks, t.records),
        Record::PyCode(c) => write!(
            l,
            "pycode id={} function={} file={} first_line={}",
            c.id.0, q(&c.function), q(&c.file), c.first_line
        ),
        Record::AllocatorEvent(a) => {
            let _ = write!(
                l,
                "allocator_event t={} allocator={} {} dev={} addr={} bytes={} stream={} pool={} tid={} stack={}",
                a.time.0, a.allocator, a.action.name(), a.device, hex(a.address), a.bytes.0,
                hex(a.stream), a.pool, a.tid, a.stack.0
            );
            if a.action == AllocatorAction::OOM || a.action == AllocatorAction::OOM_REPORT {
                let _ = write!(l, " device_free={} limit={}", a.device_free, a.limit);
            }
            Ok(())
        }
        Record::Allocator(a) => write!(
            l,
            "allocator t={} allocator={} attached={} library={} settings={} detail={}",
            a.time.0, a.allocator, a.attached, q(&a.library), q(&a.settings), q(&a.detail)
        ),
        Record::Unknown { tag, len } => write!(l, "unknown tag={tag} len={len}"),
    };
}
