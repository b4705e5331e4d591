//! https:// through libcurl against real TLS servers on loopback: `openssl s_server` (the
//! openssl program makes the test PKI and serves; berth itself never runs it) and Python's
//! TLS server for answers s_server cannot give.

use std::io;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use berth_core::config::FleetTls;

use crate::fetch::{Call, FetchError, Fetcher};

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
        // 127.0.0.2 is another origin on the same machine (the token test's second host).
        std::fs::write(
            pki.dir.join("ext"),
            "subjectAltName=IP:127.0.0.1,IP:127.0.0.2\n",
        )
        .unwrap();
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
        self.serve_as(mutual, "srv")
    }

    /// Serves with the certificate and key named `cert` (`other`: a self-signed one).
    fn serve_as(&mut self, mutual: bool, cert: &str) -> u16 {
        self.stop();
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let mut cmd = Command::new("openssl");
        cmd.args([
            "s_server",
            "-WWW",
            "-naccept",
            "1",
            "-cert",
            &format!("{cert}.pem"),
            "-key",
            &format!("{cert}.key"),
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

fn get(url: &str, tls: Option<&FleetTls>) -> Result<Vec<u8>, FetchError> {
    let fetcher = Fetcher {
        connect_timeout: Duration::from_secs(5),
        read_timeout: Duration::from_secs(5),
        min_total: Duration::from_secs(10),
    };
    let call = Call {
        method: "GET",
        auth: None,
        json: None,
        tls: tls.map(crate::fetch::TlsFiles::from),
        headers: &[],
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
    // Without a CA file, the system's store: the test CA is not in it.
    let e = get(&url, None).unwrap_err().to_string();
    assert!(
        e.contains("TLS: the server's certificate failed verification"),
        "{e}"
    );
    let port = pki.serve(false);
    let url = format!("https://127.0.0.1:{port}/index.json");
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
    // The certificate names 127.0.0.1 only.
    assert!(
        e.contains("TLS: the server's certificate failed verification: "),
        "{e}"
    );
    assert!(e.contains("'localhost'"), "{e}");
    let mut unreadable = pki.tls("ca", false);
    unreadable.ca_file = Some("/nonexistent/ca.pem".into());
    let e = get(&url, Some(&unreadable)).unwrap_err().to_string();
    assert!(
        e.contains("TLS: [fleet] ca_file /nonexistent/ca.pem: no such file or directory"),
        "{e}"
    );
    let mut no_key = pki.tls("ca", true);
    no_key.key_file = Some("/nonexistent/dev.key".into());
    let e = get(&url, Some(&no_key)).unwrap_err().to_string();
    assert!(
        e.contains("TLS: [fleet] key_file /nonexistent/dev.key: no such file"),
        "{e}"
    );
    // A self-signed server certificate, not from the CA the device trusts.
    let port = pki.serve_as(false, "other");
    let url = format!("https://127.0.0.1:{port}/index.json");
    let e = get(&url, Some(&pki.tls("ca", false))).unwrap_err();
    assert!(e.is_source_failure(), "{e}");
    let e = e.to_string();
    assert!(
        e.contains("failed verification: self-signed certificate"),
        "{e}"
    );
}

/// A redirect from https:// to http:// (the same host) is refused: the answer comes from
/// Python's TLS server.
#[test]
fn https_never_redirects_to_http() {
    let pki = Pki::new("redirect");
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let plain = format!("http://127.0.0.1:{port}/x");
    let mut server = python_tls(&pki, &format!("127.0.0.1:{port}"), &plain);
    let e = get(
        &format!("https://127.0.0.1:{port}/away"),
        Some(&pki.tls("ca", false)),
    );
    let _ = server.kill();
    let _ = server.wait();
    let e = e.unwrap_err();
    assert!(
        matches!(&e, FetchError::RedirectRefused { location, .. } if *location == plain),
        "{e}"
    );
}

/// Python's TLS server on `addr`, answering by path: `/big` 5000 bytes with their length,
/// `/big-chunked` 5000 bytes chunked, `/away` a redirect to `away`, anything else whether
/// the request carried an `Authorization` header.
fn python_tls(pki: &Pki, addr: &str, away: &str) -> std::process::Child {
    let (host, port) = addr.rsplit_once(':').unwrap();
    let script = format!(
        "import http.server, ssl\n\
         class H(http.server.BaseHTTPRequestHandler):\n\
         \x20protocol_version = 'HTTP/1.1'\n\
         \x20def do_GET(self):\n\
         \x20 if self.path == '/big':\n\
         \x20  self.send_response(200); self.send_header('Content-Length', '5000'); self.end_headers(); self.wfile.write(b'x' * 5000)\n\
         \x20 elif self.path == '/big-chunked':\n\
         \x20  self.send_response(200); self.send_header('Transfer-Encoding', 'chunked'); self.end_headers()\n\
         \x20  for _ in range(5): self.wfile.write(b'3e8\\r\\n' + b'y' * 1000 + b'\\r\\n')\n\
         \x20  self.wfile.write(b'0\\r\\n\\r\\n')\n\
         \x20 elif self.path == '/away':\n\
         \x20  self.send_response(302); self.send_header('Location', '{away}'); self.send_header('Content-Length', '0'); self.end_headers()\n\
         \x20 else:\n\
         \x20  b = b'auth' if self.headers.get('Authorization') else b'none'\n\
         \x20  self.send_response(200); self.send_header('Content-Length', str(len(b))); self.end_headers(); self.wfile.write(b)\n\
         \x20def log_message(self, *a): pass\n\
         s = http.server.ThreadingHTTPServer(('{host}', {port}), H)\n\
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
    assert_eq!(ready.trim(), "ready");
    server
}

/// Over https:// as over http://: a body over the limit is refused whether its length is
/// announced or chunked, and the token does not follow a redirect to another host.
#[test]
fn https_oversize_and_cross_host_redirects() {
    let pki = Pki::new("hostile");
    let free = |ip: &str| {
        std::net::TcpListener::bind((ip, 0))
            .unwrap()
            .local_addr()
            .unwrap()
            .port()
    };
    let (p1, p2) = (free("127.0.0.1"), free("127.0.0.2"));
    let there = format!("https://127.0.0.2:{p2}/here");
    let mut a = python_tls(&pki, &format!("127.0.0.1:{p1}"), &there);
    let mut b = python_tls(&pki, &format!("127.0.0.2:{p2}"), &there);
    let tls = pki.tls("ca", false);
    let fetcher = Fetcher {
        connect_timeout: Duration::from_secs(5),
        read_timeout: Duration::from_secs(5),
        min_total: Duration::from_secs(10),
    };
    let call = Call {
        method: "GET",
        auth: Some("TargetToken secret"),
        json: None,
        tls: Some(crate::fetch::TlsFiles::from(&tls)),
        headers: &[],
    };
    let results = (
        fetcher.call(&format!("https://127.0.0.1:{p1}/big"), call, 1000),
        fetcher.call(&format!("https://127.0.0.1:{p1}/big-chunked"), call, 1000),
        fetcher.call(&format!("https://127.0.0.1:{p1}/home"), call, 1000),
        fetcher.call(&format!("https://127.0.0.1:{p1}/away"), call, 1000),
    );
    for c in [&mut a, &mut b] {
        let _ = c.kill();
        let _ = c.wait();
    }
    for r in [results.0, results.1] {
        let e = r.unwrap_err();
        assert!(matches!(e, FetchError::TooLarge { limit: 1000, .. }), "{e}");
    }
    assert_eq!(
        results.2.unwrap(),
        b"auth",
        "the token goes to its own origin"
    );
    assert_eq!(
        results.3.unwrap(),
        b"none",
        "and not to another host a redirect names"
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
