//! The pure parts of berth's TR-181 view (`Device.SoftwareModules.`, docs/tr181.md): names and
//! values exactly as the Broadband Forum's data model spells them (TR-181 Issue 2 Amendment
//! 19), the Deployment Unit's UUID as TR-181 Annex C defines it, berth's states mapped onto
//! the Execution Unit's, and stable instance numbers.

use std::collections::BTreeMap;

/// `Device.SoftwareModules.`
pub const ROOT: &str = "Device.SoftwareModules.";
/// berth is the one Execution Environment.
pub const EXEC_ENV: &str = "Device.SoftwareModules.ExecEnv.1";
/// A dateTime the device does not know (TR-106's "unknown time").
pub const UNKNOWN_TIME: &str = "0001-01-01T00:00:00Z";
/// `AutoRestart.NextRestart` when no restart is scheduled.
pub const NO_RESTART: &str = "9999-12-31T23:59:59Z";

/// UNIX seconds as a TR-181 dateTime (`2026-11-28T01:02:03Z`); 0 is the unknown time.
pub fn datetime(secs: u64) -> String {
    if secs == 0 {
        return UNKNOWN_TIME.into();
    }
    let (days, rem) = ((secs / 86_400) as i64, secs % 86_400);
    let (y, m, d) = crate::date::civil(days);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// The Execution Unit's `Status` for berth's state of a container (`berth status`).
pub fn eu_status(state: &str) -> &'static str {
    match state {
        "running" | "unhealthy" => "Active",
        "starting" => "Starting",
        "stopping" => "Stopping",
        // Waiting out its restart policy's delay (USP's value since 2.16).
        "backoff" => "Restarting",
        _ => "Idle",
    }
}

/// What the Execution Unit knows of a fault: berth's state, whether the run that failed had
/// started (an exit after the payload ran), the supervisor's reason, and safe mode.
pub fn fault_code(state: &str, ran: bool, reason: Option<&str>, safe_mode: bool) -> &'static str {
    if safe_mode {
        return "UnStartable";
    }
    let dependency = reason.is_some_and(|r| r.contains("depend"));
    match state {
        "failed" | "backoff" if dependency => "DependencyFailure",
        "failed" | "backoff" if ran => "FailureWhileActive",
        "failed" => "FailureOnStart",
        "backoff" => "FailureWhileActive",
        _ => "NoFault",
    }
}

/// A Deployment Unit's UUID (TR-181 Annex C): an RFC 4122 version 5 UUID in the DNS
/// namespace, of `NAME.VENDOR.` with every character of the name outside `[0-9A-Za-z_-]`
/// percent-encoded. It does not change when the unit is updated.
pub fn du_uuid(name: &str, vendor: &str) -> String {
    let mut n = String::new();
    for c in name.chars() {
        if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
            n.push(c);
        } else {
            let mut b = [0u8; 4];
            for byte in c.encode_utf8(&mut b).bytes() {
                n.push_str(&format!("%{byte:02x}"));
            }
        }
    }
    uuid_v5(&DNS_NAMESPACE, format!("{n}.{vendor}.").as_bytes())
}

/// RFC 4122's DNS namespace, 6ba7b810-9dad-11d1-80b4-00c04fd430c8.
const DNS_NAMESPACE: [u8; 16] = [
    0x6b, 0xa7, 0xb8, 0x10, 0x9d, 0xad, 0x11, 0xd1, 0x80, 0xb4, 0x00, 0xc0, 0x4f, 0xd4, 0x30, 0xc8,
];

/// RFC 4122 version 5: SHA-1 of namespace + name, version and variant bits set.
pub fn uuid_v5(namespace: &[u8; 16], name: &[u8]) -> String {
    let mut input = namespace.to_vec();
    input.extend_from_slice(name);
    let h = sha1(&input);
    let mut u = [0u8; 16];
    u.copy_from_slice(&h[..16]);
    u[6] = (u[6] & 0x0f) | 0x50;
    u[8] = (u[8] & 0x3f) | 0x80;
    let hex = crate::index::hex(&u);
    format!(
        "{}-{}-{}-{}-{}",
        &hex[0..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..32]
    )
}

/// SHA-1 (FIPS 180-4), for name-based UUIDs only: never for anything that must resist
/// collisions.
fn sha1(data: &[u8]) -> [u8; 20] {
    let mut h: [u32; 5] = [
        0x6745_2301,
        0xEFCD_AB89,
        0x98BA_DCFE,
        0x1032_5476,
        0xC3D2_E1F0,
    ];
    let mut msg = data.to_vec();
    let bits = (data.len() as u64).wrapping_mul(8);
    msg.push(0x80);
    while msg.len() % 64 != 56 {
        msg.push(0);
    }
    msg.extend_from_slice(&bits.to_be_bytes());
    for block in msg.chunks(64) {
        let mut w = [0u32; 80];
        for (i, word) in block.chunks(4).enumerate() {
            w[i] = u32::from_be_bytes([word[0], word[1], word[2], word[3]]);
        }
        for i in 16..80 {
            w[i] = (w[i - 3] ^ w[i - 8] ^ w[i - 14] ^ w[i - 16]).rotate_left(1);
        }
        let [mut a, mut b, mut c, mut d, mut e] = h;
        for (i, wi) in w.iter().enumerate() {
            let (f, k) = match i {
                0..=19 => ((b & c) | (!b & d), 0x5A82_7999),
                20..=39 => (b ^ c ^ d, 0x6ED9_EBA1),
                40..=59 => ((b & c) | (b & d) | (c & d), 0x8F1B_BCDC),
                _ => (b ^ c ^ d, 0xCA62_C1D6),
            };
            let t = a
                .rotate_left(5)
                .wrapping_add(f)
                .wrapping_add(e)
                .wrapping_add(k)
                .wrapping_add(*wi);
            e = d;
            d = c;
            c = b.rotate_left(30);
            b = a;
            a = t;
        }
        for (x, y) in h.iter_mut().zip([a, b, c, d, e]) {
            *x = x.wrapping_add(y);
        }
    }
    let mut out = [0u8; 20];
    for (i, x) in h.iter().enumerate() {
        out[i * 4..i * 4 + 4].copy_from_slice(&x.to_be_bytes());
    }
    out
}

