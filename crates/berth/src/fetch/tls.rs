//! https:// for the fleet client, through the system's `openssl s_client`.
//!
//! berth carries no TLS stack: a fleet server's channel is the one place TLS matters (the token,
//! and what the server learns of the device), while every byte installed is checked against
//! the signed index whatever the transport. So each request runs `openssl s_client` as a
//! tunnel: the request goes to its stdin, the answer comes from its stdout, and the HTTP
//! client above is the same one plain http:// uses. The server's certificate is verified
//! (chain to `ca_file` only, or to the system's store without it, and the URL's host name or
//! address) and any failure ends the session before a byte of the request is sent (s_client
//! reads its stdin only once the handshake is done). The program must be OpenSSL 1.1.1 or
//! later (what OpenWrt's `openssl-util`, Yocto's `openssl-bin` and Debian's `openssl` are):
//! older ones and LibreSSL's do not end a session on a failed check the same way, so they are
//! refused.

use std::io::{self, Read, Write};
use std::os::fd::AsRawFd;
use std::path::PathBuf;
use std::process::{Child, ChildStderr, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use berth_core::config::FleetTls;

/// At most this much of the program's diagnostics is kept.
const STDERR_LIMIT: usize = 16 * 1024;

/// One TLS session: a running `openssl s_client`.
pub struct Tunnel {
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: ChildStdout,
    stderr: Option<ChildStderr>,
    /// What the program said on stderr, once read.
    said: Option<String>,
    timeout: Duration,
    /// Bytes of the answer so far.
    received: u64,
    /// Whether the device showed a certificate.
    has_cert: bool,
}

/// The program's major version, for the options it knows: 1 (1.1.1) or 3 and later.
fn major(version: &str) -> Result<u32, String> {
    // "OpenSSL 3.0.19 27 Jan 2026 (Library: …)", "OpenSSL 1.1.1w  11 Sep 2023", "LibreSSL 3.8.2"
    let v = version
        .strip_prefix("OpenSSL ")
        .ok_or_else(|| format!("{:?} is not OpenSSL", version.trim()))?;
    let num: Vec<u32> = v
        .split(|c: char| !c.is_ascii_digit())
        .take(3)
        .map(|n| n.parse().unwrap_or(0))
        .collect();
    match num.as_slice() {
        [m, ..] if *m >= 3 => Ok(*m),
        [1, 1, p] if *p >= 1 => Ok(1),
        _ => Err(format!("{:?} is older than OpenSSL 1.1.1", version.trim())),
    }
}

/// Checks the program once per daemon (its version) and the files at each session.
fn checked(tls: &FleetTls) -> Result<u32, String> {
    static SEEN: Mutex<Vec<(PathBuf, Result<u32, String>)>> = Mutex::new(Vec::new());
    let mut seen = SEEN.lock().unwrap_or_else(|p| p.into_inner());
    let known = seen
        .iter()
        .find(|(p, _)| *p == tls.openssl)
        .map(|(_, v)| v.clone());
    let v = known.unwrap_or_else(|| {
        let v = version(tls);
        seen.push((tls.openssl.clone(), v.clone()));
        v
    });
    drop(seen);
    for (key, f) in [
        ("ca_file", &tls.ca_file),
        ("cert_file", &tls.cert_file),
        ("key_file", &tls.key_file),
    ] {
        if let Some(f) = f {
            std::fs::File::open(f).map_err(|e| format!("[fleet] {key} {}: {e}", f.display()))?;
        }
    }
    v
}

/// The program's major version, from `openssl version`.
fn version(tls: &FleetTls) -> Result<u32, String> {
    let out = Command::new(&tls.openssl)
        .arg("version")
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()
        .map_err(|e| {
            format!(
                "cannot run {}: {e} (https:// servers need the openssl program, OpenSSL 1.1.1 or later: [fleet] openssl)",
                tls.openssl.display()
            )
        })?;
    major(&String::from_utf8_lossy(&out.stdout)).map_err(|e| {
        format!(
            "{}: {e}; https:// needs OpenSSL 1.1.1 or later ([fleet] openssl)",
            tls.openssl.display()
        )
    })
}

/// The arguments for a session to `host:port` with OpenSSL `major`: the peer is verified
/// (`-verify`) and a failure ends the session (`-verify_return_error`); with `ca_file`, its
/// CAs alone (not the system's directory or store beside it); the name checked is the URL's
/// host (`-verify_hostname`, or `-verify_ip` for an address, which is never sent as SNI);
/// `-quiet` turns off the program's interactive commands (a line of the request starting
/// with `R` or `Q` must not renegotiate or quit).
pub fn args(tls: &FleetTls, host: &str, port: u16, major: u32) -> Vec<String> {
    let ip = host.parse::<std::net::IpAddr>().is_ok();
    let connect = if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    };
    let mut a: Vec<String> = [
        "s_client",
        "-quiet",
        "-verify",
        "9",
        "-verify_return_error",
        "-connect",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    a.push(connect);
    if ip {
        a.extend(["-verify_ip".into(), host.into()]);
    } else {
        a.extend([
            "-servername".into(),
            host.into(),
            "-verify_hostname".into(),
            host.into(),
        ]);
    }
    let path = |p: &std::path::Path| p.to_string_lossy().into_owned();
    if let Some(ca) = &tls.ca_file {
        a.extend(["-CAfile".into(), path(ca), "-no-CApath".into()]);
        if major >= 3 {
            a.push("-no-CAstore".into());
        }
    }
    if let (Some(cert), Some(key)) = (&tls.cert_file, &tls.key_file) {
        a.extend(["-cert".into(), path(cert), "-key".into(), path(key)]);
    }
    a
}

impl Tunnel {
    pub fn open(
        tls: &FleetTls,
        host: &str,
        port: u16,
        timeout: Duration,
    ) -> Result<Tunnel, String> {
        let major = checked(tls)?;
        let mut cmd = Command::new(&tls.openssl);
        cmd.args(args(tls, host, port, major))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        berth_sys::process::kill_with_parent(&mut cmd);
        let mut child = cmd.spawn().map_err(|e| {
            format!(
                "cannot run {} for the TLS session: {e}",
                tls.openssl.display()
            )
        })?;
        let (stdin, stdout, stderr) =
            (child.stdin.take(), child.stdout.take(), child.stderr.take());
        Ok(Tunnel {
            child,
            stdin,
            stdout: stdout.expect("piped"),
            stderr,
            said: None,
            timeout,
            received: 0,
            has_cert: tls.cert_file.is_some(),
        })
    }

    /// The request is complete: its end closes stdin (the program keeps the session open
    /// until the server closes it).
    pub fn end_request(&mut self) {
        self.stdin = None;
    }

    /// What the program said on stderr (read once its answer has ended; waits at most a
    /// second for it to finish saying it).
    fn said(&mut self) -> &str {
        if self.said.is_none() {
            let mut text = Vec::new();
            if let Some(mut err) = self.stderr.take() {
                let until = Instant::now() + Duration::from_secs(1);
                let mut buf = [0u8; 1024];
                while text.len() < STDERR_LIMIT && wait(&err, libc::POLLIN, until).unwrap_or(false)
                {
                    match err.read(&mut buf) {
                        Ok(0) | Err(_) => break,
                        Ok(n) => text.extend_from_slice(&buf[..n]),
                    }
                }
            }
            self.said = Some(String::from_utf8_lossy(&text).into_owned());
        }
        self.said.as_deref().unwrap_or_default()
    }

    /// Whether the server ended the session properly (TLS close_notify), not just the
    /// connection: an answer delimited by the close is whole only then.
    pub fn closed_cleanly(&mut self) -> bool {
        !self.said().contains("unexpected eof")
    }

    /// Why the session failed, from the program's diagnostics, once its answer has ended
    /// early; None when it says nothing but that the server closed the connection after
    /// answering something.
    pub fn failure(&mut self) -> Option<String> {
        let received = self.received;
        let has_cert = self.has_cert;
        diagnose(self.said()).or_else(|| {
            // Some servers (Python's asyncio TLS, so uvicorn) close a session whose client
            // certificate they refuse without an alert.
            (received == 0).then(|| {
                let hint = if has_cert {
                    ""
                } else {
                    " (servers that require a client certificate do this when none is \
                     shown: [fleet] cert_file and key_file)"
                };
                format!("the server closed the session without answering{hint}")
            })
        })
    }
}

/// Waits until `fd` is ready for `events` or `until` passes (a signal does not end the wait
/// early); whether it is ready.
fn wait(fd: &impl AsRawFd, events: i16, until: Instant) -> io::Result<bool> {
    loop {
        let left = until.saturating_duration_since(Instant::now());
        let ms = left.as_millis().min(i32::MAX as u128) as i32;
        if berth_sys::process::poll(&[(fd.as_raw_fd(), events)], ms)?[0] != 0 {
            return Ok(true);
        }
        if left.is_zero() {
            return Ok(false);
        }
    }
}

impl Read for Tunnel {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if !wait(&self.stdout, libc::POLLIN, Instant::now() + self.timeout)? {
            return Err(io::ErrorKind::TimedOut.into());
        }
        let n = self.stdout.read(buf)?;
        self.received += n as u64;
        Ok(n)
    }
}

