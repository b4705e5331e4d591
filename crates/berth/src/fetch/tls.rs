//! https:// for the fleet client, through the system's `openssl s_client`.
//!
//! berth carries no TLS stack: a fleet server's channel is the one place TLS matters (the token,
//! and what the server learns of the device), while every byte installed is checked against
//! the signed index whatever the transport. So each request runs `openssl s_client` as a
//! tunnel: the request goes to its stdin, the answer comes from its stdout, and the HTTP
//! client above is the same one plain http:// uses. The server's certificate is verified
//! (chain to `ca_file` or the system's store, and the URL's host name or address) and any
//! failure ends the session before a byte of the request is sent. The program is the one
//! OpenWrt (`openssl-util`), Yocto (`openssl-bin`) and Debian (`openssl`) ship.

use std::io::{self, Read, Write};
use std::os::fd::AsRawFd;
use std::process::{Child, ChildStderr, ChildStdin, ChildStdout, Command, Stdio};
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
    read_timeout: Duration,
    /// Bytes of the answer so far.
    received: u64,
    /// Whether the device showed a certificate.
    has_cert: bool,
}

/// The arguments for a session to `host:port`: verification failures end it
/// (`-verify_return_error`), the name checked is the URL's host (`-verify_hostname`, or
/// `-verify_ip` for an address, which is never sent as SNI), and `-quiet` turns off the
/// program's interactive commands (a line of the request starting with `R` or `Q` must not
/// renegotiate or quit).
pub fn args(tls: &FleetTls, host: &str, port: u16) -> Vec<String> {
    let ip = host.parse::<std::net::IpAddr>().is_ok();
    let connect = if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    };
    let mut a: Vec<String> = ["s_client", "-quiet", "-verify_return_error", "-connect"]
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
        a.extend(["-CAfile".into(), path(ca)]);
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
        read_timeout: Duration,
    ) -> Result<Tunnel, String> {
        let mut child = Command::new(&tls.openssl)
            .args(args(tls, host, port))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| {
                format!(
                    "cannot run {} for the TLS session: {e} (https:// servers need the openssl \
                     program: [fleet] openssl)",
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
            read_timeout,
            received: 0,
            has_cert: tls.cert_file.is_some(),
        })
    }

    /// The request is complete: its end closes stdin (the program keeps the session open
    /// until the server closes it).
    pub fn end_request(&mut self) {
        self.stdin = None;
    }

    /// Why the session failed, from the program's diagnostics, once its answer has ended
    /// early; None when it says nothing but that the server closed the connection after
    /// answering something. Waits at most a second for the program to finish saying it.
    pub fn failure(&mut self) -> Option<String> {
        let mut text = Vec::new();
        if let Some(mut err) = self.stderr.take() {
            let until = Instant::now() + Duration::from_secs(1);
            let mut buf = [0u8; 1024];
            while text.len() < STDERR_LIMIT {
                let left = until.saturating_duration_since(Instant::now());
                let ready = berth_sys::process::poll(
                    &[(err.as_raw_fd(), libc::POLLIN)],
                    left.as_millis() as i32,
                );
                if !ready.is_ok_and(|r| r[0] != 0) {
                    break;
                }
                match err.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => text.extend_from_slice(&buf[..n]),
                }
            }
        }
        diagnose(&String::from_utf8_lossy(&text)).or_else(|| {
            // Some servers (Python's asyncio TLS, so uvicorn) close a session whose client
            // certificate they refuse without an alert.
            (self.received == 0).then(|| {
                let hint = if self.has_cert {
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

impl Read for Tunnel {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let ms = self.read_timeout.as_millis().min(i32::MAX as u128) as i32;
        let ready = berth_sys::process::poll(&[(self.stdout.as_raw_fd(), libc::POLLIN)], ms)?;
        if ready[0] == 0 {
            return Err(io::ErrorKind::TimedOut.into());
        }
        let n = self.stdout.read(buf)?;
        self.received += n as u64;
        Ok(n)
    }
}

impl Write for Tunnel {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match &mut self.stdin {
            Some(w) => w.write(buf),
            None => Err(io::ErrorKind::BrokenPipe.into()),
        }
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
/// connection, an unknown host, an alert from the server) other than the end of the
/// stream, else a failed connect.
pub fn diagnose(stderr: &str) -> Option<String> {
    let lines = || stderr.lines().map(str::trim);
    if let Some(why) = lines().find_map(|l| l.strip_prefix("verify error:num=")) {
        let why = why.split_once(':').map_or(why, |(_, t)| t);
        return Some(format!(
            "the server's certificate failed verification: {why}"
        ));
    }
    // HEX:error:CODE:LIBRARY:FUNCTION:REASON:FILE:LINE[:DATA]
    let library = lines().find_map(|l| {
        let f: Vec<&str> = l.splitn(9, ':').collect();
        (f.len() >= 6 && f[1] == "error" && !f[5].contains("unexpected eof"))
            .then(|| f[5].to_string())
    });
    if let Some(why) = library {
        // "sslv3 alert …", "tlsv13 alert …", "ssl/tls alert …": the server's alert.
        let why = match why.split_once("alert ") {
            Some((_, alert)) => format!("the server refused the session: {alert}"),
            None => why,
        };
        return Some(why);
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
        let a = args(&tls(), "fleet.example", 8443).join(" ");
        assert_eq!(
            a,
            "s_client -quiet -verify_return_error -connect fleet.example:8443 \
             -servername fleet.example -verify_hostname fleet.example -CAfile /etc/berth/ca.pem"
        );
        let mut t = tls();
        t.ca_file = None;
        t.cert_file = Some("/c.pem".into());
        t.key_file = Some("/k.pem".into());
        assert_eq!(
            args(&t, "10.0.0.1", 443).join(" "),
            "s_client -quiet -verify_return_error -connect 10.0.0.1:443 -verify_ip 10.0.0.1 \
             -cert /c.pem -key /k.pem"
        );
        assert!(args(&t, "fd00::1", 443)
            .join(" ")
            .contains("-connect [fd00::1]:443 -verify_ip fd00::1"));
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

    impl Drop for Pki {
        fn drop(&mut self) {
            if let Some(mut c) = self.server.take() {
                let _ = c.kill();
                let _ = c.wait();
            }
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
        // Each of these is refused before s_server's one accept, which the good one used:
        // a refusal must come from the client's checks, not from a closed port.
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
