//! tracefs, and the kernel's event format files: each field's offset, size
//! and signedness, read from `events/<system>/<event>/format`.

use super::*;

/// The `events` directory of tracefs. Mounts tracefs at /sys/kernel/tracing
/// when it is absent and this process is root ([`crate::kvm::mounts`]: by mount(2);
/// it stays mounted).
pub fn events_dir() -> Result<PathBuf> {
    for p in ["/sys/kernel/tracing/events", "/sys/kernel/debug/tracing/events"] {
        if Path::new(p).join("sched").is_dir() {
            return Ok(PathBuf::from(p));
        }
    }
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Err(Error::TraceUnavailable(
            "tracefs is not mounted at /sys/kernel/tracing and this process is not root to mount it \
             (mount -t tracefs nodev /sys/kernel/tracing)"
                .into(),
        ));
    }
    if let Err(e) = crate::kvm::mounts::ensure_mounted(crate::kvm::mounts::PseudoFs::Tracefs) {
        return Err(Error::TraceUnavailable(format!("tracefs is not mounted and mounting it failed: {e}")));
    }
    let p = PathBuf::from("/sys/kernel/tracing/events");
    if p.join("sched").is_dir() {
        Ok(p)
    } else {
        Err(Error::TraceUnavailable("tracefs mounted, but it has no sched events (kernel without tracepoints)".into()))
    }
}

/// Host CPUs online now (`/sys/devices/system/cpu/online`, e.g. "0-3,6").
pub fn online_cpus() -> Vec<usize> {
    let s = std::fs::read_to_string("/sys/devices/system/cpu/online").unwrap_or_default();
    let mut out = Vec::new();
    for part in s.trim().split(',').filter(|p| !p.is_empty()) {
        let mut it = part.splitn(2, '-');
        let a = it.next().and_then(|x| x.trim().parse::<usize>().ok());
        let b = it.next().and_then(|x| x.trim().parse::<usize>().ok());
        match (a, b) {
            (Some(a), Some(b)) if b >= a => out.extend(a..=b),
            (Some(a), None) => out.push(a),
            _ => {}
        }
    }
    out
}

// ------------------------------------------------------------ format files

/// One field of a tracepoint's record, as its format file describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Field {
    pub name: String,
    pub offset: usize,
    pub size: usize,
    pub signed: bool,
}

/// A tracepoint's format file: its id, fields and print format.
#[derive(Debug, Clone)]
pub struct EventFormat {
    pub name: String,
    pub id: u64,
    pub fields: Vec<Field>,
    pub print_fmt: String,
}

impl EventFormat {
    /// Parses the text of `events/<system>/<event>/format`.
    pub fn parse(text: &str) -> Result<Self> {
        let bad = |what: &str| Error::InvalidArgument(format!("tracepoint format file: {what}"));
        let mut name = None;
        let mut id = None;
        let mut fields = Vec::new();
        let mut print_fmt = String::new();
        for line in text.lines() {
            let l = line.trim();
            if let Some(v) = l.strip_prefix("name:") {
                name = Some(v.trim().to_string());
            } else if let Some(v) = l.strip_prefix("ID:") {
                id = Some(v.trim().parse::<u64>().map_err(|_| bad("bad ID"))?);
            } else if let Some(v) = l.strip_prefix("print fmt:") {
                print_fmt = v.trim().to_string();
            } else if l.starts_with("field:") {
                // field:TYPE NAME[N];	offset:O;	size:S;	signed:G;
                let mut decl = None;
                let (mut off, mut size, mut signed) = (None, None, None);
                for part in l.split(';').map(str::trim).filter(|p| !p.is_empty()) {
                    if let Some(d) = part.strip_prefix("field:") {
                        decl = Some(d.trim());
                    } else if let Some(v) = part.strip_prefix("offset:") {
                        off = v.parse::<usize>().ok();
                    } else if let Some(v) = part.strip_prefix("size:") {
                        size = v.parse::<usize>().ok();
                    } else if let Some(v) = part.strip_prefix("signed:") {
                        signed = v.parse::<u8>().ok().map(|s| s != 0);
                    }
                }
                let decl = decl.ok_or_else(|| bad("field without a declaration"))?;
                // the name is the last word, without an array suffix
                let last = decl.rsplit(|c: char| c.is_whitespace() || c == '*').next().unwrap_or(decl);
                let fname = last.split('[').next().unwrap_or(last).to_string();
                match (off, size, signed) {
                    (Some(offset), Some(size), Some(signed)) => {
                        fields.push(Field { name: fname, offset, size, signed })
                    }
                    _ => return Err(bad(&format!("field {fname} lacks offset, size or signed"))),
                }
            }
        }
        Ok(EventFormat {
            name: name.ok_or_else(|| bad("no name"))?,
            id: id.ok_or_else(|| bad("no ID"))?,
            fields,
            print_fmt,
        })
    }

