//! A small FFI to libcurl's easy interface, loaded with dlopen at run time as liblxc is, and
//! a safe [`Easy`] handle.
//!
//! Every http:// and https:// transfer of berth goes through it; a device whose repository is
//! `file://` never loads libcurl. Only the stable `curl_easy_*` functions are used, with option
//! and info numbers from `curl/curl.h` (they never change between versions), so any libcurl
//! from 7.55 on works: Debian's libcurl4 (OpenSSL or GnuTLS), OpenWrt's libcurl (mbedTLS,
//! wolfSSL or OpenSSL), Yocto's curl.
//!
//! `curl_easy_setopt` and `curl_easy_getinfo` are C-variadic: they are called through
//! variadic function pointers, with exactly the argument type libcurl reads for each kind of
//! option (`long`, a pointer, a function pointer, a 64-bit `curl_off_t`); the four typed
//! setters below check that the option number is of their kind.

use std::ffi::{c_char, c_int, c_long, c_uint, c_void, CStr, CString};
use std::path::Path;
use std::ptr::NonNull;
use std::time::Duration;

/// libcurl's result codes berth tells apart (`CURLE_*`).
pub mod code {
    pub const OK: i32 = 0;
    pub const UNSUPPORTED_PROTOCOL: i32 = 1;
    pub const URL_MALFORMAT: i32 = 3;
    pub const NOT_BUILT_IN: i32 = 4;
    pub const COULDNT_RESOLVE_PROXY: i32 = 5;
    pub const COULDNT_RESOLVE_HOST: i32 = 6;
    pub const COULDNT_CONNECT: i32 = 7;
    pub const WEIRD_SERVER_REPLY: i32 = 8;
    pub const OUT_OF_MEMORY: i32 = 27;
    pub const PARTIAL_FILE: i32 = 18;
    pub const WRITE_ERROR: i32 = 23;
    pub const OPERATION_TIMEDOUT: i32 = 28;
    pub const SSL_CONNECT_ERROR: i32 = 35;
    pub const ABORTED_BY_CALLBACK: i32 = 42;
    pub const BAD_FUNCTION_ARGUMENT: i32 = 43;
    pub const UNKNOWN_OPTION: i32 = 48;
    pub const GOT_NOTHING: i32 = 52;
    pub const SEND_ERROR: i32 = 55;
    pub const RECV_ERROR: i32 = 56;
    pub const SSL_CERTPROBLEM: i32 = 58;
    pub const SSL_CIPHER: i32 = 59;
    pub const PEER_FAILED_VERIFICATION: i32 = 60;
    pub const BAD_CONTENT_ENCODING: i32 = 61;
    pub const FILESIZE_EXCEEDED: i32 = 63;
    pub const SSL_CACERT_BADFILE: i32 = 77;
    pub const SSL_SHUTDOWN_FAILED: i32 = 80;
    pub const SSL_CRL_BADFILE: i32 = 82;
    pub const SSL_ISSUER_ERROR: i32 = 83;
    pub const SSL_PINNEDPUBKEYNOTMATCH: i32 = 90;
    pub const SSL_INVALIDCERTSTATUS: i32 = 91;
    pub const PROXY: i32 = 97;
    pub const SSL_CLIENTCERT: i32 = 98;

    /// The codes that mean the TLS session failed (a certificate, a key, the handshake).
    pub fn is_tls(code: i32) -> bool {
        matches!(
            code,
            SSL_CONNECT_ERROR
                | SSL_CERTPROBLEM
                | SSL_CIPHER
                | PEER_FAILED_VERIFICATION
                | SSL_CACERT_BADFILE
                | SSL_SHUTDOWN_FAILED
                | SSL_CRL_BADFILE
                | SSL_ISSUER_ERROR
                | SSL_PINNEDPUBKEYNOTMATCH
                | SSL_INVALIDCERTSTATUS
                | SSL_CLIENTCERT
        )
    }
}

// Option kinds (`CURLOPTTYPE_*`): the number's ten-thousands digit.
const LONG: c_int = 0;
const POINT: c_int = 10000;
const FUNC: c_int = 20000;
const OFF: c_int = 30000;

// CURLOPT_*: kind + number, from curl.h.
const OPT_WRITEDATA: c_int = POINT + 1;
const OPT_URL: c_int = POINT + 2;
const OPT_PROXY: c_int = POINT + 4;
const OPT_RANGE: c_int = POINT + 7;
const OPT_ERRORBUFFER: c_int = POINT + 10;
const OPT_WRITEFUNCTION: c_int = FUNC + 11;
const OPT_POSTFIELDS: c_int = POINT + 15;
const OPT_USERAGENT: c_int = POINT + 18;
const OPT_LOW_SPEED_LIMIT: c_int = LONG + 19;
const OPT_LOW_SPEED_TIME: c_int = LONG + 20;
const OPT_HTTPHEADER: c_int = POINT + 23;
const OPT_SSLCERT: c_int = POINT + 25;
const OPT_HEADERDATA: c_int = POINT + 29;
const OPT_CUSTOMREQUEST: c_int = POINT + 36;
const OPT_NOPROGRESS: c_int = LONG + 43;
const OPT_POST: c_int = LONG + 47;
const OPT_FOLLOWLOCATION: c_int = LONG + 52;
const OPT_XFERINFODATA: c_int = POINT + 57;
const OPT_SSL_VERIFYPEER: c_int = LONG + 64;
const OPT_CAINFO: c_int = POINT + 65;
const OPT_HEADERFUNCTION: c_int = FUNC + 79;
const OPT_SSL_VERIFYHOST: c_int = LONG + 81;
const OPT_HTTP_VERSION: c_int = LONG + 84;
const OPT_SSLKEY: c_int = POINT + 87;
const OPT_CAPATH: c_int = POINT + 97;
const OPT_NOSIGNAL: c_int = LONG + 99;
const OPT_POSTFIELDSIZE_LARGE: c_int = OFF + 120;
const OPT_TIMEOUT_MS: c_int = LONG + 155;
const OPT_CONNECTTIMEOUT_MS: c_int = LONG + 156;
const OPT_NOPROXY: c_int = POINT + 177;
const OPT_PROTOCOLS: c_int = LONG + 181;
const OPT_XFERINFOFUNCTION: c_int = FUNC + 219;
const OPT_SUPPRESS_CONNECT_HEADERS: c_int = LONG + 265;
const OPT_PROTOCOLS_STR: c_int = POINT + 318;

