//! A layer's tar stream applied beneath the staging root, as the OCI image specification
//! defines it: whiteouts (`.wh.NAME`) and opaque directories (`.wh..wh..opq`) hide what the
//! layers below put there, never what their own layer adds; an entry replaces what was at
//! its path, and a directory onto a directory merges.
//!
//! Each layer is unpacked into a scratch tree of its own first; its whiteouts then act on the
//! root; then the scratch tree is moved in. Every path is resolved beneath its tree without
//! following a link (`berth_sys::tree`): an entry, a whiteout or a hard link whose path runs
//! through a link (made by this layer or a lower one) is refused, naming the entry and the
//! link. A hard link may only name an entry the image made. Device nodes and fifos are left
//! out, setuid and setgid bits dropped, with a warning naming the entry, as `berth pack`
//! warns about them. Names must be UTF-8.

use std::collections::HashSet;
use std::ffi::{OsStr, OsString};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Component, Path, PathBuf};

use berth_sys::tree::{self, shown, Dir, Kind};

use crate::{refused, ImageError, Limits, Result, MAX_PATH_BYTES, MAX_PATH_DEPTH};

const WHITEOUT: &[u8] = b".wh.";
const OPAQUE: &[u8] = b".wh..wh..opq";
/// AUFS's own files (`.wh..wh.plnk`, `.wh..wh.aufs`): not part of the image.
const AUFS_META: &[u8] = b".wh..wh.";

/// Applies layers, in order, beneath `root`, counting against one set of limits.
pub struct Unpacker<'a> {
    root: &'a Dir,
    /// Where each layer's scratch tree is made: on the root's file system, outside it.
    work: &'a Dir,
    limits: Limits,
    bytes: u64,
    entries: u64,
    /// Layers applied so far (scratch trees are named by it).
    layers: usize,
    /// Owners are kept only as root; an unprivileged import makes everything the
    /// importer's, which `berth pack` then records as root's.
    as_root: bool,
    /// What was left out or changed, one line per entry.
    pub warnings: Vec<String>,
}

/// A path inside the image: relative, `.` and a leading `/` dropped; None where it would
/// leave the image (`..`).
pub fn clean(p: &Path) -> Option<PathBuf> {
    let mut out = PathBuf::new();
    for c in p.components() {
        match c {
            Component::Normal(x) => out.push(x),
            Component::CurDir | Component::RootDir => {}
            Component::ParentDir | Component::Prefix(_) => return None,
        }
    }
    Some(out)
}

/// An entry's path from the tar header: UTF-8, inside the image, within the caps.
fn entry_path(raw: &[u8]) -> Result<PathBuf> {
    // Shown from the image's root, as the names of the other messages are.
    let lossy = || {
        let rest = raw.strip_prefix(b"/").unwrap_or(raw);
        shown(Path::new(OsStr::from_bytes(rest)))
    };
    if std::str::from_utf8(raw).is_err() {
        return refused(format!(
            "{}: the name is not UTF-8 (berth keeps package names readable)",
            lossy()
        ));
    }
    if raw.first() == Some(&b'/') {
        return refused(format!(
            "{}: an absolute name (a layer's names are relative to the image's root)",
            lossy()
        ));
    }
    if raw.len() > MAX_PATH_BYTES {
        return refused(format!(
            "{}…: a path of {} bytes, more than {MAX_PATH_BYTES}",
            lossy().chars().take(64).collect::<String>(),
            raw.len()
        ));
    }
    let rel = clean(Path::new(OsStr::from_bytes(raw)))
        .ok_or_else(|| ImageError::Refused(format!("{}: leaves the image (..)", lossy())))?;
    let depth = rel.components().count();
    if depth > MAX_PATH_DEPTH {
        return refused(format!(
            "{}: nests {depth} levels deep, more than {MAX_PATH_DEPTH}",
            lossy()
        ));
    }
    Ok(rel)
}

/// Counts what the layer's decompressed stream gives; past `left` the read fails, and
/// `tripped` says why.
struct Capped<R> {
    inner: R,
    left: u64,
    tripped: std::rc::Rc<std::cell::Cell<bool>>,
}