impl Write for Tunnel {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let timeout = self.timeout;
        let Some(w) = &mut self.stdin else {
            return Err(io::ErrorKind::BrokenPipe.into());
        };
        // The program reads its stdin only after the handshake: a request larger than the
        // pipe waits for it, at most the read timeout.
        if !wait(w, libc::POLLOUT, Instant::now() + timeout)? {
            return Err(io::ErrorKind::TimedOut.into());
        }
        w.write(buf)
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Drop for Tunnel {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The reason in `openssl s_client`'s diagnostics: a certificate that failed verification
/// (`verify error:num=N:TEXT`), else the first library error's reason (a refused
/// connection, an unknown host, a file it cannot read, an alert from the server) other than
/// the end of the stream, else a failed connect.
pub fn diagnose(stderr: &str) -> Option<String> {
    let lines = || stderr.lines().map(str::trim);
    if let Some(why) = lines().find_map(|l| l.strip_prefix("verify error:num=")) {
        let why = why.split_once(':').map_or(why, |(_, t)| t);
        return Some(format!(
            "the server's certificate failed verification: {why}"
        ));
    }
    // What the program was doing ("Unable to load client certificate …"), if it says.
    let doing = lines().find(|l| l.starts_with("Unable to ") || l.starts_with("Could not "));
    // HEX:error:CODE:LIBRARY:FUNCTION:REASON:FILE:LINE[:DATA]
    let library = lines().find_map(|l| {
        let f: Vec<&str> = l.splitn(9, ':').collect();
        if f.len() < 6 || f[1] != "error" {
            return None;
        }
        let (reason, data) = (f[5], f.get(8).copied().unwrap_or("").trim());
        if reason.contains("unexpected eof") || reason == "unregistered scheme" {
            return None;
        }
        Some(match (reason, data) {
            // The system's own words are in the data: "Name or service not known".
            ("system lib", d) if !d.is_empty() => d.to_string(),
            (r, d) if d.starts_with("calling ") && d.contains('/') => format!("{r} ({d})"),
            (r, _) => r.to_string(),
        })
    });
    if let Some(why) = library {
        // "sslv3 alert …", "tlsv13 alert …", "ssl/tls alert …": the server's alert.
        let why = match why.split_once("alert ") {
            Some((_, alert)) => format!("the server refused the session: {alert}"),
            None => why,
        };
        return Some(match doing {
            Some(d) => format!("{d}: {why}"),
            None => why,
        });
    }
    if let Some(d) = doing {
        return Some(d.to_string());
    }
    lines()
        .find_map(|l| l.strip_prefix("connect:errno="))
        .map(|n| format!("cannot connect (errno {n})"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tls() -> FleetTls {
        FleetTls {
            openssl: "openssl".into(),
            ca_file: Some("/etc/berth/ca.pem".into()),
            cert_file: None,
            key_file: None,
        }
    }

    #[test]
    fn arguments_verify_the_name_or_the_address() {
        let a = args(&tls(), "fleet.example", 8443, 3).join(" ");
        assert_eq!(
            a,
            "s_client -quiet -verify 9 -verify_return_error -connect fleet.example:8443 \
             -servername fleet.example -verify_hostname fleet.example -CAfile /etc/berth/ca.pem \
             -no-CApath -no-CAstore"
        );
        // 1.1.1 has no certificate store option.
        assert!(args(&tls(), "h", 1, 1)
            .join(" ")
            .ends_with("-CAfile /etc/berth/ca.pem -no-CApath"));
        let mut t = tls();
        t.ca_file = None;
        t.cert_file = Some("/c.pem".into());
        t.key_file = Some("/k.pem".into());
        assert_eq!(
            args(&t, "10.0.0.1", 443, 3).join(" "),
            "s_client -quiet -verify 9 -verify_return_error -connect 10.0.0.1:443 \
             -verify_ip 10.0.0.1 -cert /c.pem -key /k.pem"
        );
        assert!(args(&t, "fd00::1", 443, 3)
            .join(" ")
            .contains("-connect [fd00::1]:443 -verify_ip fd00::1"));
    }

    #[test]
    fn versions() {
        assert_eq!(
            major("OpenSSL 3.0.19 27 Jan 2026 (Library: OpenSSL 3.0.19 27 Jan 2026)\n"),
            Ok(3)
        );
        assert_eq!(major("OpenSSL 1.1.1w  11 Sep 2023\n"), Ok(1));
        for old in [
            "OpenSSL 1.1.0l  10 Sep 2019",
            "OpenSSL 1.0.2u  20 Dec 2019",
            "LibreSSL 3.8.2",
            "",
        ] {
            assert!(major(old).is_err(), "{old}");
        }
    }

    #[test]
    fn diagnostics_give_the_reason() {
        let cases = [
            (
                "Can't use SSL_get_servername\ndepth=0 CN = 127.0.0.1\nverify error:num=20:unable to get local issuer certificate\n4067566B5B7F0000:error:0A000086:SSL routines:tls_post_process_server_certificate:certificate verify failed:../ssl/statem/statem_clnt.c:1889:\n",
                Some("the server's certificate failed verification: unable to get local issuer certificate"),
            ),
            (
                "40E77989267F0000:error:8000006F:system library:BIO_connect:Connection refused:../crypto/bio/bio_sock2.c:117:calling connect()\n40E77989267F0000:error:10000067:BIO routines:BIO_connect:connect error:../crypto/bio/bio_sock2.c:119:\nconnect:errno=111\n",
                Some("Connection refused"),
            ),
            (
                "40A7:error:0A00045C:SSL routines:ssl3_read_bytes:ssl/tls alert certificate required:../ssl/record/rec_layer_s3.c:1605:SSL alert number 116\n",
                Some("the server refused the session: certificate required"),
            ),
            (
                "40A7:error:0A00045C:SSL routines:ssl3_read_bytes:tlsv13 alert certificate required:../ssl/record/rec_layer_s3.c:1605:SSL alert number 116\n",
                Some("the server refused the session: certificate required"),
            ),
            ("connect:errno=22\n", Some("cannot connect (errno 22)")),
            (
                "40978812817F0000:error:10080002:BIO routines:BIO_lookup_ex:system lib:../crypto/bio/bio_addr.c:746:Name or service not known\nconnect:errno=22\n",
                Some("Name or service not known"),
            ),
            (
                "4067:error:80000002:system library:BIO_new_file:No such file or directory:../crypto/bio/bss_file.c:67:calling fopen(/nonexist.pem, r)\n4067:error:10000080:BIO routines:BIO_new_file:no such file:../crypto/bio/bss_file.c:75:\n",
                Some("No such file or directory (calling fopen(/nonexist.pem, r))"),
            ),
            (
                "40B7:error:16000069:STORE routines:ossl_store_get0_loader_int:unregistered scheme:../crypto/store/store_register.c:237:scheme=file\n40B7:error:80000002:system library:file_open:No such file or directory:../providers/implementations/storemgmt/file_store.c:266:calling stat(/nonexist.pem)\nUnable to load client certificate\n",
                Some("Unable to load client certificate: No such file or directory (calling stat(/nonexist.pem))"),
            ),
            (
                "depth=0 CN = x\nverify return:1\n40F7:error:0A000126:SSL routines:ssl3_read_n:unexpected eof while reading:../ssl/record/rec_layer_s3.c:318:\n",
                None,
            ),
            ("", None),
        ];
        for (text, want) in cases {
            assert_eq!(diagnose(text).as_deref(), want, "{text}");
        }
    }

    /// A test CA, a server certificate for 127.0.0.1 and a client certificate, made with
    /// the openssl program; `openssl s_server -WWW` serving `dir` over TLS.
    struct Pki {
        dir: std::path::PathBuf,
        server: Option<Child>,
    }

    impl Pki {
        fn new(name: &str) -> Pki {
            let dir = std::env::temp_dir().join(format!("berth-tls-{name}-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(&dir).unwrap();
            let pki = Pki { dir, server: None };
            for ca in ["ca", "other"] {
                pki.run(&format!(
                    "req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 \
                     -keyout {ca}.key -out {ca}.pem -subj /CN={ca}"
                ));
            }
            std::fs::write(pki.dir.join("ext"), "subjectAltName=IP:127.0.0.1\n").unwrap();
            for who in ["srv", "dev"] {
                pki.run(&format!(
                    "req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout {who}.key \
                     -out {who}.csr -subj /CN={who}"
                ));
                pki.run(&format!(
                    "x509 -req -in {who}.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 2 \
                     -extfile ext -out {who}.pem"
                ));
            }
            std::fs::write(pki.dir.join("index.json"), b"{\"over\":\"tls\"}").unwrap();
            pki
        }

        fn run(&self, args: &str) {
            let out = Command::new("openssl")
                .args(args.split_whitespace())
                .current_dir(&self.dir)
                .output()
                .expect("the TLS tests need the openssl program (Debian package openssl)");
            assert!(out.status.success(), "openssl {args}: {out:?}");
        }

        /// Serves the directory; `mutual`: a client certificate from the CA is required.
        fn serve(&mut self, mutual: bool) -> u16 {
            self.stop();
            let port = std::net::TcpListener::bind("127.0.0.1:0")
                .unwrap()
                .local_addr()
                .unwrap()
                .port();
            let mut cmd = Command::new("openssl");
            cmd.args([
                "s_server", "-WWW", "-naccept", "1", "-cert", "srv.pem", "-key", "srv.key",
            ])
            .args(["-accept", &format!("127.0.0.1:{port}")])
            .current_dir(&self.dir)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null());
            if mutual {
                cmd.args(["-Verify", "1", "-verify_return_error", "-CAfile", "ca.pem"]);
            }
            let mut child = cmd.spawn().unwrap();
            let mut out = io::BufReader::new(child.stdout.take().unwrap());
            let mut line = String::new();
            while !line.contains("ACCEPT") {
                line.clear();
                assert!(
                    io::BufRead::read_line(&mut out, &mut line).unwrap() > 0,
                    "s_server ended"
                );
            }
            self.server = Some(child);
            port
        }

        fn tls(&self, ca: &str, client: bool) -> FleetTls {
            FleetTls {
                openssl: "openssl".into(),
                ca_file: Some(self.dir.join(format!("{ca}.pem"))),
                cert_file: client.then(|| self.dir.join("dev.pem")),
                key_file: client.then(|| self.dir.join("dev.key")),
            }
        }
    }

    impl Pki {
        fn stop(&mut self) {
            if let Some(mut c) = self.server.take() {
                let _ = c.kill();
                let _ = c.wait();
            }
        }
    }

    impl Drop for Pki {
        fn drop(&mut self) {
            self.stop();
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }

    fn get(url: &str, tls: Option<&FleetTls>) -> Result<Vec<u8>, crate::fetch::FetchError> {
        let fetcher = crate::fetch::Fetcher {
            connect_timeout: Duration::from_secs(5),
            read_timeout: Duration::from_secs(5),
            min_total: Duration::from_secs(10),
        };
        let call = crate::fetch::Call {
            method: "GET",
            auth: None,
            json: None,
            tls,
        };
        fetcher.call(url, call, 1000)
    }

    #[test]
    fn https_through_openssl_verifies_the_server() {
        let mut pki = Pki::new("verify");
        let port = pki.serve(false);
        let url = format!("https://127.0.0.1:{port}/index.json");
        assert_eq!(
            get(&url, Some(&pki.tls("ca", false))).unwrap(),
            b"{\"over\":\"tls\"}"
        );
        // A fresh server for each of these, which would serve the file: each refusal comes
        // from the client's own checks.
        let port = pki.serve(false);
        let url = format!("https://127.0.0.1:{port}/index.json");
        let e = get(&url, None).unwrap_err().to_string();
        assert!(e.contains("unsupported URL scheme 'https'"), "{e}");
        let e = get(&url, Some(&pki.tls("other", false)))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("TLS: the server's certificate failed verification: unable to get local issuer certificate"),
            "{e}"
        );
        let port = pki.serve(false);
        let e = get(
            &format!("https://localhost:{port}/index.json"),
            Some(&pki.tls("ca", false)),
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("failed verification: hostname mismatch"), "{e}");
        let mut missing = pki.tls("ca", false);
        missing.openssl = "/nonexistent/openssl".into();
        let e = get(&url, Some(&missing)).unwrap_err().to_string();
        assert!(e.contains("cannot run /nonexistent/openssl"), "{e}");
        let mut unreadable = pki.tls("ca", false);
        unreadable.ca_file = Some("/nonexistent/ca.pem".into());
        let e = get(&url, Some(&unreadable)).unwrap_err().to_string();
        assert!(
            e.contains("[fleet] ca_file /nonexistent/ca.pem: No such file"),
            "{e}"
        );
    }

    /// A redirect from https:// to http:// (the same host) is refused: the answer comes from
    /// Python's TLS server (python3), which sends it to every request.
    #[test]
    fn https_never_redirects_to_http() {
        let pki = Pki::new("redirect");
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let script = format!(
            "import http.server, ssl\n\
             class H(http.server.BaseHTTPRequestHandler):\n \
             def do_GET(self):\n  \
             self.send_response(302); self.send_header('Location', 'http://127.0.0.1:{port}/x'); \
             self.send_header('Content-Length', '0'); self.end_headers()\n \
             def log_message(self, *a): pass\n\
             s = http.server.HTTPServer(('127.0.0.1', {port}), H)\n\
             c = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER); c.load_cert_chain('srv.pem', 'srv.key')\n\
             s.socket = c.wrap_socket(s.socket, server_side=True)\n\
             print('ready', flush=True)\n\
             s.serve_forever()\n"
        );
        let mut server = Command::new("python3")
            .args(["-c", &script])
            .current_dir(&pki.dir)
            .stdout(Stdio::piped())
            .spawn()
            .expect("this test needs python3");
        let mut ready = String::new();
        io::BufRead::read_line(
            &mut io::BufReader::new(server.stdout.take().unwrap()),
            &mut ready,
        )
        .unwrap();
        let e = get(
            &format!("https://127.0.0.1:{port}/a"),
            Some(&pki.tls("ca", false)),
        );
        let _ = server.kill();
        let _ = server.wait();
        let e = e.unwrap_err();
        assert!(
            matches!(&e, crate::fetch::FetchError::RedirectRefused { location, .. }
                if location == &format!("http://127.0.0.1:{port}/x")),
            "{e}"
        );
    }

    #[test]
    fn mutual_tls_sends_the_device_certificate() {
        let mut pki = Pki::new("mutual");
        let port = pki.serve(true);
        let url = format!("https://127.0.0.1:{port}/index.json");
        let e = get(&url, Some(&pki.tls("ca", false)))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("TLS: the server refused the session: certificate required"),
            "{e}"
        );
        let port = pki.serve(true);
        let url = format!("https://127.0.0.1:{port}/index.json");
        assert_eq!(
            get(&url, Some(&pki.tls("ca", true))).unwrap(),
            b"{\"over\":\"tls\"}"
        );
    }
}