// CURLINFO_*: type base + number.
const INFO_STRING: c_int = 0x100000;
const INFO_LONG: c_int = 0x200000;
const INFO_OFF: c_int = 0x600000;
const INFO_RESPONSE_CODE: c_int = INFO_LONG + 2;
const INFO_HEADER_SIZE: c_int = INFO_LONG + 11;
const INFO_REQUEST_SIZE: c_int = INFO_LONG + 12;
const INFO_OS_ERRNO: c_int = INFO_LONG + 25;
const INFO_NUM_CONNECTS: c_int = INFO_LONG + 26;
const INFO_REDIRECT_URL: c_int = INFO_STRING + 31;
const INFO_PRIMARY_IP: c_int = INFO_STRING + 32;
const INFO_SIZE_UPLOAD_T: c_int = INFO_OFF + 7;
const INFO_SIZE_DOWNLOAD_T: c_int = INFO_OFF + 8;

const CURL_ERROR_SIZE: usize = 256;
const GLOBAL_DEFAULT: c_long = 3;
const HTTP_VERSION_1_1: c_long = 2;
const PROTO_HTTP_HTTPS: c_long = 1 | 2;
/// The first version with `CURLOPT_PROTOCOLS_STR` (7.85.0); the older numeric option is
/// deprecated from there on.
const PROTOCOLS_STR_SINCE: c_uint = 0x075500;
/// The oldest libcurl berth uses: `CURLOPT_SUPPRESS_CONNECT_HEADERS` came in 7.54.0, the
/// 64-bit byte counts (`CURLINFO_SIZE_DOWNLOAD_T`) in 7.55.0.
const OLDEST: c_uint = 0x073700;

// curl_version_info_data's feature bits.
const FEATURE_IPV6: c_int = 1 << 0;
const FEATURE_SSL: c_int = 1 << 2;
const FEATURE_ASYNCHDNS: c_int = 1 << 7;
const FEATURE_HTTPS_PROXY: c_int = 1 << 21;
const FEATURE_THREADSAFE: c_int = 1 << 30;

/// The members of `curl_version_info_data` there since its first version.
#[repr(C)]
struct VersionInfo {
    age: c_int,
    version: *const c_char,
    version_num: c_uint,
    host: *const c_char,
    features: c_int,
    ssl_version: *const c_char,
    ssl_version_num: c_long,
    libz_version: *const c_char,
    protocols: *const *const c_char,
}

type GlobalInit = unsafe extern "C" fn(c_long) -> c_int;
type EasyInit = unsafe extern "C" fn() -> *mut c_void;
type EasyHandleFn = unsafe extern "C" fn(*mut c_void);
type Setopt = unsafe extern "C" fn(*mut c_void, c_int, ...) -> c_int;
type Perform = unsafe extern "C" fn(*mut c_void) -> c_int;
type Getinfo = unsafe extern "C" fn(*mut c_void, c_int, ...) -> c_int;
type Strerror = unsafe extern "C" fn(c_int) -> *const c_char;
type SlistAppend = unsafe extern "C" fn(*mut c_void, *const c_char) -> *mut c_void;
type SlistFree = unsafe extern "C" fn(*mut c_void);
type VersionInfoFn = unsafe extern "C" fn(c_int) -> *const VersionInfo;
type Sym = *mut c_void;

type DataFn = extern "C" fn(*mut c_char, usize, usize, *mut c_void) -> usize;
type XferFn = extern "C" fn(*mut c_void, i64, i64, i64, i64) -> c_int;

/// libcurl's entry points, resolved once. The handle is never closed.
struct Lib {
    easy_init: EasyInit,
    easy_cleanup: EasyHandleFn,
    easy_reset: EasyHandleFn,
    setopt: Setopt,
    perform: Perform,
    getinfo: Getinfo,
    strerror: Strerror,
    slist_append: SlistAppend,
    slist_free_all: SlistFree,
    info: Version,
}

static LIB: std::sync::OnceLock<Result<Lib, String>> = std::sync::OnceLock::new();

fn lib() -> Result<&'static Lib, String> {
    LIB.get_or_init(load).as_ref().map_err(Clone::clone)
}

/// What the loaded libcurl is and can do (`berth check`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Version {
    /// "7.88.1".
    pub version: String,
    /// `0xXXYYZZ`.
    pub number: u32,
    /// The TLS library ("OpenSSL/3.0.11", "mbedTLS/2.28.7"); None: no TLS, no https://.
    pub tls: Option<String>,
    /// The protocols it speaks, lowercase.
    pub protocols: Vec<String>,
    pub ipv6: bool,
    /// Name lookups in a thread of their own, bounded by the transfer's timeouts.
    pub async_dns: bool,
    pub https_proxy: bool,
    /// `curl_global_init` may run beside other threads (7.84 and later).
    pub threadsafe: bool,
}

impl Version {
    pub fn speaks(&self, protocol: &str) -> bool {
        self.protocols.iter().any(|p| p == protocol)
    }
}