    /// Reads `<events>/<system>/<event>/format`.
    pub fn load(events: &Path, system: &str, event: &str) -> Result<Self> {
        let p = events.join(system).join(event).join("format");
        let text = std::fs::read_to_string(&p)
            .map_err(|e| Error::TraceUnavailable(format!("tracepoint {system}:{event} ({}): {e}", p.display())))?;
        Self::parse(&text)
    }

    /// The field `name`, or an error naming the event (its format changed).
    pub fn field(&self, name: &str) -> Result<Field> {
        self.fields
            .iter()
            .find(|f| f.name == name)
            .cloned()
            .ok_or_else(|| Error::Unsupported(format!("tracepoint {} has no field {name} on this kernel", self.name)))
    }

    /// The `__print_symbolic(ARG, { value, "name" }, …)` tables of the print
    /// format, as (ARG, [(value, name)]), in order.
    pub fn symbol_tables(&self) -> Vec<(String, Vec<(i64, String)>)> {
        let mut out = Vec::new();
        let s = self.print_fmt.as_str();
        let mut rest = s;
        while let Some(i) = rest.find("__print_symbolic(") {
            rest = &rest[i + "__print_symbolic(".len()..];
            let Some(brace) = rest.find('{') else { break };
            let arg = rest[..brace].trim().trim_end_matches(',').trim().to_string();
            let mut entries = Vec::new();
            let mut cur = &rest[brace..];
            loop {
                cur = cur.trim_start_matches(|c: char| c.is_whitespace() || c == ',');
                if !cur.starts_with('{') {
                    break;
                }
                let Some(end) = cur.find('}') else { break };
                let inner = &cur[1..end];
                if let Some((expr, names)) = inner.split_once(',') {
                    // adjacent string literals concatenate ("KVM_EXIT_" "IO")
                    let name: String = names.split('"').skip(1).step_by(2).collect();
                    if let Some(v) = eval_sum(expr) {
                        entries.push((v, name));
                    }
                }
                cur = &cur[end + 1..];
            }
            rest = cur;
            out.push((arg, entries));
        }
        out
    }
}

/// Evaluates `0x040 + 13`, `-1`, `12`: a sum of decimal / hex integers.
pub(super) fn eval_sum(expr: &str) -> Option<i64> {
    let mut total: i64 = 0;
    for term in expr.split('+') {
        let t = term.trim();
        let (neg, t) = match t.strip_prefix('-') {
            Some(r) => (true, r.trim()),
            None => (false, t),
        };
        let v = if let Some(h) = t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
            i64::from_str_radix(h, 16).ok()?
        } else {
            t.parse::<i64>().ok()?
        };
        total = total.checked_add(if neg { -v } else { v })?;
    }
    Some(total)
}

/// Reads field `f` of a raw record as an integer (sign-extended when the
/// format says signed); None when the record is too short.
pub(super) fn read_int(raw: &[u8], f: &Field) -> Option<i64> {
    let b = raw.get(f.offset..f.offset.checked_add(f.size)?)?;
    Some(match (f.size, f.signed) {
        (1, false) => b[0] as i64,
        (1, true) => b[0] as i8 as i64,
        (2, false) => u16::from_ne_bytes(b.try_into().ok()?) as i64,
        (2, true) => i16::from_ne_bytes(b.try_into().ok()?) as i64,
        (4, false) => u32::from_ne_bytes(b.try_into().ok()?) as i64,
        (4, true) => i32::from_ne_bytes(b.try_into().ok()?) as i64,
        (8, _) => i64::from_ne_bytes(b.try_into().ok()?),
        _ => return None,
    })
}

/// A task name (`char[16]` of the format), NUL-padded.
pub type Comm = [u8; 16];

pub(super) fn read_comm(raw: &[u8], f: &Field) -> Option<Comm> {
    let b = raw.get(f.offset..f.offset.checked_add(f.size)?)?;
    let mut c = [0u8; 16];
    let n = b.len().min(16);
    c[..n].copy_from_slice(&b[..n]);
    Some(c)
}

/// The text of a comm (up to its first NUL, lossy UTF-8).
pub fn comm_str(c: &Comm) -> String {
    let n = c.iter().position(|&b| b == 0).unwrap_or(c.len());
    String::from_utf8_lossy(&c[..n]).into_owned()
}
