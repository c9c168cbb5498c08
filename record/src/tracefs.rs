//! Tracefs, for tracepoint events: where it is (mounted if it is nowhere, as perf's
//! `tracefs__mount()` does), a tracepoint's id (`events/SYSTEM/NAME/id`, the attr's `config`),
//! and the tracing data of the recorded tracepoints: the files perf's `tracing_data_get()`
//! (`tools/perf/util/trace-event-info.c`) copies, read in its order (directory order, as its
//! `readdir` loops), laid out by [`tracing::Contents`].

use std::ffi::CString;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use perfpipe_stream::format::tracing;
use perfpipe_stream::Error;

use super::{perf_err, synthetic_events, sys};

/// Where tracefs is mounted today, then where debugfs shows it (older systems).
const PLACES: [&str; 2] = ["/sys/kernel/tracing", "/sys/kernel/debug/tracing"];

/// A mounted tracefs.
#[derive(Clone, Debug)]
pub struct Tracefs {
    root: PathBuf,
}

impl Tracefs {
    /// Finds tracefs, mounting it at `/sys/kernel/tracing` when it is nowhere.
    ///
    /// # Errors
    /// [`Error::Perf`] when it is not mounted and cannot be (not root, no tracefs in the kernel).
    pub fn find_or_mount() -> Result<Tracefs, Error> {
        if let Some(t) = Self::find() {
            return Ok(t);
        }
        let what = format!("tracefs on {} (tracepoint events need it)", PLACES[0]);
        mount_tracefs(PLACES[0]).map_err(|e| perf_err("mount", what.clone(), e))?;
        Self::find().ok_or_else(|| {
            perf_err(
                "mount",
                what,
                io::Error::new(io::ErrorKind::NotFound, "mounted, but it has no events/"),
            )
        })
    }

    fn find() -> Option<Tracefs> {
        PLACES
            .iter()
            .map(PathBuf::from)
            .find(|p| p.join("events").is_dir())
            .map(|root| Tracefs { root })
    }

    /// A tracefs at `root` (tests).
    #[cfg(test)]
    pub(crate) fn at(root: &Path) -> Tracefs {
        Tracefs {
            root: root.to_path_buf(),
        }
    }

    fn events(&self) -> PathBuf {
        self.root.join("events")
    }

    /// The id of tracepoint `system:name` (`events/SYSTEM/NAME/id`).
    ///
    /// # Errors
    /// [`Error::BadOption`] when there is no such tracepoint (or its id does not parse).
    pub fn id(&self, system: &str, name: &str) -> Result<u64, Error> {
        let path = self.events().join(system).join(name).join("id");
        let bad = |why: String| Error::BadOption {
            option: "-e",
            message: format!("`{system}:{name}`: {why}"),
        };
        let text = fs::read_to_string(&path).map_err(|e| match e.kind() {
            io::ErrorKind::NotFound => bad(format!(
                "no such tracepoint ({} is missing; `perf list tracepoint` lists them)",
                path.display()
            )),
            _ => bad(format!("{}: {e}", path.display())),
        })?;
        text.trim().parse().map_err(|_| {
            bad(format!(
                "{} holds {:?}, not an id",
                path.display(),
                text.trim()
            ))
        })
    }

    /// The tracing-data blob of the tracepoints `events` (`(system, name)`), as perf writes it
    /// for them; not padded.
    ///
    /// # Errors
    /// [`Error::Io`] when `events/header_page`, `events/header_event` or a directory of
    /// `events/` cannot be read.
    pub fn tracing_data(&self, events: &[(String, String)]) -> Result<Vec<u8>, Error> {
        let dir = self.events();
        let read = |p: PathBuf| {
            read_all(&p).map_err(|source| Error::Io {
                op: "read",
                path: p,
                source,
            })
        };
        // Missing optional files are written empty, as perf does when it cannot stat them.
        let optional = |p: PathBuf| read_all(&p).unwrap_or_default();
        let header_page = read(dir.join("header_page"))?;
        let header_event = read(dir.join("header_event"))?;
        // perf matches the event directories by name only, whatever their system
        // (`name_in_tp_list()`), and the systems by name.
        let names: Vec<&str> = events.iter().map(|(_, n)| n.as_str()).collect();
        let formats = |system: &Path| -> Result<Vec<Vec<u8>>, Error> {
            Ok(subdirs(system)?
                .into_iter()
                .filter(|n| names.contains(&n.as_str()))
                .filter_map(|n| read_all(&system.join(n).join("format")).ok())
                .collect())
        };
        let ftrace = if dir.join("ftrace").is_dir() {
            formats(&dir.join("ftrace"))?
        } else {
            Vec::new()
        };
        let mut systems = Vec::new();
        for s in subdirs(&dir)? {
            if s != "ftrace" && events.iter().any(|(sys, _)| *sys == s) {
                let f = formats(&dir.join(&s))?;
                systems.push((s, f));
            }
        }
        let printk = optional(self.root.join("printk_formats"));
        let saved_cmdlines = optional(self.root.join("saved_cmdlines"));
        let contents = tracing::Contents {
            endian: synthetic_events::endian(),
            long_size: std::mem::size_of::<libc::c_long>() as u8,
            page_size: sys::page_size() as u32,
            header_page: &header_page,
            header_event: &header_event,
            ftrace: ftrace.iter().map(Vec::as_slice).collect(),
            systems: systems
                .iter()
                .map(|(s, f)| (s.as_str(), f.iter().map(Vec::as_slice).collect()))
                .collect(),
            kallsyms: b"",
            printk: &printk,
            saved_cmdlines: &saved_cmdlines,
        };
        Ok(contents.to_bytes())
    }
}