impl<R: Read> Read for Capped<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.left == 0 {
            self.tripped.set(true);
            return Err(io::Error::other(
                "the layer's stream is larger than the limits allow",
            ));
        }
        let want = buf.len().min(self.left.min(usize::MAX as u64) as usize);
        let n = self.inner.read(&mut buf[..want])?;
        self.left -= n as u64;
        Ok(n)
    }
}

/// The largest tar header extension read (a GNU long name or link, a PAX header): the tar
/// reader holds one whole in memory before its name is even looked at.
pub const MAX_EXTENSION: u64 = 64 << 10;

/// A tar stream passed on as it is, its headers looked at on the way: an extension (GNU `L`,
/// `K`, PAX `x`, `g`) larger than [`MAX_EXTENSION`] stops it (the tar reader would buffer it
/// whole: a 2 GiB "name" is a memory bomb, not a name). It follows the stream block by block:
/// each header, GNU sparse headers' extension blocks, a PAX `size` for the entry after it.
pub struct TarGuard<R> {
    inner: R,
    /// Bytes of the current member's data (and padding) still to pass.
    data: u64,
    /// Header bytes gathered so far (a header is read whole before it is judged).
    head: Vec<u8>,
    /// More GNU sparse extension blocks follow the header.
    sparse_ext: bool,
    /// A PAX header's data, read to find a `size` for the next entry.
    pax: Option<Vec<u8>>,
    next_size: Option<u64>,
    /// Two zero blocks seen: the rest is passed as it is.
    ended: bool,
    zero_blocks: u8,
    /// Bytes read but not yet given out.
    out: Vec<u8>,
    out_pos: usize,
}

impl<R: Read> TarGuard<R> {
    pub fn new(inner: R) -> TarGuard<R> {
        TarGuard {
            inner,
            data: 0,
            head: Vec::with_capacity(512),
            sparse_ext: false,
            pax: None,
            next_size: None,
            ended: false,
            zero_blocks: 0,
            out: Vec::new(),
            out_pos: 0,
        }
    }

    /// A header's numeric field: octal, or GNU's base-256 (high bit of the first byte).
    fn number(field: &[u8]) -> Option<u64> {
        if field.first().is_some_and(|b| b & 0x80 != 0) {
            let mut v: u64 = 0;
            for (i, b) in field.iter().enumerate() {
                let b = if i == 0 { b & 0x7f } else { *b };
                v = v.checked_mul(256)?.checked_add(u64::from(b))?;
            }
            return Some(v);
        }
        let s = std::str::from_utf8(field).ok()?;
        let s = s.trim_matches(|c: char| c == '\0' || c == ' ');
        if s.is_empty() {
            return Some(0);
        }
        u64::from_str_radix(s, 8).ok()
    }

    /// Judges one whole header block.
    fn header(&mut self, h: &[u8]) -> io::Result<()> {
        if self.sparse_ext {
            // GNU sparse extension block: 21 entries, then its own "more follow" flag.
            self.sparse_ext = h[504] != 0;
            return Ok(());
        }
        if h.iter().all(|b| *b == 0) {
            self.zero_blocks += 1;
            self.ended = self.zero_blocks >= 2;
            return Ok(());
        }
        self.zero_blocks = 0;
        let kind = h[156];
        let stated =
            Self::number(&h[124..136]).ok_or_else(|| bad("a tar header with a bad size"))?;
        let size = match kind {
            b'x' | b'g' | b'L' | b'K' => {
                if stated > MAX_EXTENSION {
                    return Err(bad(&format!(
                        "a tar header extension ({}) of {stated} bytes, more than {MAX_EXTENSION}",
                        kind as char
                    )));
                }
                if kind == b'x' {
                    self.pax = Some(Vec::with_capacity(stated as usize));
                }
                stated
            }
            // Links, directories, devices and fifos carry no data, whatever a header says;
            // the tar reader skips what it says all the same.
            _ => self.next_size.take().unwrap_or(stated),
        };
        if kind == b'S' {
            self.sparse_ext = h[482] != 0;
        }
        self.data = size.div_ceil(512).saturating_mul(512);
        Ok(())
    }