fn load() -> Result<Lib, String> {
    // libcurl.so.4 is the soname of every libcurl since 7.16; Debian's GnuTLS flavour has
    // its own name; libcurl.so (a development link) is the last try.
    let lib = crate::dl::open(&[c"libcurl.so.4", c"libcurl-gnutls.so.4", c"libcurl.so"]).map_err(
        |msg| {
            format!(
                "cannot load libcurl.so.4: {msg} (http:// and https:// need libcurl: Debian \
                 libcurl4, OpenWrt libcurl, Yocto curl; file:// repositories do not)"
            )
        },
    )?;
    let sym = |name: &CStr| lib.sym(name, "libcurl");
    // SAFETY: each symbol is the libcurl function of that name, whose C signature (curl.h,
    // easy.h) is the one of the type it is transmuted into (also below, where the two
    // variadic ones are transmuted into variadic types).
    let (global_init, version_info) = unsafe {
        (
            std::mem::transmute::<Sym, GlobalInit>(sym(c"curl_global_init")?),
            std::mem::transmute::<Sym, VersionInfoFn>(sym(c"curl_version_info")?),
        )
    };
    // SAFETY: called once, inside the OnceLock, before any handle exists.
    let rc = unsafe { global_init(GLOBAL_DEFAULT) };
    if rc != code::OK {
        return Err(format!("libcurl's curl_global_init failed (code {rc})"));
    }
    // SAFETY: CURLVERSION_FIRST (0) asks for the struct's oldest layout, whose members are
    // all declared in VersionInfo; libcurl returns a pointer to static data.
    let info = unsafe { version_info(0).as_ref() }.ok_or("libcurl gave no version")?;
    let text = |p: *const c_char| {
        // SAFETY: libcurl's static strings are NUL-terminated or NULL.
        (!p.is_null()).then(|| unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned())
    };
    let mut protocols = Vec::new();
    let mut p = info.protocols;
    // SAFETY: `protocols` is a NULL-terminated array of static strings.
    while !p.is_null() && !unsafe { *p }.is_null() {
        // SAFETY: the element just checked, a static string.
        let name = unsafe { *p };
        protocols.extend(text(name).map(|s| s.to_ascii_lowercase()));
        // SAFETY: not yet at the terminating NULL, so the next element exists.
        p = unsafe { p.add(1) };
    }
    let has = |bit: c_int| info.features & bit != 0;
    let version = Version {
        version: text(info.version).unwrap_or_default(),
        number: info.version_num,
        tls: text(info.ssl_version).filter(|s| !s.is_empty() && has(FEATURE_SSL)),
        protocols,
        ipv6: has(FEATURE_IPV6),
        async_dns: has(FEATURE_ASYNCHDNS),
        https_proxy: has(FEATURE_HTTPS_PROXY),
        threadsafe: has(FEATURE_THREADSAFE),
    };
    if version.number < OLDEST {
        return Err(format!(
            "libcurl {} is too old: berth needs 7.55.0 or later",
            version.version
        ));
    }
    // SAFETY: as above.
    unsafe {
        Ok(Lib {
            easy_init: std::mem::transmute::<Sym, EasyInit>(sym(c"curl_easy_init")?),
            easy_cleanup: std::mem::transmute::<Sym, EasyHandleFn>(sym(c"curl_easy_cleanup")?),
            easy_reset: std::mem::transmute::<Sym, EasyHandleFn>(sym(c"curl_easy_reset")?),
            setopt: std::mem::transmute::<Sym, Setopt>(sym(c"curl_easy_setopt")?),
            perform: std::mem::transmute::<Sym, Perform>(sym(c"curl_easy_perform")?),
            getinfo: std::mem::transmute::<Sym, Getinfo>(sym(c"curl_easy_getinfo")?),
            strerror: std::mem::transmute::<Sym, Strerror>(sym(c"curl_easy_strerror")?),
            slist_append: std::mem::transmute::<Sym, SlistAppend>(sym(c"curl_slist_append")?),
            slist_free_all: std::mem::transmute::<Sym, SlistFree>(sym(c"curl_slist_free_all")?),
            info: version,
        })
    }
}

/// The loaded libcurl, or why it cannot be loaded (the loader's own words).
pub fn version() -> Result<Version, String> {
    lib().map(|l| l.info.clone())
}

/// Whether libcurl is in this process's memory already (it is loaded at the first transfer).
pub fn loaded() -> bool {
    LIB.get().is_some_and(|l| l.is_ok())
}

/// A request's method.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Method {
    Get,
    Post,
    Put,
}

/// The TLS side of a request to an https:// URL.
#[derive(Debug, Default, Clone, Copy)]
pub struct Tls<'a> {
    /// The only CA certificates trusted; None: the system's store.
    pub ca_file: Option<&'a Path>,
    /// The device's certificate and key (PEM), shown when the server asks.
    pub cert_file: Option<&'a Path>,
    pub key_file: Option<&'a Path>,
}

/// One HTTP request. Redirects are never followed by libcurl: the caller gets the target
/// ([`Outcome::redirect`]) and decides.
#[derive(Debug, Clone, Copy)]
pub struct Request<'a> {
    pub url: &'a str,
    pub method: Method,
    /// `Name: value` lines; `Name:` removes a header libcurl would send.
    pub headers: &'a [String],
    /// The body of a POST or PUT.
    pub body: &'a [u8],
    /// `Range: bytes=FROM-` when not 0.
    pub range_from: u64,
    /// The whole transfer, connection included.
    pub timeout: Duration,
    /// Name lookup, TCP and the TLS handshake.
    pub connect_timeout: Duration,
    /// Given up when no byte came for this long (whole seconds).
    pub idle: Duration,
    pub tls: Tls<'a>,
    /// None: the environment's proxy variables; `Some("")`: none at all.
    pub proxy: Option<&'a str>,
}

