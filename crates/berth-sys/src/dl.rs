//! dlopen for the libraries berth loads at run time (liblxc, libcurl): the binary runs where
//! they are missing, and says why it cannot use them in the loader's own words.

use std::ffi::{c_void, CStr};

/// A library loaded for the life of the process (never closed).
#[derive(Clone, Copy)]
pub struct Library(*mut c_void);

/// The first of `names` that loads, or the loader's words for the first name (a missing
/// file, a missing dependency, a wrong architecture, "Dynamic loading not supported" in a
/// static musl build): later names (a development link) are only further tries.
pub fn open(names: &[&CStr]) -> Result<Library, String> {
    let mut first_error: Option<String> = None;
    for name in names {
        // SAFETY: dlopen with a NUL-terminated name; the libraries' constructors are safe
        // to run.
        let handle = unsafe { libc::dlopen(name.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
        if !handle.is_null() {
            return Ok(Library(handle));
        }
        // SAFETY: dlerror returns a thread-local, NUL-terminated message or NULL; it is read
        // right after the failed dlopen, on the same thread.
        let e = unsafe { libc::dlerror() };
        if first_error.is_none() && !e.is_null() {
            // SAFETY: non-null and NUL-terminated (see above); copied at once.
            first_error = Some(unsafe { CStr::from_ptr(e) }.to_string_lossy().into_owned());
        }
    }
    Err(first_error.unwrap_or_else(|| "the loader gave no reason".to_string()))
}

impl Library {
    /// The address of `name`, or "`lib` lacks NAME".
    pub fn sym(self, name: &CStr, lib: &str) -> Result<*mut c_void, String> {
        // SAFETY: a live dlopen handle (never closed); `name` is NUL-terminated.
        let p = unsafe { libc::dlsym(self.0, name.as_ptr()) };
        if p.is_null() {
            Err(format!("{lib} lacks {}", name.to_string_lossy()))
        } else {
            Ok(p)
        }
    }
}
