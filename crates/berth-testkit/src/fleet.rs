//! A simulated fleet's parts (docs/fleet.md), for tests/fleet.rs and `berth-bench fleet`:
//! network namespaces (a server's, with a bridge at 10.77.0.1/16, and one per device on it)
//! and gooseBit (PyPI `goosebit`, a hawkBit DDI server) in the server's namespace, its
//! database made by its own migrations, driven through its management API with curl from
//! inside that namespace.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

/// The gooseBit release the fleet is tested with (scripts/test.sh installs it).
pub const GOOSEBIT_VERSION: &str = "0.2.12";

/// The venv scripts/test.sh installs gooseBit into; `BERTH_GOOSEBIT` names another. None
/// when it is not there.
pub fn goosebit_venv() -> Option<PathBuf> {
    let p = std::env::var_os("BERTH_GOOSEBIT")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/var/cache/berth-package/goosebit-venv"));
    p.join("bin/aerich").exists().then_some(p)
}

/// Runs `sh -c`; stdout, or why it failed.
pub fn sh(c: &str) -> Result<String, String> {
    let o = Command::new("sh")
        .args(["-c", c])
        .output()
        .map_err(|e| format!("sh: {e}"))?;
    if !o.status.success() {
        return Err(format!(
            "{c}: {}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        ));
    }
    Ok(String::from_utf8_lossy(&o.stdout).into_owned())
}

/// The namespaces of a fleet, deleted (their processes killed) when dropped.
pub struct FleetNet {
    pub server: String,
    pub devices: Vec<String>,
}

impl Drop for FleetNet {
    fn drop(&mut self) {
        for ns in self.devices.iter().chain(std::iter::once(&self.server)) {
            let _ = sh(&format!(
                "ip netns pids {ns} 2>/dev/null | xargs -r kill -9; ip netns del {ns} 2>/dev/null"
            ));
        }
    }
}

/// The address of device `i` (10.77.1.1, …, 10.77.1.250, 10.77.2.1, …).
pub fn device_ip(i: usize) -> String {
    format!("10.77.{}.{}", 1 + i / 250, 1 + i % 250)
}

/// The server's address on the bridge.
pub const SERVER_IP: &str = "10.77.0.1";

/// `server` with a bridge at 10.77.0.1/16, and one namespace per name in `devices`, each with
/// `eth0` at [`device_ip`] on that bridge.
pub fn network(server: &str, devices: Vec<String>) -> Result<FleetNet, String> {
    let net = FleetNet {
        server: server.to_string(),
        devices,
    };
    sh(&format!(
        "ip netns add {s} && ip -n {s} link set lo up && ip -n {s} link add br0 type bridge && \
         ip -n {s} addr add {SERVER_IP}/16 dev br0 && ip -n {s} link set br0 up",
        s = net.server
    ))?;
    for (i, d) in net.devices.iter().enumerate() {
        sh(&format!(
            "ip netns add {d} && ip -n {d} link set lo up && \
             ip -n {d} link add eth0 type veth peer name p{i} netns {s} && \
             ip -n {s} link set p{i} master br0 && ip -n {s} link set p{i} up && \
             ip -n {d} addr add {}/16 dev eth0 && ip -n {d} link set eth0 up",
            device_ip(i),
            s = net.server
        ))?;
    }
    Ok(net)
}

/// A test PKI made with the openssl program in `dir`: `ca.pem` (and `ca.key`), `srv.pem` +
/// `srv.key` for [`SERVER_IP`], `dev.pem` + `dev.key` (a device's client certificate, from
/// the same CA), and `other.pem`, a CA that signed none of them.
pub fn make_pki(dir: &Path) -> Result<(), String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let key = "-newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes";
    sh(&format!(
        "cd {d} && for ca in ca other; do openssl req -x509 {key} -days 2 -keyout $ca.key          -out $ca.pem -subj /CN=berth-test-$ca 2>&1 || exit 1; done &&          echo subjectAltName=IP:{SERVER_IP} > srv.ext && echo subjectAltName=DNS:dev > dev.ext &&          for who in srv dev; do openssl req {key} -keyout $who.key -out $who.csr          -subj /CN=$who 2>&1 && openssl x509 -req -in $who.csr -CA ca.pem -CAkey ca.key          -CAcreateserial -days 2 -extfile $who.ext -out $who.pem 2>&1 || exit 1; done",
        d = dir.display()
    ))
    .map(|_| ())
}

/// gooseBit over TLS: its certificate and key, and the CA client certificates must come
/// from (None: none asked for).
pub struct ServerTls {
    pub cert: PathBuf,
    pub key: PathBuf,
    pub ca: PathBuf,
    pub client_ca: Option<PathBuf>,
    /// The client certificate and key the harness's own calls use when one is asked for.
    pub client: Option<(PathBuf, PathBuf)>,
}

impl ServerTls {
    /// The server of [`make_pki`]'s `dir`, asking for client certificates from its CA; the
    /// harness shows the device certificate.
    pub fn mutual(pki: &Path) -> ServerTls {
        ServerTls {
            cert: pki.join("srv.pem"),
            key: pki.join("srv.key"),
            ca: pki.join("ca.pem"),
            client_ca: Some(pki.join("ca.pem")),
            client: Some((pki.join("dev.pem"), pki.join("dev.key"))),
        }
    }
}

/// gooseBit in a namespace, on a fresh SQLite database made by its migrations.
pub struct Goosebit {
    child: Child,
    pub ns: String,
    pub port: u16,
    pub dir: PathBuf,
    token: String,
    tls: Option<ServerTls>,
}

impl Drop for Goosebit {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Goosebit {
    /// Starts it in `ns` on [`SERVER_IP`], polling time `poll` (`HH:MM:SS`), devices
    /// registering their TargetToken at first contact; makes the admin. `hardware`: the
    /// boards (model, revision) the devices will report, recorded before any registers:
    /// gooseBit's `get_or_create` of a board races when many devices register at once,
    /// records it twice, and then answers 500 to every configData naming it (the migrations
    /// record `default`/`default` themselves).
    pub fn start(
        venv: &Path,
        ns: &str,
        dir: &Path,
        poll: &str,
        hardware: &[(&str, &str)],
    ) -> Result<Goosebit, String> {
        Goosebit::start_tls(venv, ns, dir, poll, hardware, None)
    }

    /// [`Goosebit::start`], serving https:// when `tls` is set (uvicorn's TLS).
    pub fn start_tls(
        venv: &Path,
        ns: &str,
        dir: &Path,
        poll: &str,
        hardware: &[(&str, &str)],
        tls: Option<ServerTls>,
    ) -> Result<Goosebit, String> {
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let site = sh(&format!(
            "{}/bin/python -c 'import goosebit,os;print(os.path.dirname(goosebit.__file__))'",
            venv.display()
        ))?;
        std::fs::write(
            dir.join("pyproject.toml"),
            format!(
                "[tool.aerich]\ntortoise_orm = \"goosebit.db.config.TORTOISE_CONF\"\nlocation = \"{}/db/migrations\"\nsrc_folder = \"./.\"\n",
                site.trim()
            ),
        )
        .map_err(|e| e.to_string())?;
        let port = 60053;
        let env = |c: &mut Command| {
            c.current_dir(dir)
                .env(
                    "GOOSEBIT_DB_URI",
                    format!("sqlite://{}/db.sqlite3", dir.display()),
                )
                .env("GOOSEBIT_ARTIFACTS_DIR", dir.join("artifacts"))
                .env("GOOSEBIT_POLL_TIME", poll)
                .env("GOOSEBIT_PORT", port.to_string())
                .env("GOOSEBIT_DEVICE_AUTH__ENABLE", "true")
                .env("GOOSEBIT_DEVICE_AUTH__MODE", "setup")
                .env(
                    "GOOSEBIT_SECRET_KEY",
                    "bXktdGVzdC1zZWNyZXQta2V5LW9mLTMyLWJ5dGVzISE",
                )
                .env("GOOSEBIT_TRACK_DEVICE_IP", "false");
        };
        let mut m = Command::new(venv.join("bin/aerich"));
        m.arg("upgrade");
        env(&mut m);
        let o = m.output().map_err(|e| format!("aerich: {e}"))?;
        if !o.status.success() || !dir.join("db.sqlite3").exists() {
            return Err(format!(
                "aerich upgrade: {}{}",
                String::from_utf8_lossy(&o.stdout),
                String::from_utf8_lossy(&o.stderr)
            ));
        }
        for (model, revision) in hardware {
            let ok = |v: &str| {
                v.chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
            };
            if !ok(model) || !ok(revision) {
                return Err(format!(
                    "hardware {model:?} {revision:?}: letters, digits, -_. only"
                ));
            }
            sh(&format!(
                "{}/bin/python -c \"import sqlite3; c = sqlite3.connect('{}/db.sqlite3'); c.execute('insert into hardware (model, revision) values (?, ?)', ('{model}', '{revision}')); c.commit()\"",
                venv.display(),
                dir.display()
            ))?;
        }
        let log = std::fs::File::create(dir.join("goosebit.log")).map_err(|e| e.to_string())?;
        let mut c = Command::new("ip");
        c.args(["netns", "exec", ns])
            .arg(venv.join("bin/python"))
            .args([
                "-m",
                "uvicorn",
                "goosebit:app",
                "--host",
                SERVER_IP,
                "--port",
            ])
            .arg(port.to_string())
            .args(["--log-level", "warning"]);
        if let Some(t) = &tls {
            c.arg("--ssl-certfile")
                .arg(&t.cert)
                .arg("--ssl-keyfile")
                .arg(&t.key);
            if let Some(ca) = &t.client_ca {
                // 2: ssl.CERT_REQUIRED.
                c.arg("--ssl-ca-certs")
                    .arg(ca)
                    .args(["--ssl-cert-reqs", "2"]);
            }
        }
        c.stdin(Stdio::null())
            .stdout(log.try_clone().map_err(|e| e.to_string())?)
            .stderr(log);
        env(&mut c);
        let child = c.spawn().map_err(|e| format!("uvicorn: {e}"))?;
        let mut g = Goosebit {
            child,
            ns: ns.to_string(),
            port,
            dir: dir.to_path_buf(),
            token: String::new(),
            tls,
        };
        let t0 = Instant::now();
        // Any answer: before its first user, gooseBit sends everything to /setup.
        while g.try_curl(&["-o", "/dev/null", &g.url("/login")]).is_err() {
            if t0.elapsed() > Duration::from_secs(60) {
                return Err(format!("gooseBit did not answer in 60 s:\n{}", g.log()));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let v: Value = serde_json::from_str(&g.curl(&[
            "-X",
            "POST",
            "-d",
            "username=admin@fleet.test&password=fleet-test-pw",
            &g.url("/setup"),
        ])?)
        .map_err(|e| format!("/setup: {e}"))?;
        g.token = v["access_token"]
            .as_str()
            .ok_or("no token from /setup")?
            .to_string();
        Ok(g)
    }

    /// The server process (uvicorn), for its memory and CPU time.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn url(&self, path: &str) -> String {
        let scheme = if self.tls.is_some() { "https" } else { "http" };
        format!("{scheme}://{SERVER_IP}:{}{path}", self.port)
    }

    fn try_curl(&self, args: &[&str]) -> Result<String, String> {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.ns, "curl", "-sS", "--max-time", "60"]);
        if let Some(t) = &self.tls {
            c.arg("--cacert").arg(&t.ca);
            if let Some((cert, key)) = &t.client {
                c.arg("--cert").arg(cert).arg("--key").arg(key);
            }
        }
        let o = c.args(args).output().map_err(|e| e.to_string())?;
        if !o.status.success() {
            return Err(format!(
                "curl {args:?}: {}",
                String::from_utf8_lossy(&o.stderr)
            ));
        }
        Ok(String::from_utf8_lossy(&o.stdout).into_owned())
    }

    fn curl(&self, args: &[&str]) -> Result<String, String> {
        self.try_curl(args)
    }

    /// A management API call with the admin's token.
    pub fn api(&self, method: &str, path: &str, body: Option<Value>) -> Result<Value, String> {
        let auth = format!("Authorization: Bearer {}", self.token);
        let url = self.url(path);
        let mut args = vec!["-X", method, "-H", &auth, "-w", "\n%{http_code}"];
        let body = body.map(|b| b.to_string());
        if let Some(b) = &body {
            args.extend(["-H", "Content-Type: application/json", "--data-binary", b]);
        }
        args.push(&url);
        let out = self.curl(&args)?;
        let (text, code) = out.rsplit_once('\n').unwrap_or(("", &out));
        if !code.starts_with('2') {
            return Err(format!("{method} {path}: {code} {text}"));
        }
        Ok(serde_json::from_str(text).unwrap_or(Value::Null))
    }

    /// Uploads a bundle; the software's id.
    pub fn upload(&self, file: &Path) -> Result<u64, String> {
        let auth = format!("Authorization: Bearer {}", self.token);
        let form = format!("file=@{}", file.display());
        let url = self.url("/api/v1/software");
        let out = self.curl(&[
            "-X",
            "PUT",
            "-H",
            &auth,
            "-F",
            &form,
            "-w",
            "\n%{http_code}",
            &url,
        ])?;
        let (text, code) = out.rsplit_once('\n').unwrap_or(("", &out));
        if code != "200" {
            return Err(format!("upload {}: {code} {text}", file.display()));
        }
        serde_json::from_str::<Value>(text)
            .ok()
            .and_then(|v| v["id"].as_u64())
            .ok_or_else(|| format!("upload {}: no id in {text}", file.display()))
    }

    /// Every device's record (id, feed, last_state, sw_version, …).
    pub fn devices(&self) -> Result<Vec<Value>, String> {
        Ok(self.api("GET", "/api/v1/devices", None)?["devices"]
            .as_array()
            .cloned()
            .unwrap_or_default())
    }

    /// Whether every one of `ids` has registered (for a poll loop: None while not).
    pub fn registered(&self, ids: &[String]) -> Option<()> {
        let d = self.devices().ok()?;
        states(&d, ids)
            .iter()
            .all(|s| s.starts_with("Registered"))
            .then_some(())
    }

    /// Puts `ids` in `feed` (gooseBit's groups).
    pub fn feed(&self, ids: &[String], feed: &str) -> Result<(), String> {
        self.api(
            "PATCH",
            "/api/v1/devices",
            Some(json!({"devices": ids, "feed": feed})),
        )
        .map(|_| ())
    }

    /// A rollout of `software` to `feed`; its id.
    pub fn rollout(&self, name: &str, feed: &str, software: u64) -> Result<u64, String> {
        self.api(
            "PUT",
            "/api/v1/rollouts",
            Some(json!({"name": name, "feed": feed, "software_id": software})),
        )?["id"]
            .as_u64()
            .ok_or_else(|| "no rollout id".to_string())
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("goosebit.log")).unwrap_or_default()
    }
}

/// `last_state sw_version` of each of `ids` in the server's records (`? ?` when missing).
pub fn states(devices: &[Value], ids: &[String]) -> Vec<String> {
    ids.iter()
        .map(|id| {
            let x = devices
                .iter()
                .find(|x| x["id"] == *id)
                .cloned()
                .unwrap_or_default();
            format!(
                "{} {}",
                x["last_state"].as_str().unwrap_or("?"),
                x["sw_version"].as_str().unwrap_or("?")
            )
        })
        .collect()
}