    /// After a PAX header's data: a `size` it gives is the next entry's.
    fn pax_done(&mut self, data: &[u8]) {
        for rec in data.split(|b| *b == b'\n') {
            let Ok(rec) = std::str::from_utf8(rec) else {
                continue;
            };
            if let Some(v) = rec
                .split_once(' ')
                .and_then(|(_, kv)| kv.strip_prefix("size="))
            {
                self.next_size = v.parse().ok();
            }
        }
    }
}

fn bad(m: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, m.to_string())
}

impl<R: Read> Read for TarGuard<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.out_pos < self.out.len() {
            let n = buf.len().min(self.out.len() - self.out_pos);
            buf[..n].copy_from_slice(&self.out[self.out_pos..self.out_pos + n]);
            self.out_pos += n;
            return Ok(n);
        }
        if self.ended {
            return self.inner.read(buf);
        }
        if self.data > 0 {
            // Member data: passed on (a PAX header's kept to be read).
            let want = buf.len().min(self.data.min(usize::MAX as u64) as usize);
            let n = self.inner.read(&mut buf[..want])?;
            if n == 0 {
                return Ok(0);
            }
            self.data -= n as u64;
            if let Some(p) = self.pax.as_mut() {
                p.extend_from_slice(&buf[..n]);
                if self.data == 0 {
                    let p = self.pax.take().unwrap_or_default();
                    self.pax_done(&p);
                }
            }
            return Ok(n);
        }
        // A header block: read whole, judged, then given out.
        self.head.clear();
        self.head.resize(512, 0);
        let mut got = 0;
        while got < 512 {
            let n = self.inner.read(&mut self.head[got..])?;
            if n == 0 {
                break;
            }
            got += n;
        }
        if got < 512 {
            // A cut stream: the tar reader says so.
            self.head.truncate(got);
            self.ended = true;
        } else {
            let h = std::mem::take(&mut self.head);
            self.header(&h)?;
            self.head = h;
        }
        self.out = std::mem::take(&mut self.head);
        self.out_pos = 0;
        self.read(buf)
    }
}

/// What a whiteout hides: the directory it is in, and the name (None: all of it, opaque).
struct Whiteout {
    dir: PathBuf,
    name: Option<OsString>,
    entry: PathBuf,
}