/// Instance numbers that stay a package's for as long as it is installed (TR-181 rows keep
/// their number); a new package gets the next number never used, a removed one's is not
/// reused. Kept by the daemon across restarts.
#[derive(Debug, Default, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Instances {
    pub numbers: BTreeMap<String, u32>,
    /// Each package's Deployment Unit UUID, fixed at its first sight.
    #[serde(default)]
    pub uuids: BTreeMap<String, String>,
    pub next: u32,
}

impl Instances {
    /// Numbers for exactly `installed` (in that order for the new ones); whether anything
    /// changed (to be saved).
    pub fn assign(&mut self, installed: &[(&str, String)]) -> bool {
        let before = self.clone();
        self.next = self.next.max(1);
        self.numbers
            .retain(|n, _| installed.iter().any(|(i, _)| i == n));
        self.uuids
            .retain(|n, _| installed.iter().any(|(i, _)| i == n));
        for (name, uuid) in installed {
            if !self.numbers.contains_key(*name) {
                self.numbers.insert(name.to_string(), self.next);
                self.next += 1;
            }
            self.uuids
                .entry(name.to_string())
                .or_insert_with(|| uuid.clone());
        }
        *self != before
    }
}

/// Parameter paths and values in the order they were added (the data model's order).
#[derive(Debug, Default)]
pub struct Params(pub Vec<(String, serde_json::Value)>);

impl Params {
    pub fn set(&mut self, prefix: &str, name: &str, v: impl Into<serde_json::Value>) {
        self.0.push((format!("{prefix}{name}"), v.into()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sha1_and_uuid_v5_match_the_known_answers() {
        assert_eq!(
            crate::index::hex(&sha1(b"abc")),
            "a9993e364706816aba3e25717850c26c9cd0d89d"
        );
        assert_eq!(
            crate::index::hex(&sha1(&[b'a'; 1000])),
            "291e9a6c66994949b57ba5e650361e98fc36b1ba"
        );
        assert_eq!(
            crate::index::hex(&sha1(b"")),
            "da39a3ee5e6b4b0d3255bfef95601890afd80709"
        );
        // Python's uuid.uuid5(uuid.NAMESPACE_DNS, …).
        assert_eq!(
            uuid_v5(&DNS_NAMESPACE, b"python.org"),
            "886313e1-3b8a-5372-9b90-0c9aee199e5d"
        );
        // Annex C's example name, and its percent-encoding.
        assert_eq!(
            du_uuid("sample1", "broadband-forum.org"),
            "fe2d23bd-dd02-51b8-af04-f5c18b2b0aa6"
        );
        assert_eq!(
            du_uuid("sample.1", "broadband-forum.org"),
            "0fbf4583-efd7-51b6-8483-7b347f4b521d"
        );
    }

    #[test]
    fn times_states_and_faults_as_the_data_model_spells_them() {
        assert_eq!(datetime(0), UNKNOWN_TIME);
        assert_eq!(datetime(1_795_827_723), "2026-11-28T01:02:03Z");
        assert_eq!(eu_status("unhealthy"), "Active");
        assert_eq!(eu_status("backoff"), "Restarting");
        assert_eq!(eu_status("failed"), "Idle");
        assert_eq!(fault_code("running", true, None, false), "NoFault");
        assert_eq!(
            fault_code("failed", false, Some("exit 1"), false),
            "FailureOnStart"
        );
        assert_eq!(
            fault_code("failed", true, Some("gave up after 3 retries"), false),
            "FailureWhileActive"
        );
        assert_eq!(
            fault_code("backoff", false, Some("dependency db is not ready"), false),
            "DependencyFailure"
        );
        assert_eq!(fault_code("stopped", false, None, true), "UnStartable");
    }

    #[test]
    fn instance_numbers_stay_and_are_never_reused() {
        let mut i = Instances::default();
        let u = |s: &str| s.to_string();
        assert!(i.assign(&[("web", u("w")), ("db", u("d"))]));
        assert_eq!(i.numbers["web"], 1);
        assert_eq!(i.numbers["db"], 2);
        assert!(!i.assign(&[("web", u("w")), ("db", u("d"))]));
        assert!(i.assign(&[("db", u("other"))]));
        assert_eq!(i.numbers.get("web"), None);
        assert_eq!(i.uuids["db"], "d", "a UUID is fixed at first sight");
        assert!(i.assign(&[("db", u("d")), ("web", u("w"))]));
        assert_eq!(
            i.numbers["web"], 3,
            "a removed package's number is not reused"
        );
        assert_eq!(i.numbers["db"], 2);
    }
}