/// The whole of a tracefs file, read in large chunks: tracefs reports size 0, and a read of less
/// than the whole of `events/header_page` gets its first chunk and then the end of the file
/// (Linux 6.18: 32 bytes of 205 with `std::fs::read`'s first small read). perf reads `BUFSIZ`.
fn read_all(path: &Path) -> io::Result<Vec<u8>> {
    use std::io::Read;
    let mut f = fs::File::open(path)?;
    let mut out = Vec::new();
    let mut buf = vec![0u8; 64 << 10];
    loop {
        match f.read(&mut buf) {
            Ok(0) => return Ok(out),
            Ok(n) => out.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
}

/// The names of the directories in `dir`, in directory order.
fn subdirs(dir: &Path) -> Result<Vec<String>, Error> {
    let io = |source| Error::Io {
        op: "read directory",
        path: dir.to_path_buf(),
        source,
    };
    let mut out = Vec::new();
    for entry in fs::read_dir(dir).map_err(io)? {
        let entry = entry.map_err(io)?;
        if entry.file_type().is_ok_and(|t| t.is_dir()) {
            out.extend(entry.file_name().to_str().map(str::to_string));
        }
    }
    Ok(out)
}

/// `mount -t tracefs nodev AT`.
fn mount_tracefs(at: &str) -> io::Result<()> {
    let target = CString::new(at).map_err(io::Error::other)?;
    // SAFETY: three valid NUL-terminated strings and no data, for the duration of the call.
    let r = unsafe {
        libc::mount(
            c"nodev".as_ptr(),
            target.as_ptr(),
            c"tracefs".as_ptr(),
            0,
            std::ptr::null(),
        )
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fake tracefs: two systems, an event of the same name in both, printk formats.
    #[test]
    fn tracing_data_holds_the_named_events_in_directory_order() {
        let root = std::env::temp_dir().join(format!("perfpipe-tracefs-{}", std::process::id()));
        let ev = root.join("events");
        let fmt = |sys: &str, name: &str, id: u32| {
            let d = ev.join(sys).join(name);
            fs::create_dir_all(&d).unwrap();
            let text = format!(
                "name: {name}\nID: {id}\nformat:\n\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n\nprint fmt: \"x\"\n"
            );
            fs::write(d.join("format"), text).unwrap();
            fs::write(d.join("id"), format!("{id}\n")).unwrap();
        };
        fmt("sched", "sched_switch", 372);
        fmt("sched", "sched_wakeup", 373);
        fmt("irq", "irq_handler_entry", 50);
        fs::write(ev.join("header_page"), "page").unwrap();
        fs::write(ev.join("header_event"), "event").unwrap();
        fs::write(root.join("printk_formats"), "0x1 : \"p\"\n").unwrap();
        let t = Tracefs::at(&root);
        assert_eq!(t.id("sched", "sched_wakeup").unwrap(), 373);
        let err = t.id("sched", "nope").unwrap_err().to_string();
        assert!(
            err.contains("sched:nope") && err.contains("no such tracepoint"),
            "{err}"
        );

        let want = [("sched".to_string(), "sched_switch".to_string())];
        let blob = t.tracing_data(&want).unwrap();
        let parsed = tracing::TracingData::parse(&blob);
        assert!(parsed.errors.is_empty(), "{:?}", parsed.errors);
        let names: Vec<_> = parsed
            .events
            .iter()
            .map(|e| (&*e.system, &*e.name))
            .collect();
        assert_eq!(names, [("sched", "sched_switch")]);
        assert_eq!(parsed.event(372).unwrap().name, "sched_switch");
        assert!(blob.windows(10).any(|w| w == b"0x1 : \"p\"\n"));
        // A tracefs without its header files: an error that names the file, no blob.
        fs::remove_file(ev.join("header_page")).unwrap();
        let err = t.tracing_data(&want).unwrap_err().to_string();
        assert!(err.contains("events/header_page"), "{err}");
        fs::remove_dir_all(&root).unwrap();
    }
}