impl<'a> Unpacker<'a> {
    pub fn new(root: &'a Dir, work: &'a Dir, limits: Limits) -> Unpacker<'a> {
        Unpacker {
            root,
            work,
            limits,
            bytes: 0,
            entries: 0,
            layers: 0,
            as_root: berth_sys::process::is_root(),
            warnings: Vec::new(),
        }
    }

    /// Applies one layer's (decompressed) tar stream.
    pub fn apply(&mut self, stream: impl Read) -> Result<()> {
        let name = OsString::from(format!("layer{}", self.layers));
        self.layers += 1;
        let _ = self.work.remove_all(&name);
        self.work
            .mkdir(&name, 0o700)
            .map_err(|e| ImageError::io("cannot make a staging directory", e))?;
        let scratch = self
            .work
            .subdir(&name)
            .map_err(|e| ImageError::io("cannot open a staging directory", e))?;
        let r = self.apply_in(&scratch, stream);
        let _ = self.work.remove_all(&name);
        r
    }

    fn apply_in(&mut self, scratch: &Dir, stream: impl Read) -> Result<()> {
        // The stream may hold the file data allowed, and headers for every entry allowed.
        let left = self
            .limits
            .max_bytes
            .saturating_sub(self.bytes)
            .saturating_add(self.limits.max_entries.saturating_mul(2048));
        let tripped = std::rc::Rc::new(std::cell::Cell::new(false));
        let capped = Capped {
            inner: stream,
            left,
            tripped: tripped.clone(),
        };
        let mut ar = tar::Archive::new(TarGuard::new(capped));
        let mut implicit: HashSet<PathBuf> = HashSet::new();
        let mut whiteouts = Vec::new();
        let max_bytes = self.limits.max_bytes;
        let stream_err = |e: io::Error, tripped: bool| {
            if tripped {
                ImageError::Refused(format!(
                    "its stream unpacks to more than {max_bytes} bytes (a decompression \
                     bomb?); raise the limit with --max-size"
                ))
            } else {
                ImageError::Refused(format!("not a valid tar stream: {e}"))
            }
        };
        let entries = ar.entries().map_err(|e| stream_err(e, tripped.get()))?;
        for e in entries {
            let mut e = e.map_err(|e| stream_err(e, tripped.get()))?;
            self.entry(scratch, &mut e, &mut implicit, &mut whiteouts)
                .map_err(|err| match err {
                    ImageError::Io { err, .. } if tripped.get() => stream_err(err, true),
                    other => other,
                })?;
        }
        for w in &whiteouts {
            self.whiteout(w)?;
        }
        self.merge(scratch, &implicit)
    }

    fn count(&mut self, rel: &Path) -> Result<()> {
        self.entries += 1;
        if self.entries > self.limits.max_entries {
            return refused(format!(
                "{}: more than {} entries in the image; raise the limit with --max-entries",
                shown(rel),
                self.limits.max_entries
            ));
        }
        Ok(())
    }

    fn entry<R: Read>(
        &mut self,
        scratch: &Dir,
        e: &mut tar::Entry<'_, R>,
        implicit: &mut HashSet<PathBuf>,
        whiteouts: &mut Vec<Whiteout>,
    ) -> Result<()> {
        let raw = e.path_bytes().into_owned();
        let rel = entry_path(&raw)?;
        let kind = e.header().entry_type();
        if kind.is_pax_global_extensions() {
            return Ok(());
        }
        if rel.as_os_str().is_empty() {
            // The image's root directory itself.
            return Ok(());
        }
        self.count(&rel)?;
        let at = shown(&rel);
        let base = rel.file_name().unwrap_or_default().as_bytes();
        if base.starts_with(WHITEOUT) {
            let dir = rel.parent().map(Path::to_path_buf).unwrap_or_default();
            if base == OPAQUE {
                whiteouts.push(Whiteout {
                    dir,
                    name: None,
                    entry: rel.clone(),
                });
            } else if base.starts_with(AUFS_META) {
                // Not part of the image.
            } else {
                let hidden = &base[WHITEOUT.len()..];
                if hidden.is_empty() {
                    return refused(format!("{at}: a whiteout without a name"));
                }
                whiteouts.push(Whiteout {
                    dir,
                    name: Some(OsStr::from_bytes(hidden).to_os_string()),
                    entry: rel.clone(),
                });
            }
            return Ok(());
        }
        use tar::EntryType as T;
        let file = match kind {
            T::Block | T::Char => {
                self.warnings.push(format!(
                    "{at}: a device node, left out (packages are mounted nodev)"
                ));
                return Ok(());
            }
            T::Fifo => {
                self.warnings.push(format!(
                    "{at}: a fifo, left out (create it at run time under /run)"
                ));
                return Ok(());
            }
            T::Regular | T::Continuous | T::GNUSparse => true,
            T::Directory | T::Symlink | T::Link => false,
            other => {
                self.warnings.push(format!(
                    "{at}: an entry of tar type {:?}, left out",
                    other.as_byte() as char
                ));
                return Ok(());
            }
        };
        let (parent_rel, name) = tree::split(&rel).map_err(|err| ImageError::io(&at, err))?;
        let mut made = Vec::new();
        let parent = scratch
            .make_dirs(&parent_rel, 0o755, &mut |p| made.push(p.to_path_buf()))
            .map_err(|err| ImageError::io(&at, err))?;
        // A directory only implied by an entry's path is an entry all the same: counted (a
        // few entries nesting 128 levels each would make millions of directories).
        for p in made {
            self.count(&p)?;
            implicit.insert(p);
        }
        let mode = e.header().mode().unwrap_or(0o644) & 0o7777;
        let owner = self.owner(e);
        if kind == T::Directory {
            implicit.remove(&rel);
            return self.directory(&parent, &name, &at, mode, owner);
        }
        // Whatever an earlier entry of this layer put here goes.
        parent
            .remove_all(&name)
            .map_err(|err| ImageError::io(&at, err))?;
        if file {
            return self.regular(&parent, &name, &at, mode, owner, e);
        }
        if kind == T::Symlink {
            let target = e
                .link_name_bytes()
                .ok_or_else(|| {
                    ImageError::Refused(format!("{at}: a symbolic link without a target"))
                })?
                .into_owned();
            let target = PathBuf::from(OsString::from_vec(target));
            parent
                .symlink(&target, &name)
                .map_err(|err| ImageError::io(&at, err))?;
            if let Some((u, g)) = owner {
                parent
                    .chown(&name, u, g)
                    .map_err(|err| ImageError::io(&at, err))?;
            }
            return Ok(());
        }
        self.hard_link(scratch, &parent, &name, &at, e)
    }

    fn owner<R: Read>(&self, e: &tar::Entry<'_, R>) -> Option<(u32, u32)> {
        if !self.as_root {
            return None;
        }
        let h = e.header();
        Some((
            h.uid().unwrap_or(0).min(u32::MAX as u64) as u32,
            h.gid().unwrap_or(0).min(u32::MAX as u64) as u32,
        ))
    }

    /// setuid and setgid dropped from files (setgid kept on directories: it only sets the
    /// group of new files), with a warning.
    fn strip(&mut self, at: &str, mode: u32, dir: bool) -> u32 {
        let cleared = mode & if dir { 0o4000 } else { 0o6000 };
        if cleared != 0 {
            self.warnings.push(format!(
                "{at}: setuid/setgid bit removed (packages are mounted nosuid)"
            ));
        }
        mode & !cleared
    }

    fn directory(
        &mut self,
        parent: &Dir,
        name: &OsStr,
        at: &str,
        mode: u32,
        owner: Option<(u32, u32)>,
    ) -> Result<()> {
        let io = |err| ImageError::io(at, err);
        match parent.stat(name).map_err(io)? {
            Some(s) if s.kind == Kind::Dir => {}
            Some(_) => {
                parent.remove_all(name).map_err(io)?;
                parent.mkdir(name, 0o700).map_err(io)?;
            }
            None => parent.mkdir(name, 0o700).map_err(io)?,
        }
        let mut mode = self.strip(at, mode, true);
        if !self.as_root {
            // An unprivileged importer must still be able to fill it.
            mode |= 0o700;
        }
        let d = parent.subdir(name).map_err(io)?;
        d.set_attrs(mode, owner, None).map_err(io)
    }

    fn regular<R: Read>(
        &mut self,
        parent: &Dir,
        name: &OsStr,
        at: &str,
        mode: u32,
        owner: Option<(u32, u32)>,
        e: &mut tar::Entry<'_, R>,
    ) -> Result<()> {
        let size = e.size();
        let left = self.limits.max_bytes.saturating_sub(self.bytes);
        if size > left {
            return refused(format!(
                "{at}: {size} bytes, more than the {} the image may unpack to (a huge sparse \
                 file?); raise the limit with --max-size",
                self.limits.max_bytes
            ));
        }
        let io = |err| ImageError::io(at, err);
        let mut f = parent.create_file(name, 0o600).map_err(io)?;
        // Runs of zeros become holes: a sparse file stays sparse in the staging tree.
        let mut buf = vec![0u8; 64 * 1024];
        let mut written = 0u64;
        loop {
            let n = e.read(&mut buf).map_err(io)?;
            if n == 0 {
                break;
            }
            written += n as u64;
            if written > size {
                return refused(format!("{at}: more data than its header says"));
            }
            if buf[..n].iter().all(|b| *b == 0) {
                f.seek(SeekFrom::Current(n as i64)).map_err(io)?;
            } else {
                f.write_all(&buf[..n]).map_err(io)?;
            }
        }
        f.set_len(written).map_err(io)?;
        self.bytes += written;
        let mode = self.strip(at, mode, false);
        tree::set_file_attrs(&f, mode, owner, None).map_err(io)
    }

    /// A hard link: to an entry this layer made (in `scratch`), else one of the layers
    /// below (in the root); never through a link, never to a directory.
    fn hard_link<R: Read>(
        &mut self,
        scratch: &Dir,
        parent: &Dir,
        name: &OsStr,
        at: &str,
        e: &tar::Entry<'_, R>,
    ) -> Result<()> {
        let target = e
            .link_name_bytes()
            .ok_or_else(|| ImageError::Refused(format!("{at}: a hard link without a target")))?
            .into_owned();
        let target = entry_path(&target)
            .map_err(|err| ImageError::Refused(format!("{at}: a hard link to {err}")))?;
        let to = shown(&target);
        let io = |err| ImageError::io(format!("{at}: a hard link to {to}"), err);
        let (tparent, tname) = tree::split(&target).map_err(io)?;
        for tree in [scratch, self.root] {
            match tree.stat_beneath(&target).map_err(io)? {
                Some(s) if s.kind == Kind::Dir => {
                    return refused(format!("{at}: a hard link to {to}, a directory"))
                }
                Some(_) => {
                    let d = tree.open_dir(&tparent).map_err(io)?;
                    return d.hard_link(&tname, parent, name).map_err(io);
                }
                None => {}
            }
        }
        refused(format!(
            "{at}: a hard link to {to}, which the image does not hold"
        ))
    }

    /// Hides what the layers below put at a whiteout's path.
    fn whiteout(&self, w: &Whiteout) -> Result<()> {
        let at = shown(&w.entry);
        let io = |err| ImageError::io(&at, err);
        let dir = match self.root.open_dir(&w.dir) {
            Ok(d) => d,
            // Nothing below to hide.
            Err(err) if err.kind() == io::ErrorKind::NotFound => return Ok(()),
            // The opaque directory itself a link or a file below: the layer's own
            // directory replaces it when the layer moves in.
            Err(err)
                if w.name.is_none()
                    && tree::is_refusal(&err)
                    && self
                        .root
                        .stat_beneath(&w.dir)
                        .ok()
                        .flatten()
                        .is_some_and(|s| s.kind != Kind::Dir) =>
            {
                return Ok(())
            }
            Err(err) => return Err(io(err)),
        };
        match &w.name {
            Some(n) => dir.remove_all(n).map_err(io),
            None => {
                for n in dir.names().map_err(io)? {
                    dir.remove_all(&n).map_err(io)?;
                }
                Ok(())
            }
        }
    }

    /// Moves the layer's scratch tree into the root: a directory onto a directory merges
    /// (taking the new one's mode and owner, unless the layer only made it to hold its
    /// entries), anything else replaces what was there. A directory the layer did not make
    /// itself, onto a link of a lower layer, would write through that link: refused.
    fn merge(&self, scratch: &Dir, implicit: &HashSet<PathBuf>) -> Result<()> {
        let mut todo: Vec<PathBuf> = vec![PathBuf::new()];
        while let Some(rel) = todo.pop() {
            let io = |err| ImageError::io(shown(&rel), err);
            let from = scratch.open_dir(&rel).map_err(io)?;
            let to = self.root.open_dir(&rel).map_err(io)?;
            for n in from.names().map_err(io)? {
                let r = rel.join(&n);
                let io = |err| ImageError::io(shown(&r), err);
                let src = from.stat(&n).map_err(io)?.map(|s| s.kind);
                let dst = to.stat(&n).map_err(io)?.map(|s| s.kind);
                match (src, dst) {
                    (Some(Kind::Dir), Some(Kind::Dir)) => {
                        if !implicit.contains(&r) {
                            let s = from.subdir(&n).map_err(io)?.stat_self().map_err(io)?;
                            let owner = self.as_root.then_some((s.uid, s.gid));
                            to.subdir(&n)
                                .and_then(|d| d.set_attrs(s.mode, owner, None))
                                .map_err(io)?;
                        }
                        todo.push(r);
                    }
                    (Some(Kind::Dir), Some(Kind::Symlink)) if implicit.contains(&r) => {
                        let link = to.read_link(&n).map_err(io)?;
                        let below = from
                            .subdir(&n)
                            .and_then(|d| d.entries())
                            .ok()
                            .and_then(|mut l| l.next())
                            .and_then(|e| e.ok())
                            .map(|(name, _)| shown(&r.join(name)))
                            .unwrap_or_else(|| shown(&r));
                        return refused(format!(
                            "{below}: {} is a symbolic link of a lower layer (to {}), which \
                             is not followed: rebuild the layer with the link's real path",
                            shown(&r),
                            link.display()
                        ));
                    }
                    (Some(_), Some(_)) => {
                        to.remove_all(&n).map_err(io)?;
                        from.rename(&n, &to, &n).map_err(io)?;
                    }
                    (Some(_), None) => from.rename(&n, &to, &n).map_err(io)?,
                    (None, _) => {}
                }
            }
        }
        Ok(())
    }
}