/// Where a transfer's bytes go. Returning false aborts the transfer (the caller knows why).
pub trait Handler {
    /// One line of a response head, with its line end; a blank line ends each head (an
    /// interim 1xx head, then the final one; trailers of a chunked body may follow).
    fn header(&mut self, line: &[u8]) -> bool;
    /// Body bytes, in order.
    fn data(&mut self, data: &[u8]) -> bool;
    /// Called often (at least once a second) while the transfer runs.
    fn tick(&mut self) -> bool;
}

/// How a transfer ended.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Outcome {
    /// `CURLE_*`; 0 when the request got its whole answer.
    pub code: i32,
    /// libcurl's reason when `code` is not 0 (empty when it has none to give).
    pub message: String,
    /// The final answer's status (0: none).
    pub status: u16,
    /// The absolute target of a 3xx answer's Location.
    pub redirect: Option<String>,
    /// The address connected to (empty when none was).
    pub primary_ip: String,
    /// The last system error, 0 when none.
    pub os_errno: i32,
    /// New connections this transfer made (0: one was reused).
    pub connects: u32,
    /// Bytes received (heads and body) and sent (request and body).
    pub bytes_in: u64,
    pub bytes_out: u64,
}

/// A libcurl easy handle: one transfer at a time, its connections and TLS sessions kept for
/// the next [`Easy::perform`] until the handle is dropped.
pub struct Easy {
    handle: NonNull<c_void>,
    lib: &'static Lib,
    error: Box<[c_char; CURL_ERROR_SIZE]>,
}

// SAFETY: a libcurl easy handle may be used from any thread, one call at a time; `Easy` is
// not Sync and every call takes `&mut self` or `&self` on the thread that owns it.
unsafe impl Send for Easy {}

impl Drop for Easy {
    fn drop(&mut self) {
        // SAFETY: the handle came from curl_easy_init and is cleaned up once.
        unsafe { (self.lib.easy_cleanup)(self.handle.as_ptr()) }
    }
}

/// A `struct curl_slist`, freed when dropped.
struct Slist<'l>(*mut c_void, &'l Lib);

impl Drop for Slist<'_> {
    fn drop(&mut self) {
        if !self.0.is_null() {
            // SAFETY: built by curl_slist_append, freed once.
            unsafe { (self.1.slist_free_all)(self.0) }
        }
    }
}

/// The transfer's state the callbacks see.
struct Ctx<'h> {
    handler: &'h mut dyn Handler,
}

extern "C" fn on_data(ptr: *mut c_char, size: usize, n: usize, ud: *mut c_void) -> usize {
    deliver(ptr, size * n, ud, false)
}

extern "C" fn on_header(ptr: *mut c_char, size: usize, n: usize, ud: *mut c_void) -> usize {
    deliver(ptr, size * n, ud, true)
}

fn deliver(ptr: *mut c_char, len: usize, ud: *mut c_void, header: bool) -> usize {
    // SAFETY: `ud` is the `Ctx` that `perform` passed as WRITEDATA/HEADERDATA, alive for the
    // whole curl_easy_perform call this callback runs inside.
    let ctx = unsafe { &mut *ud.cast::<Ctx>() };
    let bytes = if len == 0 || ptr.is_null() {
        &[][..]
    } else {
        // SAFETY: libcurl hands `len` readable bytes at `ptr` for the callback's duration.
        unsafe { std::slice::from_raw_parts(ptr.cast::<u8>(), len) }
    };
    let ok = if header {
        ctx.handler.header(bytes)
    } else {
        ctx.handler.data(bytes)
    };
    // Any count other than `len` makes libcurl stop with CURLE_WRITE_ERROR.
    match (ok, len) {
        (true, _) => len,
        (false, 0) => 1,
        (false, _) => 0,
    }
}

extern "C" fn on_tick(ud: *mut c_void, _: i64, _: i64, _: i64, _: i64) -> c_int {
    // SAFETY: as in `deliver`: the XFERINFODATA `Ctx`, alive during the perform call.
    let ctx = unsafe { &mut *ud.cast::<Ctx>() };
    c_int::from(!ctx.handler.tick())
}

/// An option libcurl refused (or a string berth could not pass: a NUL byte in it).
#[derive(Debug, Clone, Copy)]
struct Refused {
    opt: c_int,
    code: c_int,
}

fn cstring(opt: c_int, s: &[u8]) -> Result<CString, Refused> {
    CString::new(s).map_err(|_| Refused {
        opt,
        code: code::BAD_FUNCTION_ARGUMENT,
    })
}

fn millis(d: Duration) -> c_long {
    c_long::try_from(d.as_millis())
        .unwrap_or(c_long::MAX)
        .max(1)
}

impl Easy {
    /// A new handle; loads libcurl on first use.
    pub fn new() -> Result<Easy, String> {
        let lib = lib()?;
        // SAFETY: curl_easy_init has no preconditions once curl_global_init has run (load).
        let handle = NonNull::new(unsafe { (lib.easy_init)() })
            .ok_or("libcurl could not create a handle (out of memory?)")?;
        Ok(Easy {
            handle,
            lib,
            error: Box::new([0; CURL_ERROR_SIZE]),
        })
    }

    /// What the loaded libcurl is.
    pub fn version(&self) -> &'static Version {
        &self.lib.info
    }

    fn check(&self, opt: c_int, rc: c_int) -> Result<(), Refused> {
        if rc == code::OK {
            Ok(())
        } else {
            Err(Refused { opt, code: rc })
        }
    }

    fn long(&self, opt: c_int, v: c_long) -> Result<(), Refused> {
        debug_assert_eq!(opt / 10000, LONG / 10000);
        // SAFETY: a LONG option, read by libcurl as `long`.
        self.check(opt, unsafe {
            (self.lib.setopt)(self.handle.as_ptr(), opt, v)
        })
    }

    /// A pointer option. Strings are copied by libcurl (7.17 and later); other pointers must
    /// outlive the transfer.
    fn ptr(&self, opt: c_int, p: *const c_void) -> Result<(), Refused> {
        debug_assert_eq!(opt / 10000, POINT / 10000);
        // SAFETY: an OBJECTPOINT option, read by libcurl as a pointer.
        self.check(opt, unsafe {
            (self.lib.setopt)(self.handle.as_ptr(), opt, p)
        })
    }

    fn text(&self, opt: c_int, s: Option<&str>) -> Result<(), Refused> {
        match s {
            Some(s) => {
                let c = cstring(opt, s.as_bytes())?;
                self.ptr(opt, c.as_ptr().cast())
            }
            None => self.ptr(opt, std::ptr::null()),
        }
    }

    fn path(&self, opt: c_int, p: Option<&Path>) -> Result<(), Refused> {
        use std::os::unix::ffi::OsStrExt;
        match p {
            Some(p) => {
                let c = cstring(opt, p.as_os_str().as_bytes())?;
                self.ptr(opt, c.as_ptr().cast())
            }
            None => Ok(()),
        }
    }

    fn data_fn(&self, opt: c_int, f: DataFn) -> Result<(), Refused> {
        debug_assert_eq!(opt / 10000, FUNC / 10000);
        // SAFETY: a FUNCTIONPOINT option with the callback signature curl.h gives for it.
        self.check(opt, unsafe {
            (self.lib.setopt)(self.handle.as_ptr(), opt, f)
        })
    }

    fn xfer_fn(&self, opt: c_int, f: XferFn) -> Result<(), Refused> {
        debug_assert_eq!(opt / 10000, FUNC / 10000);
        // SAFETY: CURLOPT_XFERINFOFUNCTION's signature, curl_off_t being 64 bits on Linux.
        self.check(opt, unsafe {
            (self.lib.setopt)(self.handle.as_ptr(), opt, f)
        })
    }

    fn off(&self, opt: c_int, v: u64) -> Result<(), Refused> {
        debug_assert_eq!(opt / 10000, OFF / 10000);
        let v = i64::try_from(v).unwrap_or(i64::MAX);
        // SAFETY: an OFF_T option, read by libcurl as curl_off_t (64 bits on every Linux).
        self.check(opt, unsafe {
            (self.lib.setopt)(self.handle.as_ptr(), opt, v)
        })
    }

    fn strerror(&self, rc: c_int) -> String {
        // SAFETY: curl_easy_strerror returns a static NUL-terminated string for any code.
        let p = unsafe { (self.lib.strerror)(rc) };
        if p.is_null() {
            return String::new();
        }
        // SAFETY: non-null, static, NUL-terminated.
        unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
    }

    fn info_long(&self, info: c_int) -> c_long {
        let mut v: c_long = 0;
        // SAFETY: a LONG info, written through a `long *`.
        let rc = unsafe { (self.lib.getinfo)(self.handle.as_ptr(), info, &mut v as *mut c_long) };
        if rc == code::OK {
            v
        } else {
            0
        }
    }

    fn info_off(&self, info: c_int) -> u64 {
        let mut v: i64 = 0;
        // SAFETY: an OFF_T info, written through a `curl_off_t *`.
        let rc = unsafe { (self.lib.getinfo)(self.handle.as_ptr(), info, &mut v as *mut i64) };
        if rc == code::OK {
            u64::try_from(v).unwrap_or(0)
        } else {
            0
        }
    }

    fn info_text(&self, info: c_int) -> Option<String> {
        let mut p: *const c_char = std::ptr::null();
        // SAFETY: a STRING info, written through a `char **`; the string belongs to the
        // handle and is copied at once.
        let rc =
            unsafe { (self.lib.getinfo)(self.handle.as_ptr(), info, &mut p as *mut *const c_char) };
        if rc != code::OK || p.is_null() {
            return None;
        }
        // SAFETY: non-null and NUL-terminated, alive until the next call on the handle.
        Some(unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned())
    }

    /// Runs one request. The handle's options are reset first; its connections are kept.
    pub fn perform(&mut self, req: &Request, handler: &mut dyn Handler) -> Outcome {
        match self.setup(req) {
            Ok(headers) => self.run(handler, headers),
            Err(Refused { opt, code }) => {
                // Nothing set so far stays pointed to (the header list is already freed).
                // SAFETY: a live handle, no transfer running.
                unsafe { (self.lib.easy_reset)(self.handle.as_ptr()) };
                self.refused(opt, code)
            }
        }
    }

    fn refused(&self, opt: c_int, code: c_int) -> Outcome {
        Outcome {
            code,
            message: if code == code::BAD_FUNCTION_ARGUMENT {
                format!("option {opt}: a NUL byte in its text")
            } else {
                format!(
                    "libcurl {} refused option {opt}: {}",
                    self.lib.info.version,
                    self.strerror(code)
                )
            },
            ..Outcome::default()
        }
    }

    fn setup(&mut self, req: &Request) -> Result<Slist<'static>, Refused> {
        // SAFETY: a live handle; reset keeps its connection cache and TLS sessions.
        unsafe { (self.lib.easy_reset)(self.handle.as_ptr()) };
        self.error[0] = 0;
        let error: *mut c_char = self.error.as_mut_ptr();
        self.ptr(OPT_ERRORBUFFER, error.cast())?;
        self.long(OPT_NOSIGNAL, 1)?;
        self.text(OPT_URL, Some(req.url))?;
        // A libcurl without TLS refuses "https" in the list: http:// must still work there.
        let tls = self.lib.info.speaks("https");
        if self.lib.info.number >= PROTOCOLS_STR_SINCE {
            self.text(
                OPT_PROTOCOLS_STR,
                Some(if tls { "http,https" } else { "http" }),
            )?;
        } else {
            self.long(OPT_PROTOCOLS, if tls { PROTO_HTTP_HTTPS } else { 1 })?;
        }
        self.long(OPT_FOLLOWLOCATION, 0)?;
        self.long(OPT_HTTP_VERSION, HTTP_VERSION_1_1)?;
        self.text(
            OPT_USERAGENT,
            Some(concat!("berth/", env!("CARGO_PKG_VERSION"))),
        )?;
        self.long(OPT_TIMEOUT_MS, millis(req.timeout))?;
        self.long(OPT_CONNECTTIMEOUT_MS, millis(req.connect_timeout))?;
        self.long(OPT_LOW_SPEED_LIMIT, 1)?;
        // Whole seconds (the caller rounds up).
        self.long(
            OPT_LOW_SPEED_TIME,
            c_long::try_from(req.idle.as_secs().max(1)).unwrap_or(c_long::MAX),
        )?;
        if req.range_from > 0 {
            self.text(OPT_RANGE, Some(&format!("{}-", req.range_from)))?;
        }
        match req.method {
            Method::Get => {}
            Method::Post | Method::Put => {
                self.long(OPT_POST, 1)?;
                self.off(OPT_POSTFIELDSIZE_LARGE, req.body.len() as u64)?;
                // Not copied: `req.body` outlives the transfer (`perform` borrows it).
                self.ptr(OPT_POSTFIELDS, req.body.as_ptr().cast())?;
                if req.method == Method::Put {
                    self.text(OPT_CUSTOMREQUEST, Some("PUT"))?;
                }
            }
        }
        // TLS, for an https:// URL only (a backend without some option must not break
        // http://): the CA file is the only trust when given (CAPATH cleared, or Debian's
        // /etc/ssl/certs would be trusted beside it; a backend without CA paths has nothing to
        // clear); the system's store otherwise.
        if req
            .url
            .get(..8)
            .is_some_and(|s| s.eq_ignore_ascii_case("https://"))
        {
            self.long(OPT_SSL_VERIFYPEER, 1)?;
            self.long(OPT_SSL_VERIFYHOST, 2)?;
            if req.tls.ca_file.is_some() {
                self.path(OPT_CAINFO, req.tls.ca_file)?;
                match self.ptr(OPT_CAPATH, std::ptr::null()) {
                    Err(Refused { code, .. }) if code == code::NOT_BUILT_IN => {}
                    other => other?,
                }
            }
            self.path(OPT_SSLCERT, req.tls.cert_file)?;
            self.path(OPT_SSLKEY, req.tls.key_file)?;
        }
        if let Some(proxy) = req.proxy {
            self.text(OPT_PROXY, Some(proxy))?;
            if proxy.is_empty() {
                self.text(OPT_NOPROXY, Some("*"))?;
            }
        }
        self.long(OPT_SUPPRESS_CONNECT_HEADERS, 1)?;
        let mut list = Slist(std::ptr::null_mut(), self.lib);
        for h in req.headers {
            let c = cstring(OPT_HTTPHEADER, h.as_bytes())?;
            // SAFETY: curl_slist_append copies the string; a NULL list starts a new one.
            let next = unsafe { (self.lib.slist_append)(list.0, c.as_ptr()) };
            if next.is_null() {
                return Err(Refused {
                    opt: OPT_HTTPHEADER,
                    code: code::OUT_OF_MEMORY,
                });
            }
            list.0 = next;
        }
        if !list.0.is_null() {
            self.ptr(OPT_HTTPHEADER, list.0)?;
        }
        self.data_fn(OPT_WRITEFUNCTION, on_data)?;
        self.data_fn(OPT_HEADERFUNCTION, on_header)?;
        self.xfer_fn(OPT_XFERINFOFUNCTION, on_tick)?;
        self.long(OPT_NOPROGRESS, 0)?;
        Ok(list)
    }

    fn run(&mut self, handler: &mut dyn Handler, headers: Slist) -> Outcome {
        let mut ctx = Ctx { handler };
        let ud: *mut c_void = (&mut ctx as *mut Ctx).cast();
        let wired = [OPT_WRITEDATA, OPT_HEADERDATA, OPT_XFERINFODATA]
            .into_iter()
            .try_for_each(|opt| self.ptr(opt, ud));
        if let Err(Refused { opt, code }) = wired {
            // SAFETY: a live handle, no transfer running.
            unsafe { (self.lib.easy_reset)(self.handle.as_ptr()) };
            return Outcome {
                code,
                message: format!("libcurl refused option {opt}"),
                ..Outcome::default()
            };
        }
        // SAFETY: every pointer set on the handle (the context, the error buffer, the
        // header list, the body) lives until this call returns.
        let rc = unsafe { (self.lib.perform)(self.handle.as_ptr()) };
        let message = if rc == code::OK {
            String::new()
        } else {
            let buf = self.error.iter().take_while(|&&c| c != 0).map(|&c| c as u8);
            let own = String::from_utf8_lossy(&buf.collect::<Vec<u8>>()).into_owned();
            if own.is_empty() {
                self.strerror(rc)
            } else {
                own
            }
        };
        let status = u16::try_from(self.info_long(INFO_RESPONSE_CODE)).unwrap_or(0);
        let outcome = Outcome {
            code: rc,
            message,
            status,
            redirect: if (300..400).contains(&status) {
                self.info_text(INFO_REDIRECT_URL)
            } else {
                None
            },
            primary_ip: self.info_text(INFO_PRIMARY_IP).unwrap_or_default(),
            os_errno: i32::try_from(self.info_long(INFO_OS_ERRNO)).unwrap_or(0),
            connects: u32::try_from(self.info_long(INFO_NUM_CONNECTS)).unwrap_or(0),
            bytes_in: self.info_off(INFO_SIZE_DOWNLOAD_T)
                + u64::try_from(self.info_long(INFO_HEADER_SIZE)).unwrap_or(0),
            bytes_out: self.info_off(INFO_SIZE_UPLOAD_T)
                + u64::try_from(self.info_long(INFO_REQUEST_SIZE)).unwrap_or(0),
        };
        // Nothing of this transfer (the context, the headers, the body) stays pointed to
        // while the handle waits for the next one; its connections stay.
        // SAFETY: a live handle, no transfer running.
        unsafe { (self.lib.easy_reset)(self.handle.as_ptr()) };
        drop(headers);
        outcome
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{BufRead, BufReader, Read, Write};
    use std::net::TcpListener;

    #[derive(Default)]
    struct Collect {
        heads: Vec<String>,
        body: Vec<u8>,
        stop_after: Option<usize>,
        ticks: usize,
    }

    impl Handler for Collect {
        fn header(&mut self, line: &[u8]) -> bool {
            self.heads.push(String::from_utf8_lossy(line).into_owned());
            true
        }
        fn data(&mut self, data: &[u8]) -> bool {
            self.body.extend_from_slice(data);
            self.stop_after.is_none_or(|n| self.body.len() < n)
        }
        fn tick(&mut self) -> bool {
            self.ticks += 1;
            true
        }
    }

    /// Answers `answers.len()` requests on keep-alive connections and hands back each
    /// request's head and the number of connections accepted.
    fn serve(answers: Vec<Vec<u8>>) -> (String, std::thread::JoinHandle<(Vec<String>, usize)>) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let handle = std::thread::spawn(move || {
            let mut requests = Vec::new();
            let mut connections = 0;
            let mut answers = answers.into_iter().peekable();
            while answers.peek().is_some() {
                let (stream, _) = listener.accept().unwrap();
                connections += 1;
                let mut reader = BufReader::new(stream.try_clone().unwrap());
                let mut stream = stream;
                loop {
                    let mut head = String::new();
                    loop {
                        let mut line = String::new();
                        if reader.read_line(&mut line).unwrap_or(0) == 0 {
                            break;
                        }
                        head.push_str(&line);
                        if line == "\r\n" {
                            break;
                        }
                    }
                    if head.is_empty() {
                        break;
                    }
                    let len = head
                        .lines()
                        .find_map(|l| {
                            l.to_ascii_lowercase()
                                .strip_prefix("content-length: ")
                                .map(|v| v.trim().parse::<usize>().unwrap())
                        })
                        .unwrap_or(0);
                    let mut body = vec![0; len];
                    reader.read_exact(&mut body).unwrap();
                    head.push_str(&String::from_utf8_lossy(&body));
                    requests.push(head);
                    let Some(answer) = answers.next() else { break };
                    stream.write_all(&answer).unwrap();
                    if answers.peek().is_none() {
                        break;
                    }
                }
            }
            (requests, connections)
        });
        (base, handle)
    }

    fn request(url: &str) -> Request<'_> {
        Request {
            url,
            method: Method::Get,
            headers: &[],
            body: &[],
            range_from: 0,
            timeout: Duration::from_secs(10),
            connect_timeout: Duration::from_secs(5),
            idle: Duration::from_secs(5),
            tls: Tls::default(),
            proxy: Some(""),
        }
    }

    /// libcurl is a test dependency of the suite (scripts/test.sh installs libcurl4).
    fn easy() -> Easy {
        Easy::new().unwrap_or_else(|e| panic!("libcurl is needed for these tests: {e}"))
    }

    #[test]
    fn option_numbers_are_of_the_kind_their_setter_passes() {
        for opt in [
            OPT_LOW_SPEED_LIMIT,
            OPT_NOPROGRESS,
            OPT_TIMEOUT_MS,
            OPT_SUPPRESS_CONNECT_HEADERS,
        ] {
            assert_eq!(opt / 10000, 0, "{opt}");
        }
        for opt in [
            OPT_URL,
            OPT_ERRORBUFFER,
            OPT_HTTPHEADER,
            OPT_CAPATH,
            OPT_PROTOCOLS_STR,
        ] {
            assert_eq!(opt / 10000, 1, "{opt}");
        }
        for opt in [OPT_WRITEFUNCTION, OPT_HEADERFUNCTION, OPT_XFERINFOFUNCTION] {
            assert_eq!(opt / 10000, 2, "{opt}");
        }
        assert_eq!(OPT_POSTFIELDSIZE_LARGE / 10000, 3);
        // Every number against curl.h's (include/curl/curl.h, CURLOPT_*/CURLINFO_*).
        let table = [
            (OPT_WRITEDATA, 10001),
            (OPT_URL, 10002),
            (OPT_PROXY, 10004),
            (OPT_RANGE, 10007),
            (OPT_ERRORBUFFER, 10010),
            (OPT_WRITEFUNCTION, 20011),
            (OPT_POSTFIELDS, 10015),
            (OPT_USERAGENT, 10018),
            (OPT_LOW_SPEED_LIMIT, 19),
            (OPT_LOW_SPEED_TIME, 20),
            (OPT_HTTPHEADER, 10023),
            (OPT_SSLCERT, 10025),
            (OPT_HEADERDATA, 10029),
            (OPT_CUSTOMREQUEST, 10036),
            (OPT_NOPROGRESS, 43),
            (OPT_POST, 47),
            (OPT_FOLLOWLOCATION, 52),
            (OPT_XFERINFODATA, 10057),
            (OPT_SSL_VERIFYPEER, 64),
            (OPT_CAINFO, 10065),
            (OPT_HEADERFUNCTION, 20079),
            (OPT_SSL_VERIFYHOST, 81),
            (OPT_HTTP_VERSION, 84),
            (OPT_SSLKEY, 10087),
            (OPT_CAPATH, 10097),
            (OPT_NOSIGNAL, 99),
            (OPT_POSTFIELDSIZE_LARGE, 30120),
            (OPT_TIMEOUT_MS, 155),
            (OPT_CONNECTTIMEOUT_MS, 156),
            (OPT_NOPROXY, 10177),
            (OPT_PROTOCOLS, 181),
            (OPT_XFERINFOFUNCTION, 20219),
            (OPT_SUPPRESS_CONNECT_HEADERS, 265),
            (OPT_PROTOCOLS_STR, 10318),
            (INFO_RESPONSE_CODE, 0x200002),
            (INFO_HEADER_SIZE, 0x20000b),
            (INFO_REQUEST_SIZE, 0x20000c),
            (INFO_OS_ERRNO, 0x200019),
            (INFO_NUM_CONNECTS, 0x20001a),
            (INFO_REDIRECT_URL, 0x10001f),
            (INFO_PRIMARY_IP, 0x100020),
            (INFO_SIZE_UPLOAD_T, 0x600007),
            (INFO_SIZE_DOWNLOAD_T, 0x600008),
        ];
        for (ours, theirs) in table {
            assert_eq!(ours, theirs);
        }
        // Spot checks against curl.h's numbers.
        assert_eq!((OPT_URL, OPT_RANGE, OPT_TIMEOUT_MS), (10002, 10007, 155));
        assert_eq!((INFO_RESPONSE_CODE, INFO_REDIRECT_URL), (2097154, 1048607));
    }

    #[test]
    fn the_loaded_library_speaks_http() {
        let v = version().unwrap_or_else(|e| panic!("libcurl: {e}"));
        assert!(v.speaks("http"), "{v:?}");
        assert!(v.number >= OLDEST, "{v:?}");
        assert!(v.version.split('.').count() >= 2, "{v:?}");
    }

    #[test]
    fn a_get_gives_its_heads_and_body_and_reuses_the_connection() {
        let ok = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nETag: \"x\"\r\n\r\nhello".to_vec();
        let (base, server) = serve(vec![ok.clone(), ok]);
        let mut easy = easy();
        let url = format!("{base}/a");
        let headers = vec!["If-None-Match: \"y\"".to_string()];
        for _ in 0..2 {
            let mut c = Collect::default();
            let out = easy.perform(
                &Request {
                    headers: &headers,
                    range_from: 7,
                    ..request(&url)
                },
                &mut c,
            );
            assert_eq!((out.code, out.status), (0, 200), "{out:?}");
            assert_eq!(c.body, b"hello");
            assert_eq!(
                c.heads.first().map(String::as_str),
                Some("HTTP/1.1 200 OK\r\n")
            );
            assert_eq!(c.heads.last().map(String::as_str), Some("\r\n"));
            assert_eq!(out.primary_ip, "127.0.0.1");
        }
        let (requests, connections) = server.join().unwrap();
        assert_eq!(connections, 1, "the second request reuses the connection");
        assert!(
            requests[0].starts_with("GET /a HTTP/1.1\r\n"),
            "{}",
            requests[0]
        );
        assert!(
            requests[0].contains("\r\nIf-None-Match: \"y\"\r\n"),
            "{}",
            requests[0]
        );
        assert!(
            requests[0].contains("\r\nRange: bytes=7-\r\n"),
            "{}",
            requests[0]
        );
        assert!(
            requests[0].contains("\r\nUser-Agent: berth/"),
            "{}",
            requests[0]
        );
    }

    #[test]
    fn a_put_sends_its_body_and_a_redirect_is_handed_back() {
        let (base, server) = serve(vec![
            b"HTTP/1.1 302 Found\r\nLocation: ../b?x=1\r\nContent-Length: 0\r\n\r\n".to_vec(),
        ]);
        let mut c = Collect::default();
        let headers = vec![
            "Content-Type: application/json".to_string(),
            "Expect:".to_string(),
        ];
        let url = format!("{base}/d/a");
        let out = easy().perform(
            &Request {
                method: Method::Put,
                headers: &headers,
                body: br#"{"k":1}"#,
                ..request(&url)
            },
            &mut c,
        );
        assert_eq!((out.code, out.status), (0, 302), "{out:?}");
        assert_eq!(out.redirect.as_deref(), Some(&*format!("{base}/b?x=1")));
        let (requests, _) = server.join().unwrap();
        assert!(
            requests[0].starts_with("PUT /d/a HTTP/1.1\r\n"),
            "{}",
            requests[0]
        );
        assert!(
            requests[0].ends_with("\r\n\r\n{\"k\":1}"),
            "{}",
            requests[0]
        );
        assert!(!requests[0].contains("Expect"), "{}", requests[0]);
    }

    #[test]
    fn a_handler_that_says_no_stops_the_transfer() {
        let mut answer = b"HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n".to_vec();
        answer.extend(std::iter::repeat_n(b'x', 100_000));
        let (base, server) = serve(vec![answer]);
        let mut c = Collect {
            stop_after: Some(1),
            ..Collect::default()
        };
        let out = easy().perform(&request(&base), &mut c);
        assert_eq!(out.code, code::WRITE_ERROR, "{out:?}");
        assert!(c.body.len() < 100_000);
        drop(server);
    }

    #[test]
    fn a_refused_connection_names_the_system_error() {
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let url = format!("http://127.0.0.1:{port}/");
        let out = easy().perform(&request(&url), &mut Collect::default());
        assert_eq!(out.code, code::COULDNT_CONNECT, "{out:?}");
        assert_eq!(out.os_errno, libc::ECONNREFUSED, "{out:?}");
        assert!(!out.message.is_empty());
    }

    #[test]
    fn other_schemes_are_refused_by_libcurl_too() {
        let out = easy().perform(&request("file:///etc/hostname"), &mut Collect::default());
        assert_eq!(out.code, code::UNSUPPORTED_PROTOCOL, "{out:?}");
    }
}
